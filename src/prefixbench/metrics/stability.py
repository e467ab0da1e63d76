"""Is a run a steady state? Offered load per stage, queue trends, and the verdict.

A run is *stable* when no queue grows without bound. Two kinds of evidence, both from the
per-request table, the run's stats and the prepared scenario (never the engine internals):

- **Offered load**: each stage's utilisation ρ = offered work / service capacity, from the
  cost model and the measured per-request work (prefill pool, KV link, decode batch slots,
  decode KV memory). A queueing stage with ρ ≥ 1 cannot keep up, whatever the run length.
- **Trend**: the mean wait at each stage in the last third of the measured window against
  the first third, as a z-score over detrended batch means. A wait that grows significantly
  *and* by more than its own scale is a queue running away.

Thresholds and their reasons are in docs/model.md ("Stability").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from numba import njit

from prefixbench.physics.costmodel import decode_iteration_time, prefill_times, recompute_time

STAGES = ("prefill", "link", "decode_slots", "decode_memory", "host_path", "l3_store")
LABELS = {
    "prefill": "prefill pool",
    "link": "KV link",
    "decode_slots": "decode batch slots",
    "decode_memory": "decode KV memory",
    "host_path": "host path",
    "l3_store": "L3 store",
}
RHO_LIMIT = 1.0  # a queueing stage at or above this cannot keep up (see docs/model.md)
TREND_BLOCKS = 12  # batch means over the measured window (4 per third)
TREND_Z = 4.0  # significance of last-third minus first-third growth, in detrended sigmas
MIN_TREND_POINTS = 60  # fewer waits than this at a stage: no trend is computed
QUEUES = ("prefill", "admission", "link", "decode")  # queue-length columns (sweep line)


@dataclass
class Trend:
    z: float  # growth / its standard error
    growth_s: float  # last-third mean wait − first-third mean wait (s)
    first_s: float  # first-third mean wait (s)
    scale_s: float  # the stage's own service time (s)

    @property
    def growing(self) -> bool:
        return self.z > TREND_Z and self.growth_s > max(self.first_s, self.scale_s)


@dataclass
class Stability:
    stable: bool
    offered_rps: float
    rho: dict[str, float | None]  # at the offered rate, per stage
    rho_effective: dict[str, float | None]  # after a loss stage upstream shed its excess
    loss_memory: bool  # decode memory sheds load (rejects) instead of queueing
    bottleneck: str | None
    saturated: str | None  # the stage that makes the run unstable (None when stable)
    capacity_rps: float | None
    trends: dict[str, Trend] = field(default_factory=dict)
    ttft_growth: float | None = None
    queues: dict[str, float] = field(default_factory=dict)

    def columns(self) -> dict:
        """The summary-row columns (JSON-safe: None, never NaN)."""
        grow = max(self.trends.items(), key=lambda kv: kv[1].z, default=(None, None))
        stage = self.saturated or self.bottleneck
        row = {
            "stable": self.stable,
            "saturated_stage": self.saturated,
            "bottleneck_stage": stage,
            "rho_bottleneck": _safe(self.rho.get(stage)) if stage else None,
            "capacity_rps": self.capacity_rps,
            "offered_rps": self.offered_rps,
            **{f"rho_{k}": _safe(self.rho.get(k)) for k in STAGES},
            "wait_growth_stage": grow[0],
            "wait_growth_ms": _safe(grow[1].growth_s * 1e3) if grow[1] else None,
            "wait_growth_z": _safe(grow[1].z) if grow[1] else None,
            "ttft_growth": _safe(self.ttft_growth),
            **{k: _safe(v) for k, v in self.queues.items()},
        }
        return row

    def warning(self, name: str) -> str | None:
        """One line for stderr when unstable, naming the stage and the capacity."""
        if self.stable:
            return None
        return unstable_line(name, self.columns())


def warnings(rows: list[dict], label: str = "policy") -> list[str]:
    """The stderr warning of every unstable row (summary or aggregated rows)."""
    return [unstable_line(str(r[label]), r) for r in rows if r.get("stable") is False]


def sweep_warning(agg: pl.DataFrame) -> str | None:
    """One stderr line for a sweep whose aggregated points include unstable ones."""
    bad = agg.filter(~pl.col("stable"))
    if bad.height == 0:
        return None
    counts = bad.group_by("saturated_stage").len().sort(["len", "saturated_stage"], descending=True)
    parts = ", ".join(f"{LABELS.get(st, st or 'a queue')}: {n}" for st, n in counts.iter_rows())
    return (
        f"warning: {bad.height} of {agg.height} results (a policy on a scenario, over its "
        f"seeds) are unstable ({parts}); they are marked stable=false and not ranked by "
        "recommend"
    )


def _safe(v):
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def unstable_line(name: str, row: dict) -> str:
    """The warning for an unstable summary (or aggregated) row."""
    stage = row.get("saturated_stage") or row.get("bottleneck_stage")
    label = LABELS.get(stage, stage or "a stage")
    cap = row.get("capacity_rps")
    rho = row.get(f"rho_{stage}") if stage else None
    if rho is not None and rho >= RHO_LIMIT:
        verb = "saturate" if label.endswith("s") else "saturates"
        what = f"the {label} {verb} (ρ={rho:.2f})"
    else:
        what = f"the {label} queue grows through the run"
    tail = f"; it would be stable below about {cap:.3g} req/s" if cap else ""
    return f"warning: {name} is unstable: {what}{tail}"


# ------------------------------------------------------------------ offered load


def _prefill_busy(cost, budget: int, new: np.ndarray, cached: np.ndarray) -> float:
    """Busy time to prefill these requests in arrival order in full batches (the engine's
    rule: add requests while the new tokens fit the token budget; at least one): the
    batches are cut first, then priced together (costmodel.prefill_time, per batch)."""
    n = len(new)
    if n == 0:
        return 0.0
    csum = np.concatenate(([0], np.cumsum(new)))
    starts = np.empty(n, dtype=np.int64)  # allocated here: see _batch_starts
    k = _batch_starts(csum, budget, starts)
    return float(prefill_times(cost, new, cached, starts[:k]).sum())


@njit(cache=True)
def _batch_starts(csum, budget, out):
    """How many batches, their starts written to ``out`` from request 0, ``csum`` the
    running new-token sums (from 0): each batch takes requests while their sum fits
    ``budget`` (the last ``j`` with ``csum[j] <= csum[i] + budget``, numpy's
    ``searchsorted(side="right") - 1``), and at least one; one compiled forward scan instead
    of a search per request and a Python loop per batch. ``out`` (one slot per request) is
    allocated by the caller, so that loading this code imports no numba array module
    (docs/performance.md "The default path's fixed cost")."""
    n = csum.shape[0] - 1
    k, i, j = 0, 0, 0
    while i < n:
        out[k] = i
        k += 1
        cut = csum[i] + budget
        j = max(j, i)
        while j + 1 <= n and csum[j + 1] <= cut:
            j += 1
        i = max(j, i + 1)
    return k


def _col(df: pl.DataFrame, name: str) -> np.ndarray:
    return df[name].cast(pl.Float64).to_numpy()


# the per-request columns the verdict reads (besides ``outcome`` and ``warmup``)
COLUMNS = (
    "arrival",
    "prompt_tokens",
    "output_tokens",
    "prefill_hit_tokens",
    "replica_hit_tokens",
    "transfer_tokens",
    "recompute_tokens",
    "t_prefill_start",
    "t_prefill_end",
    "t_admit",
    "t_transfer_start",
    "t_transfer_end",
    "t_recompute_start",
    "t_recompute_end",
    "t_decode_start",
    "t_first_token",
    "t_done",
)


class Cols:
    """The verdict's inputs as float64 numpy columns, in request order, with two masks:
    ``completed`` and ``warmup``. ``rows(mask)`` is the same table restricted to a mask."""

    def __init__(self, cols: dict[str, np.ndarray], completed: np.ndarray, warmup: np.ndarray):
        self.c = cols
        self.completed = completed
        self.warmup = warmup

    @classmethod
    def of_frame(cls, df: pl.DataFrame) -> Cols:
        cols = {k: _col(df, k) for k in COLUMNS}
        done = (df["outcome"] == "completed").fill_null(False).to_numpy()
        return cls(cols, done, df["warmup"].to_numpy().astype(bool))

    @classmethod
    def of_run(cls, run) -> Cols:
        """The same inputs from a run's numpy columns (metrics/runcols.RunCols), each cast
        to float64 only when the verdict first reads it."""
        return cls(_Float(run), run.completed, run.warmup)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.c[name]

    def __len__(self) -> int:
        return len(self.c["arrival"])

    def rows(self, mask: np.ndarray) -> Cols:
        """These rows restricted to ``mask``; a subset of a subset selects from the whole
        columns (one mask), so only the columns each subset reads are copied, once."""
        if isinstance(self.c, _Masked):
            inner = self.c.mask
            full = np.zeros(len(inner), dtype=bool)
            full[np.flatnonzero(inner)[mask]] = True
            sub = _Masked(self.c.base, full)
        else:
            sub = _Masked(self.c, mask)
        return Cols(sub, self.completed[mask], self.warmup[mask])


class _Float(Mapping):
    """A run's whole columns as float64, cast when read (not kept: a masked subset keeps
    what it takes, and the whole columns are read once each)."""

    def __init__(self, run) -> None:
        self._run = run

    def __getitem__(self, name: str) -> np.ndarray:
        return np.asarray(self._run.column(name), dtype=np.float64)

    def take(self, name: str, mask: np.ndarray) -> np.ndarray:
        """``self[name][mask]`` without a whole float64 copy of an integer column."""
        return np.asarray(self._run.column(name, mask), dtype=np.float64)

    def __iter__(self):
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)


class _Masked(Mapping):
    """Columns restricted to a mask, each selected when first read (a verdict reads a few
    of the columns of each subset it takes, and copying all of them was its main cost)."""

    def __init__(self, cols: Mapping[str, np.ndarray], mask: np.ndarray) -> None:
        self.base, self.mask, self._taken = cols, mask, {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._taken:
            take = getattr(self.base, "take", None)
            col = take(name, self.mask) if take else self.base[name][self.mask]
            self._taken[name] = col
        return self._taken[name]

    def __iter__(self):
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)


def offered_load(prep, df, stats: dict) -> tuple[float, dict, bool]:
    """(offered rate req/s, ρ per stage at that rate, whether memory is a loss stage)."""
    s = prep.scenario
    cols = df if isinstance(df, Cols) else Cols.of_frame(df)
    steady = cols.rows(~cols.warmup)
    arr = steady["arrival"]
    span = float(arr[-1] - arr[0]) if len(arr) > 1 else 0.0
    lam = (len(arr) - 1) / span if span > 0 else 0.0
    rho: dict[str, float | None] = dict.fromkeys(STAGES)
    paged = getattr(s.memory, "admission", "reserve") == "paged"
    if span <= 0:
        return lam, rho, True
    # each step reads its own subset, whose copied columns go when it returns
    rho["prefill"] = _prefill_load(prep, steady, span)
    rho["link"], slot_s = _admitted_load(prep, steady, lam)
    rho["decode_slots"] = _slots_load(prep, steady, lam, slot_s, rho["prefill"])
    del steady, arr
    rho["decode_memory"] = _memory_load(prep, cols, stats, lam, paged)
    rho["host_path"] = host_path_load(prep.base, stats, span)
    rho["l3_store"] = l3_store_load(prep.base, stats, span)
    return lam, rho, _memory_sheds(s, paged)


def _instances(prep) -> tuple[bool, int]:
    """(colocated, the instances that prefill)."""
    s, b = prep.scenario, prep.base
    colocated = s.cluster.mode == "colocated"
    n = s.cluster.prefill_instances + s.cluster.decode_instances if colocated else b.n_prefill
    return colocated, n


def _prefill_load(prep, steady: Cols, span: float) -> float:
    """ρ of the prefill pool: busy time of the steady prompts in full batches."""
    b = prep.base
    colocated, n_inst = _instances(prep)
    pcost = b.decode_cost if colocated else b.prefill_cost
    prompt, hit = steady["prompt_tokens"], steady["prefill_hit_tokens"]
    return _prefill_busy(pcost, b.prefill_token_budget, prompt - hit, hit) / span / n_inst


def _admitted_load(prep, steady: Cols, lam: float) -> tuple[float | None, float]:
    """(ρ of the KV link, the mean decode time a recompute or a replay job adds per
    admitted request)."""
    b = prep.base
    colocated, _ = _instances(prep)
    admitted = steady.rows(~np.isnan(steady["t_admit"]))
    n_adm = len(admitted)
    if colocated or not n_adm:
        return None, 0.0
    # the decode time a recompute takes: the compute of the tokens its job computes itself
    # (its chunks ride in decode iterations, docs/model.md §1.9, so its span overlaps decoding)
    rc = recompute_time(b.decode_cost, admitted["recompute_tokens"])
    w = getattr(b.decode_cost, "ced_window", 0.0)
    if w:  # a CED model's replay job rides there too (§2.12;
        # priced as a recompute of its w tokens: a little low, it also attends the prompt)
        rc = rc + recompute_time(b.decode_cost, np.minimum(w, admitted["prompt_tokens"]))
    nbytes = admitted["transfer_tokens"] * prep.kv_bpt
    if getattr(b, "link_topology", "private_paths") == "shared_nics":
        # the busiest NIC group: λ/min(P, D) of the transfers at the sharded rate
        rate = b.link_bytes_per_s * min(b.nics_prefill, b.nics_decode)
        cap = rate * min(b.n_prefill, b.n_decode)
    else:
        cap = b.link_bytes_per_s * b.link_channels * b.n_prefill * b.n_decode
    return lam * float(nbytes.mean()) / cap, (float(rc.mean()) if len(rc) else 0.0)


def _slots_load(prep, steady: Cols, lam: float, rc_s: float, rho_prefill: float) -> float:
    """ρ of the decode batch slots: each steady request's decode time at a full batch."""
    b = prep.base
    colocated, n_inst = _instances(prep)
    prompt, out = steady["prompt_tokens"], steady["output_tokens"]
    m, d = b.max_batch, (n_inst if colocated else b.n_decode)
    ctx = float((out * (prompt + out / 2)).sum() / max(out.sum(), 1.0))  # per resident sequence
    t_it = float(decode_iteration_time(b.decode_cost, m, m * ctx))
    slot_s = float(out.mean()) * t_it / m + rc_s
    return lam * slot_s / d + (rho_prefill if colocated else 0.0)


def _memory_load(prep, cols: Cols, stats: dict, lam: float, paged: bool) -> float | None:
    """ρ of the decode KV memory: the completed steady requests' KV held over their stay."""
    b = prep.base
    colocated, _ = _instances(prep)
    done = cols.rows(~cols.warmup & ~np.isnan(cols["t_admit"]) & cols.completed)
    if colocated or not len(done):
        return None
    p, o = done["prompt_tokens"], done["output_tokens"]
    need = p - done["replica_hit_tokens"] + (o / 2 if paged else o)
    xfer = np.nan_to_num(done["t_transfer_end"] - done["t_transfer_start"])
    rcd = np.nan_to_num(done["t_recompute_end"] - done["t_recompute_start"])
    hold = done["t_done"] - done["t_decode_start"] + xfer + rcd
    budget = float(stats.get("budget_tokens", b.budget_tokens)) * b.n_decode
    return lam * float((need * hold).mean()) / budget


def host_path_load(b, stats: dict, span: float) -> float | None:
    """ρ of the decode instances' host<->GPU paths (docs/model.md §5.4): the seconds of path
    time the run's moves need (demotions, promotions, write-through copies, swaps after
    warm-up) over the steady arrivals' span, per instance, like the link's offered load.
    FCFS with nothing shed, so ρ ≥ 1 means the copies fall further behind the longer the
    run; None when no move used the path."""
    nbytes = float(stats.get("host_path_bytes", 0.0) or 0.0)
    rate = float(getattr(b, "host_path_bytes_per_s", 0.0) or 0.0)
    window = span
    if nbytes <= 0 or rate <= 0 or window <= 0:
        return None
    return nbytes / rate / window / max(int(getattr(b, "n_decode", 1)), 1)


def l3_store_load(b, stats: dict, span: float) -> float | None:
    """ρ of the shared L3 store's one queue (docs/model.md §1.13.1): the seconds its reads
    and writes after warm-up need (``l3_bytes`` / its rate) over the steady arrivals' span.
    FCFS with nothing shed, like the host path; None when nothing used the store."""
    nbytes = float(stats.get("l3_bytes", 0.0) or 0.0)
    rate = float(getattr(b, "l3_store_bytes_per_s", 0.0) or 0.0)
    if nbytes <= 0 or rate <= 0 or span <= 0:
        return None
    return nbytes / rate / span


def _memory_sheds(s, paged: bool) -> bool:
    """Whether a full decode memory rejects (a loss stage) rather than queues without end."""
    mem = s.memory
    if paged:
        return getattr(mem, "queue_timeout_s", None) is not None
    timeout = getattr(mem, "wait_timeout_s", None)
    return mem.on_full == "reject" or (timeout is not None and math.isfinite(timeout))


# ------------------------------------------------------------------ trends and queues


_TX = np.arange(TREND_BLOCKS, dtype=np.float64) - (TREND_BLOCKS - 1) / 2.0  # centred x


def trend(w: np.ndarray, scale: float) -> Trend | None:
    """Last-third minus first-third mean of ``w`` (in order), and its z-score.

    The standard error comes from the residuals of a straight line through
    ``TREND_BLOCKS`` batch means, so a steady drift does not hide itself in its own noise."""
    w = w[np.isfinite(w)]
    if len(w) < MIN_TREND_POINTS:
        return None
    k = TREND_BLOCKS
    # np.array_split's blocks: the first len % k hold one extra point
    q, r = divmod(len(w), k)
    sizes = np.full(k, q)
    sizes[:r] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    means = np.add.reduceat(w, starts) / sizes
    # least-squares line through (x, means), in closed form about the centre of x
    slope = float((_TX * means).sum() / (_TX * _TX).sum())
    resid = means - (slope * _TX + float(means.mean()))
    sd = math.sqrt(float((resid**2).sum()) / (k - 2))
    third = k // 3
    first, last = float(means[:third].mean()), float(means[-third:].mean())
    growth = last - first
    se = sd * math.sqrt(2.0 / third)
    tiny = 1e-9 * max(abs(first), abs(last), scale, 1e-12)
    z = growth / se if se > tiny else (0.0 if abs(growth) <= tiny else math.copysign(1e9, growth))
    return Trend(z, growth, first, scale)


def _mean_finite(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else 0.0


def stage_waits(df) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """Per stage: (enter, leave) times of its wait and the stage's own service scale (s)."""
    c = df if isinstance(df, Cols) else Cols.of_frame(df)
    ready = np.fmax(c["t_transfer_end"], c["t_recompute_end"])
    hold = c["t_done"] - c["t_decode_start"]
    return {
        "prefill": (
            c["arrival"],
            c["t_prefill_start"],
            _mean_finite(c["t_prefill_end"] - c["t_prefill_start"]),
        ),
        "decode_memory": (c["t_prefill_end"], c["t_admit"], _mean_finite(hold)),
        "link": (
            c["t_admit"],
            c["t_transfer_start"],
            _mean_finite(c["t_transfer_end"] - c["t_transfer_start"]),
        ),
        "decode_slots": (
            ready,
            c["t_decode_start"],
            _mean_finite(c["t_first_token"] - c["t_decode_start"]),
        ),
    }


def queue_lengths(
    enter: np.ndarray, leave: np.ndarray, t0: float, t1: float
) -> tuple[float, float]:
    """Time-average and maximum number waiting over [t0, t1] (a sweep line over the waits)."""
    enter = np.asarray(enter, dtype=np.float64)
    a, z, inside = (np.empty(len(enter)) for _ in range(3))  # allocated here: see _waits
    k = _waits(enter, np.asarray(leave, dtype=np.float64), t0, t1, a, z, inside)
    a, z, inside = a[:k], z[:k], inside[:k]
    span = max(t1 - t0, 1e-12)
    area = float(inside.sum())  # numpy's sum of the same values: the same bits
    if not len(a):
        return 0.0, 0.0
    # leaves first at equal times: a merge of the sorted leaves and enters (the count
    # after each event, an exact integer, as a stable sort of leaves-then-enters has it)
    z.sort(kind="stable")  # a and z are copies; timsort: nearly sorted times
    a.sort(kind="stable")
    peak = _peak(z, a, float(t0), float(t1))
    return area / span, peak


@njit(cache=True)
def _waits(enter, leave, t0, t1, a, z, d):
    """How many finite waits (leave > enter), their enters, leaves and time inside
    [t0, t1] written in order to ``a``, ``z`` and ``d`` (allocated by the caller, as in
    _batch_starts): ``np.clip`` of each end to the window, their difference at least 0."""
    n = enter.shape[0]
    k = 0
    for i in range(n):
        e, lv = enter[i], leave[i]
        if np.isfinite(e) and np.isfinite(lv) and lv > e:
            a[k], z[k] = e, lv
            d[k] = max(min(max(lv, t0), t1) - min(max(e, t0), t1), 0.0)
            k += 1
    return k


@njit(cache=True)
def _peak(z, a, t0, t1):
    """The most waiting at once over [t0, t1] (at least the number waiting at ``t0``):
    leaves ``z`` and enters ``a``, each sorted, merged with a leave first at a tie."""
    i = j = 0
    count = 0.0
    at_start = 0.0
    best = 0.0
    n = a.shape[0]
    while i < n or j < n:
        if j < n and (i >= n or z[j] <= a[i]):
            t = z[j]
            count -= 1.0
            j += 1
        else:
            t = a[i]
            count += 1.0
            i += 1
        if t < t0:
            at_start = count
        elif t <= t1 and count > best:
            best = count
    return max(at_start, best)


# ------------------------------------------------------------------ verdict


def assess(prep, df: pl.DataFrame | Cols, stats: dict) -> Stability:
    """The stability verdict of one run (``df``: its per-request table, in request order, or
    the same columns as ``Cols``)."""
    df = df if isinstance(df, Cols) else Cols.of_frame(df)
    lam, rho, sheds = offered_load(prep, df, stats)
    eff = dict(rho)
    mem = rho.get("decode_memory")
    if sheds and mem is not None and mem > 1.0:
        for k in ("link", "decode_slots"):  # downstream of admission: see only what it admits
            if eff[k] is not None:
                eff[k] = eff[k] / mem
    queueing = [k for k in STAGES if eff[k] is not None and not (k == "decode_memory" and sheds)]
    over = [k for k in queueing if eff[k] >= RHO_LIMIT]
    trends, ttft_growth, done_rate = _trends(df)
    growing = [k for k, t in trends.items() if t.growing]

    known = {k: v for k, v in eff.items() if v is not None}
    bottleneck = max(known, key=known.get) if known else None
    saturated = None
    if over:
        saturated = max(over, key=lambda k: eff[k])
    elif growing:
        saturated = max(growing, key=lambda k: trends[k].z)
    stable = saturated is None
    cap_stage = saturated or bottleneck
    cap = None
    if cap_stage is not None and rho[cap_stage]:
        cap = lam / rho[cap_stage]
        if saturated is not None and rho[cap_stage] < RHO_LIMIT:  # a trend the model missed
            cap = min(cap, done_rate)
    queues = _queues(df, stats)
    return Stability(
        stable, lam, rho, eff, sheds, bottleneck, saturated, cap, trends, ttft_growth, queues
    )


def _trends(df: Cols) -> tuple[dict[str, Trend], float | None, float]:
    """The steady requests' wait trend per stage, their TTFT growth, and their completions
    per second (the steady subset's columns go when this returns)."""
    steady = df.rows(~df.warmup)
    trends = {}
    for k, (a, z, scale) in stage_waits(steady).items():
        t = trend(z - a, scale)
        if t is not None:
            trends[k] = t
    ttft = trend(steady["t_first_token"] - steady["arrival"], 0.0)
    ttft_growth = (
        (ttft.first_s + ttft.growth_s) / ttft.first_s if ttft and ttft.first_s > 0 else None
    )
    return trends, ttft_growth, float(steady.completed.sum()) / _span(steady)


_QUEUE_NAMES = {
    "prefill": "prefill",
    "decode_memory": "admission",
    "link": "link",
    "decode_slots": "decode",
}


def _queues(df: Cols, stats: dict) -> dict[str, float]:
    """Time-average and peak queue length per stage over [t_warm, t_end], one stage at a
    time."""
    t0, t1 = stats.get("t_warm", 0.0), stats.get("t_end", 0.0)
    queues = {}
    for k, name in _QUEUE_NAMES.items():
        a, z = _enter_leave(df, k)
        mean, peak = queue_lengths(a, z, t0, t1)
        del a, z
        queues[f"queue_{name}_mean"] = mean
        queues[f"queue_{name}_max"] = peak
    return queues


def _enter_leave(c: Cols, stage: str) -> tuple[np.ndarray, np.ndarray]:
    """(enter, leave) times of a stage's wait, as ``stage_waits`` has them."""
    if stage == "prefill":
        return c["arrival"], c["t_prefill_start"]
    if stage == "decode_memory":
        return c["t_prefill_end"], c["t_admit"]
    if stage == "link":
        return c["t_admit"], c["t_transfer_start"]
    return np.fmax(c["t_transfer_end"], c["t_recompute_end"]), c["t_decode_start"]


def _span(df: Cols) -> float:
    arr = df["arrival"]
    return max(float(arr[-1] - arr[0]), 1e-12) if len(arr) > 1 else 1e-12


# ------------------------------------------------------------------ per-instance busy time


def _union_length(start: np.ndarray, end: np.ndarray, t0: float, t1: float) -> float:
    """Length of the union of intervals [start, end) clipped to [t0, t1]."""
    ok = np.isfinite(start) & np.isfinite(end)
    a, z = np.clip(start[ok], t0, t1), np.clip(end[ok], t0, t1)
    keep = z > a
    a, z = a[keep], z[keep]
    if not len(a):
        return 0.0
    order = np.argsort(a, kind="stable")
    a, z = a[order], np.maximum.accumulate(z[order])
    gaps = np.clip(a[1:] - z[:-1], 0.0, None).sum()
    return float(z[-1] - a[0] - gaps)


def _floats(col) -> np.ndarray:
    """A column (polars or numpy) as float64 numpy."""
    return (
        col.cast(pl.Float64).to_numpy()
        if isinstance(col, pl.Series)
        else np.asarray(col, dtype=np.float64)
    )


def instance_busy(df: pl.DataFrame | Mapping, stats: dict, n_prefill: int, n_decode: int) -> dict:
    """Busy fraction of each prefill instance (its steps) and each decode instance (at least
    one sequence decoding) over the steady window [t_warm, t_steady] (utilisation.py), from
    the per-request timestamps; reported as the least and most loaded instance so a split is
    visible."""
    t0 = float(stats.get("t_warm", 0.0))
    t1 = float(stats.get("t_steady", stats.get("t_end", 0.0)))
    span = max(t1 - t0, 1e-12)
    out = {}
    for role, n, a, z in (
        ("prefill", n_prefill, "t_prefill_start", "t_prefill_end"),
        ("decode", n_decode, "t_decode_start", "t_done"),
    ):
        engine = _engine_busy(stats, role, n)
        if engine is not None:  # the figures prefill_util / decode_util average
            busy = [b / span for b in engine]
        else:
            inst = np.asarray(df[f"{role}_instance"])
            start, end = _floats(df[a]), _floats(df[z])
            busy = [
                _union_length(start[inst == i], end[inst == i], t0, t1) / span for i in range(n)
            ]
        out[f"{role}_util_min"] = min(busy) if busy else None
        out[f"{role}_util_max"] = max(busy) if busy else None
    return out


def _engine_busy(stats: dict, role: str, n: int) -> list[float] | None:
    """The engine's busy seconds per instance of ``role`` (a colocated instance's prefill and
    decode busy time are one figure), so the min and max bracket the mean the summary shows;
    None when the stats do not carry them."""
    busy = stats.get(f"{role}_busy_s")
    if busy is None and role == "prefill" and "prefill_busy_s" not in stats:
        busy = (
            stats.get("decode_busy_s")
            if stats.get("prefill_util") == stats.get("decode_util")
            else None
        )
    return [float(b) for b in busy] if busy is not None and len(busy) == n and n else None


def warm_up() -> None:
    """Compile (or load from the cache) the verdict's compiled passes on tiny inputs, with
    the types a run gives them (the package build calls this, setup.py)."""
    queue_lengths(np.array([0.0, 1.0]), np.array([2.0, 3.0]), 0.0, 4.0)
    _batch_starts(np.array([0.0, 1.0, 2.0]), 1, np.empty(2, dtype=np.int64))  # as a run's
