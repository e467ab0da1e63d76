"""`prefixbench map`: which policy wins where, on a fine grid of two axes.

Each cell of an X × Y grid is one scenario (the workload with both axis values set); every
policy runs on the same requests in each seed. The cell's winner is the policy with the best
mean metric among those stable on every seed (an unstable run is not a steady state:
docs/model.md, "Stability"). The margin over the runner-up is paired per seed, with a 95%
Student-t interval; a margin whose interval reaches 0 is a tie.

Runs are computed through the public runner (``prepare``, ``simulate_policy``). Per-run
metrics follow the summary-row definitions of docs/model.md §5.3 but are computed with numpy
on the engine's columns (a full ``metrics.summarize`` costs ~20 ms per run, the whole map
budget); the stability verdict is ``stability.assess`` itself. A test checks both against
``summarize`` on the same run.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from prefixbench.io.artifacts import register
from prefixbench.physics.costmodel import client_overhead_ms

from ..errors import ScenarioError
from .margins import REJECT_SLACK, is_tie, paired_margin

# ---------------------------------------------------------------- axes and metrics


@dataclass(frozen=True)
class Axis:
    """One sweepable scenario knob: its --set path, default range and how to show it."""

    field: str  # scenario path set with --set
    label: str  # axis title (with unit)
    lo: float
    hi: float
    log: bool
    fmt: Callable[[float], str]  # tick text (short)

    def values(self, n: int, lo: float | None = None, hi: float | None = None) -> list[float]:
        a, b = (self.lo if lo is None else lo), (self.hi if hi is None else hi)
        if n == 1:
            return [float(a)]
        v = np.geomspace(a, b, n) if self.log else np.linspace(a, b, n)
        return [float(f"{x:.4g}") for x in v]  # short, reproducible values in file and ids

    def override(self, value: float) -> str:
        return f"{self.field}={value!r}"


def _g(x: float) -> str:
    return f"{x:.3g}"


# A new axis is one entry: the scenario field, its unit and its default range.
AXES: dict[str, Axis] = {
    "budget": Axis(
        "memory.budget_factor", "decode KV budget factor (× reference demand)", 0.3, 1.5, False, _g
    ),
    "bandwidth": Axis(
        "cluster.link.bandwidth_gbps",
        "KV link bandwidth (GB/s, gigabytes per second)",
        0.1,
        100.0,
        True,
        _g,
    ),
    "prefix": Axis(
        "workload.prefixes.length.mean",
        "mean shared-prefix length (tokens)",
        128.0,
        8192.0,
        True,
        lambda x: f"{x:.0f}",
    ),
    "rate": Axis("workload.arrivals.rate", "arrival rate (requests/s)", 2.0, 40.0, True, _g),
}


@dataclass(frozen=True)
class Metric:
    column: str
    higher_is_better: bool
    label: str


METRICS: dict[str, Metric] = {
    "ttft": Metric("ttft_mean_ms", False, "mean TTFT (ms)"),
    "ttft_p99": Metric("ttft_p99_ms", False, "p99 TTFT (ms)"),
    "goodput": Metric("goodput_rps", True, "goodput (req/s within SLO)"),
}
DEFAULT_REQUESTS = 300  # per cell and seed: the map's budget is seconds (docs/performance.md)
DEFAULT_WARMUP = 60

RUN_COLUMNS = {
    "x": pl.Float64,
    "y": pl.Float64,
    "seed": pl.Int64,
    "policy": pl.Utf8,
    "ttft_mean_ms": pl.Float64,
    "ttft_p99_ms": pl.Float64,
    "goodput_rps": pl.Float64,
    "reject_rate": pl.Float64,
    "stable": pl.Boolean,
    "saturated_stage": pl.Utf8,
}
register("map_runs", RUN_COLUMNS)
register(
    "decision_map",
    {
        "model": pl.Utf8,
        "workload": pl.Utf8,
        "metric": pl.Utf8,
        "x_axis": pl.Utf8,
        "y_axis": pl.Utf8,
        "ix": pl.Int64,
        "iy": pl.Int64,
        "x": pl.Float64,
        "y": pl.Float64,
        "state": pl.Utf8,  # win | tie | unstable
        "winner": pl.Utf8,  # best mean among stable policies (also set for a tie)
        "runner_up": pl.Utf8,
        "best_value": pl.Float64,
        "runner_up_value": pl.Float64,
        "margin": pl.Float64,  # runner-up minus winner, signed so that > 0 favours the winner
        "margin_ci95": pl.Float64,  # Student-t half-width of the paired per-seed margin
        "rel_margin": pl.Float64,  # margin / |winner's value|
        "n_seeds": pl.Int64,
        "unstable_policies": pl.Utf8,
        "breakeven_gbps": pl.Float64,  # analytic transfer = recompute bandwidth at this cell
    },
)


@dataclass
class MapSpec:
    model: str
    workload: str = "tool_call"
    x: str = "bandwidth"
    y: str = "budget"
    nx: int = 24
    ny: int = 24
    x_range: tuple[float, float] | None = None
    y_range: tuple[float, float] | None = None
    policies: list[str] = field(default_factory=list)
    seeds: int = 2
    requests: int = DEFAULT_REQUESTS
    warmup: int = DEFAULT_WARMUP
    overrides: list[str] = field(default_factory=list)
    metric: str = "ttft"
    max_runs: int | None = None  # the grid cap (study.grid.MAX_RUNS when None)

    def xs(self) -> list[float]:
        return AXES[self.x].values(self.nx, *(self.x_range or (None, None)))

    def ys(self) -> list[float]:
        return AXES[self.y].values(self.ny, *(self.y_range or (None, None)))

    def base_overrides(self) -> list[str]:
        return [
            *self.overrides,
            f"model={self.model}",
            f"run.requests={self.requests}",
            f"run.warmup_requests={self.warmup}",
        ]


def check_spec(spec: MapSpec) -> MapSpec:
    """Refuse a grid that cannot be decided, with one line saying how to fix it."""
    from prefixbench.scenario.models import POLICIES
    from prefixbench.support.suggest import did_you_mean

    from .grid import check_grid_size

    for opt, name in (("--x", spec.x), ("--y", spec.y)):
        if name not in AXES:
            raise ScenarioError(f"unknown axis '{name}'", where=opt, fix=did_you_mean(name, AXES))
    if spec.x == spec.y:
        raise ScenarioError(
            f"both axes are '{spec.x}'", where="--x/--y", fix="choose two different axes"
        )
    if spec.metric not in METRICS:
        raise ScenarioError(
            f"unknown metric '{spec.metric}'",
            where="--metric",
            fix=did_you_mean(spec.metric, METRICS),
        )
    spec.policies = spec.policies or list(POLICIES)
    for p in spec.policies:
        if p not in POLICIES:
            raise ScenarioError(
                f"unknown policy '{p}'", where="--policy", fix=did_you_mean(p, POLICIES)
            )
    if len(spec.policies) < 2:
        raise ScenarioError(
            "a map needs at least two policies",
            where="--policy",
            fix="name two or more, or omit --policy",
        )
    if spec.seeds < 2:
        raise ScenarioError(
            f"{spec.seeds} seed gives no confidence interval, so ties cannot be told",
            where="--seeds",
            fix="use --seeds 2 or more",
        )
    if not (1 <= spec.nx <= 200 and 1 <= spec.ny <= 200):
        raise ScenarioError(
            "grid size out of range", where="--points", fix="use 1 to 200 points per axis"
        )
    runs = spec.nx * spec.ny * spec.seeds * len(spec.policies)
    check_grid_size(runs, spec.max_runs, "map grid (--points² × --seeds × policies)")
    if spec.warmup >= spec.requests:
        raise ScenarioError(
            f"warm-up ({spec.warmup}) leaves none of the {spec.requests} requests to measure",
            where="--requests",
            fix="raise --requests or lower --warmup",
        )
    for opt, rng, ax in (("--x-range", spec.x_range, spec.x), ("--y-range", spec.y_range, spec.y)):
        if rng is not None and not (0 < rng[0] < rng[1]):
            raise ScenarioError(
                f"bad range {rng[0]:g}..{rng[1]:g} for {ax}",
                where=opt,
                fix="give LO,HI with 0 < LO < HI",
            )
    return spec


# ---------------------------------------------------------------- one run


def _outcome_codes() -> tuple[int, int]:
    from ..engine import Outcome

    return int(Outcome.COMPLETED), int(Outcome.REJECTED)


def run_metrics(prep, res) -> dict:
    """The map's per-run figures (docs/model.md §5.3 definitions) and the stability verdict."""
    from prefixbench.metrics.stability import COLUMNS, Cols, assess

    completed, rejected = _outcome_codes()
    req, s, cols = prep.requests, prep.scenario, res.columns
    n, warm = len(req), s.run.warmup_requests
    steady = np.arange(n) >= warm
    outc = cols["outcome"]
    done = steady & (outc == completed)
    # client-side, as metrics/summary.py: plus the per-request and per-prompt-token costs
    # (docs/model.md §2.14)
    ttft = (cols["t_first_token"][done] - req.arrival[done]) * 1e3 + client_overhead_ms(
        s.efficiency, req.prompt_len[done]
    )
    out = req.output_len[done]
    tpot = np.where(
        out > 1,
        (cols["t_done"][done] - cols["t_first_token"][done]) * 1e3 / np.maximum(out - 1, 1),
        0.0,
    )
    w = min(warm, n - 1)
    window = float(req.arrival[-1] - req.arrival[w]) or 1e-12
    n_steady = int(steady.sum())
    slo_ok = int(((ttft <= s.slo.ttft_ms) & (tpot <= s.slo.tpot_ms)).sum())
    given = {
        "arrival": req.arrival,
        "prompt_tokens": req.prompt_len,
        "output_tokens": req.output_len,
    }
    frame = Cols(
        {k: np.asarray(given[k] if k in given else cols[k], dtype=np.float64) for k in COLUMNS},
        outc == completed,
        ~steady,
    )
    verdict = assess(prep, frame, res.stats)
    return {
        "ttft_mean_ms": float(ttft.mean()) if len(ttft) else None,
        "ttft_p99_ms": float(np.percentile(ttft, 99)) if len(ttft) else None,
        "goodput_rps": _goodput(s, slo_ok, n_steady, window),
        "reject_rate": int((steady & (outc == rejected)).sum()) / n_steady if n_steady else 0.0,
        "stable": bool(verdict.stable),
        "saturated_stage": verdict.saturated,
    }


def run_row(y: float, spec: MapSpec) -> list[dict]:
    """Every x × seed × policy at one y value (one task for a worker process)."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare, simulate_policy

    ax_x, ax_y = AXES[spec.x], AXES[spec.y]
    rows = []
    for x in spec.xs():
        for seed in range(spec.seeds):
            sets = [*spec.base_overrides(), ax_x.override(x), ax_y.override(y), f"seed={seed}"]
            with _naming(spec, x, y, seed):
                prep = prepare(load_scenario(spec.workload, sets))
                for policy in spec.policies:
                    m = run_metrics(prep, simulate_policy(prep, policy))
                    rows.append({"x": x, "y": y, "seed": seed, "policy": policy, **m})
    return rows


class _naming:
    """Prefix a prefixbench error with the map cell it came from."""

    def __init__(self, spec: MapSpec, x: float, y: float, seed: int) -> None:
        self.label = f"map cell {spec.x}={x:g}, {spec.y}={y:g}, seed {seed}"

    def __enter__(self):
        return self

    def __exit__(self, typ, e, tb):
        from ..errors import PrefixbenchError

        if isinstance(e, PrefixbenchError):
            where = f"{self.label}: {e.where}" if e.where else self.label
            raise type(e)(e.what, where=where, fix=e.fix) from None
        return False


def _goodput(s, slo_ok: int, n_steady: int, window: float) -> float | None:
    from prefixbench.metrics.summary import goodput_rps

    return goodput_rps(s, slo_ok, n_steady, window)


# ---------------------------------------------------------------- deciding a cell


def decide_cell(rows: list[dict], metric: Metric) -> dict:
    """Winner, runner-up and paired margin of one cell (rows: its runs, all seeds × policies)."""
    col, sign = metric.column, (1.0 if metric.higher_is_better else -1.0)
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["policy"], []).append(r)
    unstable = sorted(p for p, rs in by.items() if not all(r["stable"] for r in rs))
    seeds = sorted({r["seed"] for r in rows})
    base = {"n_seeds": len(seeds), "unstable_policies": ", ".join(unstable)}
    ok = {
        p: {r["seed"]: r for r in rs}
        for p, rs in by.items()
        if p not in unstable and all(r[col] is not None for r in rs)
    }
    if not metric.higher_is_better and ok:  # TTFT counts admitted requests only
        best_rej = min(float(np.mean([r["reject_rate"] for r in s.values()])) for s in ok.values())
        ok = {
            p: s
            for p, s in ok.items()
            if float(np.mean([r["reject_rate"] for r in s.values()])) <= best_rej + REJECT_SLACK
        }
    if not ok:
        return {**base, "state": "unstable", "winner": None, "runner_up": None}
    means = {p: float(np.mean([s[k][col] for k in seeds])) for p, s in ok.items()}
    from .recommend import simplicity

    # equal values go to the simpler policy, never the name
    order = sorted(means, key=lambda p: (-sign * means[p], simplicity(p)))
    win = order[0]
    out = {**base, "winner": win, "best_value": means[win]}
    if len(order) == 1:  # the only steady policy wins outright
        return {**out, "state": "win", "runner_up": None}
    up = order[1]
    margin, ci = paired_margin([sign * (ok[win][k][col] - ok[up][k][col]) for k in seeds])
    return {
        **out,
        "runner_up": up,
        "runner_up_value": means[up],
        "margin": margin,
        "margin_ci95": ci,
        "rel_margin": margin / abs(means[win]) if means[win] else None,
        "state": "tie" if is_tie(margin, ci) else "win",
    }


def decide(runs: pl.DataFrame, spec: MapSpec) -> pl.DataFrame:
    """One row per cell, in grid order (y, then x)."""
    metric = METRICS[spec.metric]
    xs, ys = spec.xs(), spec.ys()
    cells: dict[tuple[float, float], list[dict]] = {}
    for r in runs.iter_rows(named=True):
        cells.setdefault((r["x"], r["y"]), []).append(r)
    be = breakeven_fn(spec)
    out = []
    for iy, y in enumerate(ys):
        for ix, x in enumerate(xs):
            c = decide_cell(cells[(x, y)], metric)
            out.append(
                {
                    "model": spec.model,
                    "workload": spec.workload,
                    "metric": spec.metric,
                    "x_axis": spec.x,
                    "y_axis": spec.y,
                    "ix": ix,
                    "iy": iy,
                    "x": x,
                    "y": y,
                    **c,
                    "breakeven_gbps": be(x, y),
                }
            )
    return pl.DataFrame(out, infer_schema_length=None)


# ---------------------------------------------------------------- analytic break-even


def breakeven_gbps(scenario, prefix_tokens: float) -> float:
    """Link bandwidth (GB/s) at which moving a prefix's KV costs as long as recomputing it on
    the decode instance (unqueued; the formula of study/crossover.py). NaN when recompute
    is faster than the link latency alone."""
    from prefixbench.physics.costmodel import (
        InstanceCost,
        kv_bytes_per_token,
        recompute_time,
        transfer_fixed,
    )

    from .. import catalog

    c = scenario.cluster
    m = catalog.get_model(scenario.model)
    cost = InstanceCost.build(
        m,
        catalog.get_accelerator(c.decode.accelerator),
        c.decode.devices,
        scenario.efficiency,
        c.decode.parallelism(),
    )
    link = c.link.spec()
    budget = float(recompute_time(cost, prefix_tokens)) - transfer_fixed(link)
    if budget <= 0:
        return math.nan
    # line rate per NIC (η of it is what a transfer reaches)
    return prefix_tokens * kv_bytes_per_token(m) / budget / 1e9 / link.efficiency


def breakeven_fn(spec: MapSpec) -> Callable[[float, float], float | None]:
    """The break-even bandwidth at cell (x, y): depends on the prefix length, so on the
    prefix axis if there is one, else the workload's mean prefix length."""
    from prefixbench.scenario.loader import load_scenario

    s = load_scenario(spec.workload, spec.base_overrides())
    mean = _mean_prefix(s)
    if mean is None:
        return lambda x, y: None

    @functools.cache
    def at(length: float) -> float | None:
        v = breakeven_gbps(s, length)
        return v if math.isfinite(v) else None

    if spec.x == "prefix":
        return lambda x, y: at(x)
    if spec.y == "prefix":
        return lambda x, y: at(y)
    return lambda x, y: at(mean)


def _mean_prefix(s) -> float | None:
    pre = getattr(s.workload, "prefixes", None)
    length = getattr(pre, "length", None)
    mean = getattr(length, "mean", None)
    if mean is None:
        mean = getattr(length, "value", None)
    return float(mean) if mean is not None else None


# ---------------------------------------------------------------- the whole map


@dataclass
class MapResult:
    spec: MapSpec
    runs: pl.DataFrame
    cells: pl.DataFrame


def run_map(
    spec: MapSpec,
    *,
    jobs: int | None = None,
    backend=None,
    on_start: Callable[[int, int], None] | None = None,
    on_point: Callable[[object], None] | None = None,
) -> MapResult:
    """Simulate every cell × seed × policy and decide each cell."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare

    from .backends import LocalPoolBackend, check_jobs

    spec = check_spec(spec)
    ys = spec.ys()
    load_scenario(spec.workload, spec.base_overrides())  # a bad model or --set: no cell named
    largest = 0
    for x in (spec.xs()[0], spec.xs()[-1]):  # a bad grid fails before any simulation
        for y in (ys[0], ys[-1]):
            with _naming(spec, x, y, 0):
                sets = [*spec.base_overrides(), AXES[spec.x].override(x), AXES[spec.y].override(y)]
                largest = max(largest, len(prepare(load_scenario(spec.workload, sets)).requests))
    backend = backend or LocalPoolBackend(min(check_jobs(jobs), len(ys)))
    if isinstance(backend, LocalPoolBackend):  # every worker holds one cell's run at a time
        from prefixbench.support.memcheck import check_workers

        check_workers(largest, backend.jobs)
    if on_start:
        on_start(len(ys), 0)
    rows: list[dict] = []
    for _, part in backend.map_unordered(functools.partial(run_row, spec=spec), ys):
        rows.extend(part)
        if on_point:
            on_point(None)
    runs = pl.DataFrame(rows, schema=RUN_COLUMNS).sort(["y", "x", "seed", "policy"])
    return MapResult(spec, runs, decide(runs, spec))
