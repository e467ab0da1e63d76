"""The engine's Python entry points: pack a configuration into the flat state, run the
compiled loop, unpack columns and stats (and hand the timeline log to a recorder).
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

import numpy as np

from ..errors import SimulationError
from ..workload.requests import Requests
from . import layout as L
from . import refresh as rf
from . import warmup as wu
from .blocks import dense_block_ids, prewarm
from .config import (
    HOST_WRITE_POLICIES,
    TIME_COLUMNS,
    ColocatedConfig,
    EngineConfig,
    SimResult,
    check_colocated_config,
    check_engine_config,
)
from .costaware import tail, tail_init, tail_size
from .loop import DONE, NEED_HEAP, STALLED, close_run, heap_room, log_room
from .loop import run_colocated as _run_colocated
from .loop import run_disaggregated as _run_disaggregated
from .policies import POLICIES
from .queues import push
from .routing import DECODE_ROUTERS, PREFILL_ROUTERS


def _c64(a: np.ndarray) -> np.ndarray:
    """``a`` as a writable, contiguous int64 array: numba types a read-only array (as from
    a memory-mapped or Arrow-backed table) differently, which would compile the whole
    engine a second time."""
    return np.require(a, dtype=np.int64, requirements=["C", "W"])


def _with_answers(req: Requests, answers: bool):
    """Block hashes and tokens of the chains, then of the answers (docs/model.md §1.10.1)
    when ``answers`` and the workload has them; the answers' offsets into those arrays."""
    nb = int(req.blk_ptr[-1])
    if not answers or req.ans_ptr is None or int(req.ans_ptr[-1]) == 0:
        return _c64(req.blk_hash), _c64(req.blk_tokens), np.full(len(req) + 1, nb, np.int64)
    hashes = np.concatenate((_c64(req.blk_hash), _c64(req.ans_hash)))
    tokens = np.concatenate((_c64(req.blk_tokens), _c64(req.ans_tokens)))
    return hashes, tokens, _c64(req.ans_ptr) + nb


def _sections(cfg: EngineConfig | None, n_ids: int) -> tuple[int, bool]:
    """What a disaggregated run (``cfg``; None: colocated) reserves beyond the common
    state: the floats of the cost_aware tail and the refresh section in ``F``, and whether
    ``B32`` holds the L3 store's records (replicate_tiered with a store only)."""
    if cfg is None:
        return 0, False
    floats = tail_size(cfg.n_decode, n_ids) + rf.size(n_ids)
    return floats, cfg.policy == "replicate_tiered" and cfg.l3_store_tokens > 0


class _Run:
    """The state of one run: flat arrays plus the growable heap and timeline log."""

    def __init__(
        self, req: Requests, ip: np.ndarray, fp: np.ndarray, hot: np.ndarray, answers=False,
        cfg: EngineConfig | None = None,
    ) -> None:  # fmt: skip
        self.n = n = len(req)
        hashes, tokens, ans_ptr = _with_answers(req, answers)
        bid, self.hot_ids, n_ids = dense_block_ids(hashes, hot)
        self.bid, self.bt = _c64(bid), tokens
        longest = int(req.prompt_len.max(initial=0)) + int(req.output_len.max(initial=0))
        if max(n, n_ids, longest) >= 2**31 - 1:
            raise SimulationError(
                "the run exceeds the engine's 32-bit records (requests, block ids or a "
                "request's tokens ≥ 2^31)",
                where="workload",
                fix="replay fewer or shorter requests",
            )
        self.IS, self.F, self.R, self.B32, self.B8 = L.allocate(
            req.prompt_len, req.output_len, req.arrival, req.blk_ptr, ans_ptr,
            self.bid.shape[0], n_ids, ip, fp, self.hot_ids, *_sections(cfg, n_ids),
        )  # fmt: skip
        self.EHT, self.EHI = np.empty(1024), np.empty(3 * 1024, dtype=np.int64)
        cap = 4096 if ip[L.IP_REC] else 1
        self.TLF = np.empty(L.NTL_F * cap)
        self.TLI = np.empty(L.NTL_I * cap, dtype=np.int64)
        if n:
            push(self.EHT, self.EHI, self.IS, float(req.arrival[0]), L.EV_ARRIVAL, 0, 0)

    def grow(self, what: int) -> None:
        if what >= STALLED:
            raise _stall_error(what, float(self.F[L.G_NOW]))
        if what == NEED_HEAP:
            need, cap = int(heap_room(self.IS)), self.EHT.shape[0]
            while cap < need:
                cap *= 2
            size = int(self.IS[L.GI_HSZ])
            t2, i2 = np.empty(cap), np.empty(3 * cap, dtype=np.int64)
            t2[:size], i2[: 3 * size] = self.EHT[:size], self.EHI[: 3 * size]
            self.EHT, self.EHI = t2, i2
        else:
            need, cap = int(log_room(self.IS)), self.TLF.shape[0] // L.NTL_F
            while cap < need:
                cap *= 2
            m = int(self.IS[L.GI_TLN])
            f2, i2 = np.empty(L.NTL_F * cap), np.empty(L.NTL_I * cap, dtype=np.int64)
            f2[: L.NTL_F * m], i2[: L.NTL_I * m] = self.TLF[: L.NTL_F * m], self.TLI[: L.NTL_I * m]
            self.TLF, self.TLI = f2, i2

    def close(self) -> None:
        """Integrate memory up to the end of the run (room for its last counters first)."""
        if self.IS[L.IP_REC] and log_room(self.IS) > self.TLF.shape[0] // L.NTL_F:
            self.grow(-1)
        close_run(self.IS, self.F, self.TLF, self.TLI)

    def columns(self, gaps: bool) -> dict[str, np.ndarray]:
        """Result columns: views into the state, no copy."""
        n, IS, F = self.n, self.IS, self.F
        io, ft = int(IS[L.H_O]), int(IS[L.H_FT])
        cols = {name: F[ft + i * n : ft + (i + 1) * n] for i, name in enumerate(TIME_COLUMNS[:-1])}
        pg = int(IS[L.H_PGF])
        cols["preempt_delay_s"] = F[pg : pg + n]
        cols.update(
            {name: IS[io + i * n : io + (i + 1) * n] for i, name in enumerate(L.INT_COLUMNS)}
        )
        if gaps:
            cols["max_token_gap"] = F[ft + L.T_GAP * n : ft + (L.T_GAP + 1) * n]
        return cols

    def release_dead(self, gaps: bool) -> None:
        """Give back the pages of the state no result column views once the run is over
        (support/pages.py): the request offsets in IS, and the per-request time rows only
        the loop reads (arrival, last token, promotion) and the preempted-at times in F."""
        from prefixbench.support.pages import release

        n, IS, F = self.n, self.IS, self.F
        release(IS, int(IS[L.H_PTR]), int(IS[L.H_O]))
        ft, pg = int(IS[L.H_FT]), int(IS[L.H_PGF])
        live = set(range(len(TIME_COLUMNS) - 1)) | ({L.T_GAP} if gaps else set())
        for row in range((pg - ft) // n if n else 0):
            if row not in live:
                release(F, ft + row * n, ft + (row + 1) * n)
        release(F, pg + n, pg + 2 * n)

    def log(self, recorder, mode: str, shape: tuple[int, int, int]) -> None:
        if recorder is not None:
            m = int(self.IS[L.GI_TLN])
            recorder.attach(
                mode, shape, self.TLF[: L.NTL_F * m].copy(), self.TLI[: L.NTL_I * m].copy(),
                self.F[: L.NFP].copy(),
            )  # fmt: skip


# which field made an event repeat without advancing time, by (kind, a < 0)
_STALL_FIELDS = {
    (L.EV_TIMEOUT, 1): ("memory.hotset_refresh_s", "the hot-set refresh period"),
    (L.EV_TRANSFER, 1): ("cluster.link.prewarm", "the hot-set prewarm"),
    (L.EV_DECODE, 0): ("accelerator and efficiency", "decode steps"),
    (L.EV_PREFILL, 0): ("accelerator and efficiency", "prefill steps"),
    (L.EV_TRANSFER, 0): ("cluster.link", "KV transfers"),
}


def _stall_error(what: int, t: float) -> SimulationError:
    """The progress guard's error: the loop saw many events in a row at one timestamp."""
    kind, neg = divmod(what - STALLED, 2)
    default = ("workload timestamps", f"events of kind {kind}")
    where, name = _STALL_FIELDS.get((kind, neg), default)
    return SimulationError(
        f"{name} stopped advancing simulated time near t = {t:.6g} s (a period or step "
        "below the float resolution of the clock)",
        where=where,
        fix="use a longer period or step, or timestamps closer to 0",
    )


def _window(t_end: float, t_warm: float) -> float:
    """The measured window; NaN when it is empty (rates over it are then undefined)."""
    w = t_end - t_warm
    return w if w > 0.0 else float("nan")


def _t_warm(req: Requests, warmup: int) -> float:
    n = len(req)
    return float(req.arrival[min(warmup, n - 1)]) if n else 0.0


def _t_steady(req: Requests, t_warm: float) -> float:
    """The end of the steady window: the last arrival (inf when no arrival follows the
    warm-up: then the run is measured to the end of its drain)."""
    last = float(req.arrival[-1]) if len(req) else 0.0
    return last if last > t_warm else math.inf


def _steady_end(t_end: float, t_steady: float) -> float:
    return t_steady if math.isfinite(t_steady) else t_end


def _itl_stats(F: np.ndarray) -> dict:
    """The pooled inter-token gaps of the measured requests (batch.itl_series): exact
    count, sum, min and max, and the log-binned histogram (its filled bins) with its bin
    edges."""
    cnt = float(F[L.G_ITL_CNT])
    h = F[L.G_ITL_H : L.G_ITL_H + L.ITL_NB]
    filled = np.flatnonzero(h)
    return {
        "itl_count": cnt,
        "itl_sum_s": float(F[L.G_ITL_SUM]),
        "itl_min_s": float(F[L.G_ITL_MIN]) if cnt else None,
        "itl_max_s": float(F[L.G_ITL_MAX]) if cnt else None,
        "itl_bins": filled.tolist(),  # the filled bins (plain lists: stats compare with ==)
        "itl_weights": h[filled].tolist(),
        "itl_nbins": L.ITL_NB,
        "itl_log10_lo": L.ITL_LOG10_LO,
        "itl_bins_per_decade": float(L.ITL_BPD),
    }


def _work(IS: np.ndarray, F: np.ndarray, n_prefill: int, n_decode: int) -> dict:
    """FLOPs and bytes read by each instance's steps started in the measured window (a
    colocated instance's are all under decode_*)."""
    pw = int(IS[L.H_FCH] + IS[L.IP_NP] * IS[L.IP_ND] * IS[L.IP_NC])
    dw = [L.DF0 + d * L.NDF for d in range(n_decode)]
    return {
        "prefill_flops": [float(F[pw + 2 * p]) for p in range(n_prefill)],
        "prefill_bytes": [float(F[pw + 2 * p + 1]) for p in range(n_prefill)],
        "decode_flops": [float(F[f + L.DF_FLOPS]) for f in dw],
        "decode_bytes": [float(F[f + L.DF_BYTES]) for f in dw],
        **_power(IS, F, n_prefill, n_decode),
    }


def _power(IS: np.ndarray, F: np.ndarray, n_prefill: int, n_decode: int) -> dict:
    """--- power: each instance's dynamic joules, seconds the cap slowed and
    highest step-average power (engine/power.py; records counted from the end of F)."""
    end, nd = F.shape[0], int(IS[L.IP_ND])
    dec = [end - L.NPW * (d + 1) for d in range(n_decode)]
    pre = [end - L.NPW * (nd + p + 1) for p in range(n_prefill)]
    out = {}
    for role, at in (("prefill", pre), ("decode", dec)):
        out[f"{role}_energy_dyn_j"] = [float(F[a + L.PW_J]) for a in at]
        out[f"{role}_capped_s"] = [float(F[a + L.PW_CAPPED]) for a in at]
        out[f"{role}_peak_w"] = [float(F[a + L.PW_PEAK]) for a in at]
    return out


def _costs(*costs) -> list[float]:
    return [float(getattr(c, f)) for c in costs for f in L.COST_FIELDS]


def link_rate(cfg: EngineConfig) -> float:
    """Bytes per second one transfer moves at: with shared NICs a request's KV is sharded
    across the NICs of the smaller end's group (each NIC carries 1/N of it, in parallel);
    with private paths one channel's bandwidth."""
    if cfg.link_topology == "shared_nics":
        return min(cfg.nics_prefill, cfg.nics_decode) * cfg.link_bytes_per_s
    return cfg.link_bytes_per_s


def _link_utils(cfg: EngineConfig, F: np.ndarray, fn: int, window: float) -> dict[str, float]:
    """Busy share of the busiest egress group (per prefill instance) and ingress group (per
    decode instance); ``link_util`` is the larger (private paths: the mean over channels)."""
    P, D = cfg.n_prefill, cfg.n_decode
    busy = F[fn + P + D : fn + 2 * (P + D)]
    if cfg.link_topology == "shared_nics":
        eg = float(busy[:P].max()) / window
        ig = float(busy[P:].max()) / window
        return {"link_util": max(eg, ig), "link_util_egress": eg, "link_util_ingress": ig}
    c = cfg.link_channels
    return {
        "link_util": float(F[L.G_LINK]) / window / (P * D * c),
        "link_util_egress": float(busy[:P].max()) / window / (D * c),
        "link_util_ingress": float(busy[P:].max()) / window / (P * c),
    }


def _host_tier(cfg: EngineConfig, IS: np.ndarray, F: np.ndarray) -> None:
    """replicate_tiered's host pool and host path on every decode instance."""
    D = cfg.n_decode
    dI = IS[L.DI0 : L.DI0 + D * L.NDI].reshape(D, L.NDI)
    dI[:, L.D_HCAP] = cfg.host_kv_tokens if cfg.policy in ("replicate_tiered", "cost_aware") else 0
    dF = F[L.DF0 : L.DF0 + D * L.NDF].reshape(D, L.NDF)
    dF[:, L.DF_HP_BPS] = cfg.host_path_bytes_per_s
    dF[:, L.DF_HP_LAT] = cfg.host_path_latency_s


def _l3_store(r: _Run, cfg: EngineConfig) -> None:
    """The shared L3 store (l3store.py), under replicate_tiered only: its capacity and its
    queue's rate."""
    if cfg.policy != "replicate_tiered" or cfg.l3_store_tokens <= 0:
        return
    r.IS[L.IP_L3CAP] = cfg.l3_store_tokens  # its records: layout.allocate (H_L3)
    r.F[L.FP_L3_BPS] = cfg.l3_store_bytes_per_s


def _l3_stats(IS: np.ndarray, F: np.ndarray, window: float) -> dict:
    """The L3 store's figures: capacity and peak (tokens), bytes moved after warm-up, the
    queue's busy share of the steady window (0 without a store)."""
    return {
        "l3_store_tokens": float(IS[L.IP_L3CAP]),
        "peak_l3_tokens": float(IS[L.GI_L3PEAK]),
        "l3_bytes": float(F[L.FP_L3_BYTES]),
        "l3_util": float(F[L.FP_L3_BUSY]) / window,
    }


def _host_stats(cfg: EngineConfig, IS: np.ndarray, F: np.ndarray, window: float) -> dict:
    """Host tier figures: mean (over instances and the window) and peak host KV tokens,
    bytes over the host paths in the window, the busiest path's busy share."""
    D = cfg.n_decode
    dI = IS[L.DI0 : L.DI0 + D * L.NDI].reshape(D, L.NDI)
    dF = F[L.DF0 : L.DF0 + D * L.NDF].reshape(D, L.NDF)
    return {
        "mean_host_tokens": float(dF[:, L.DF_HAREA].sum()) / window / D,
        "peak_host_tokens": float(dI[:, L.D_HPEAK].max()),
        "host_path_bytes": float(dF[:, L.DF_HP_BYTES].sum()),
        "host_path_util": float(dF[:, L.DF_HP_BUSY].max()) / window,
        "host_kv_tokens": float(dI[0, L.D_HCAP]),
    }


def _send_prewarm(r: _Run, cfg: EngineConfig, t0: float) -> float:
    """Queue every decode instance's hot set on the link at ``t0`` (engine/warmup.py);
    returns how long the last one takes to land."""
    last = t0
    for d in range(cfg.n_decode):
        used = int(r.IS[L.DI0 + d * L.NDI + L.D_USED])
        land = wu.send(r.IS, r.F, r.B8, d, t0, used * cfg.decode_cost.kv_bpt)
        if int(r.IS[L.GI_HSZ]) + 1 > r.EHT.shape[0]:
            r.grow(NEED_HEAP)
        push(r.EHT, r.EHI, r.IS, land, L.EV_TRANSFER, wu.payload(d), 0)
        last = max(last, land)
    return last - t0


def _prewarm_stats(r: _Run, cfg: EngineConfig, prewarm_s: float) -> dict:
    """What warming the hot set moves (GB over all decode instances: the first set and
    every refresh) and, with prewarm over the link, how long until the last instance's first
    hot set has landed."""
    hot = 0
    if cfg.policy == "replicate_hotset":
        hot = sum(int(t) for _, t in cfg.hot_blocks) * cfg.n_decode
    refreshed = float(r.F[int(rf.section(r.IS)) + rf.S_BYTES])
    return {
        "prewarm_gb": (hot * cfg.decode_cost.kv_bpt + refreshed) / 1e9,
        "refresh_gb": refreshed / 1e9,
        "prewarm_s": prewarm_s,
    }


def simulate(
    req: Requests, cfg: EngineConfig, recorder=None, keep_state: bool = False
) -> SimResult:
    """Run one scenario's requests through the disaggregated system described by ``cfg``.

    With a ``recorder`` (engine.recorder.Recorder) the engine also logs what every
    instance and link channel did, for a Chrome/Perfetto timeline; ``keep_state`` keeps the
    final state on the result (for engine.audit)."""
    check_engine_config(cfg)
    n = len(req)
    t_warm = _t_warm(req, cfg.warmup_requests)
    hot_h = np.array([h for h, _ in cfg.hot_blocks], dtype=np.int64)
    hot_t = np.array([t for _, t in cfg.hot_blocks], dtype=np.int64)
    r = _Run(req, _int_params(cfg, recorder), _float_params(cfg, t_warm), hot_h,
             cfg.cache_generated, cfg)  # fmt: skip
    t_steady = _t_steady(req, t_warm)
    refresh = _disagg_state(r, cfg, t_steady)
    IS, F = r.IS, r.F
    prewarm_s = 0.0
    if cfg.policy == "replicate_hotset" and hot_h.shape[0] > 0:
        prewarm(IS, r.B32, r.B8, _c64(r.hot_ids), hot_t)
        IS[L.GI_PEAK_REP] = IS[L.GI_PEAK_USED] = IS[L.DI0 + L.D_USED]
        if cfg.prewarm == "link" and n:
            prewarm_s = _send_prewarm(r, cfg, float(req.arrival[0]))
    if refresh > 0 and n:
        push(r.EHT, r.EHI, IS, float(req.arrival[0]) + refresh, L.EV_TIMEOUT, -1, 0)
    dI = IS[L.DI0 : L.DI0 + cfg.n_decode * L.NDI].reshape(cfg.n_decode, L.NDI)
    dI[:, L.D_LREP] = dI[:, L.D_USED]
    dI[:, L.D_LUSED] = dI[:, L.D_USED]
    _host_tier(cfg, IS, F)
    _l3_store(r, cfg)
    args = lambda: (IS, F, r.R, r.B32, r.B8, r.EHT, r.EHI, r.TLF, r.TLI, r.bid, r.bt)  # noqa: E731
    while (status := _run_disaggregated(*args())) != DONE:
        r.grow(status)
    r.close()
    r.log(recorder, "disaggregated", (cfg.n_prefill, cfg.n_decode, cfg.link_channels))
    stats = _disagg_stats(r, cfg, t_warm, t_steady, prewarm_s)
    cols = r.columns(bool(cfg.track_gaps))
    if not keep_state:
        r.release_dead(bool(cfg.track_gaps))
    return SimResult(cols, stats, r if keep_state else None)


def _int_params(cfg: EngineConfig, recorder) -> np.ndarray:
    """The disaggregated run's integer parameters (the head of ``IS``, engine/layout.py)."""
    return np.array(
        [
            cfg.n_prefill,
            cfg.n_decode,
            cfg.link_channels,
            cfg.max_batch,
            cfg.prefill_token_budget,
            min(cfg.prefill_cache_tokens, 2**61),
            cfg.budget_tokens,
            cfg.on_full == "wait" or cfg.admission == "paged",
            POLICIES[cfg.policy].code,
            PREFILL_ROUTERS[cfg.prefill_router].code,
            DECODE_ROUTERS[cfg.decode_router].code,
            bool(cfg.track_gaps),
            L.MODE_DISAGG,
            recorder is not None,
        ],
        dtype=np.int64,
    )


def _float_params(cfg: EngineConfig, t_warm: float) -> np.ndarray:
    """The link, the admission timeout, the warm-up time and both pools' cost constants."""
    timeout = cfg.wait_timeout_s
    if cfg.admission == "paged":
        timeout = math.inf if cfg.queue_timeout_s is None else cfg.queue_timeout_s
    return np.array(
        [link_rate(cfg), cfg.link_latency_s, timeout, t_warm]
        + _costs(cfg.prefill_cost, cfg.decode_cost)
    )


def _disagg_state(r: _Run, cfg: EngineConfig, t_steady: float) -> float:
    """The cost_aware and refresh sections of ``F`` (reserved by layout.allocate after
    paged's per-request rows, before the power records) and the mode fields of ``IS``;
    returns the hot set's refresh period (0: none)."""
    IS, F = r.IS, r.F
    refresh = cfg.hot_refresh_s if cfg.policy == "replicate_hotset" and cfg.hot_blocks else 0.0
    tail_init(F, int(tail(IS)), cfg.n_decode)
    rf.init(F, int(rf.section(IS)), refresh, cfg.hot_cap_tokens, cfg.prewarm == "link")
    F[L.G_ITL_NW] = cfg.warmup_requests
    IS[L.IP_SHARED] = cfg.link_topology == "shared_nics"
    IS[L.IP_STREAM] = cfg.streaming == "layerwise"
    IS[L.IP_LAYERS] = cfg.layers
    IS[L.IP_RCHUNK] = cfg.recompute_chunk_tokens
    IS[L.IP_LOCMAX] = cfg.max_local_prefill_tokens  # --- conditional
    F[L.FP_LOCHIT] = cfg.local_prefill_hit_ratio
    F[L.FP_KVW] = cfg.kv_overlap_weight  # --- kv routing
    F[L.FP_TSTEADY] = t_steady
    IS[L.IP_PAGED], IS[L.IP_BS] = cfg.admission == "paged", cfg.block_size
    IS[L.IP_SWAP] = cfg.preemption == "swap"
    pool = cfg.host_kv_tokens if L.has_host_tier(IS[L.IP_POLICY]) else 0
    IS[L.IP_SWAPCAP] = max(cfg.swap_tokens - pool, 0)  # --- admit: what the host pool leaves
    IS[L.IP_RDT] = cfg.reserved_decode_tokens if cfg.admission == "paged" else 0
    IS[L.IP_HOLD] = cfg.prefill_hold
    IS[L.IP_CALOC] = cfg.cost_aware_local
    IS[L.IP_HWP] = HOST_WRITE_POLICIES.index(cfg.host_write_policy)
    return refresh


def _disagg_stats(r: _Run, cfg: EngineConfig, t_warm, t_steady, prewarm_s) -> dict:
    """The run's statistics over its steady window (docs/model.md §5.1)."""
    IS, F = r.IS, r.F
    t_end = float(F[L.G_NOW])
    window = _window(_steady_end(t_end, t_steady), t_warm)
    n_dec = cfg.n_decode
    fpb = int(IS[L.H_FPB])
    p_busy = F[fpb : fpb + cfg.n_prefill].tolist()
    d_busy = [float(F[L.DF0 + d * L.NDF + L.DF_BUSY]) for d in range(n_dec)]
    return {
        "t_warm": t_warm,
        "t_end": t_end,
        "t_steady": _steady_end(t_end, t_steady),
        "budget_tokens": float(cfg.budget_tokens),
        "mean_replica_tokens": float(F[L.G_REP_AREA]) / window / n_dec,
        "peak_replica_tokens": float(IS[L.GI_PEAK_REP]),
        "mean_used_tokens": float(F[L.G_USED_AREA]) / window / n_dec,
        "peak_used_tokens": float(IS[L.GI_PEAK_USED]),
        "prefill_util": sum(p_busy) / window / cfg.n_prefill,
        "decode_util": sum(d_busy) / window / n_dec,
        "mean_decode_batch": float(F[L.G_BATCH_AREA]) / window / n_dec,
        **_link_utils(cfg, F, int(IS[L.H_FNIC]), window),
        "prefill_busy_s": p_busy,
        "decode_busy_s": d_busy,
        **_work(IS, F, cfg.n_prefill, n_dec),
        **_itl_stats(F),
        **_host_stats(cfg, IS, F, window),
        **_l3_stats(IS, F, window),
        **_prewarm_stats(r, cfg, prewarm_s),
        "host_busy_s": [float(F[L.DF0 + d * L.NDF + L.DF_HP_BUSY]) for d in range(n_dec)],
    }


def simulate_colocated(req: Requests, cfg: ColocatedConfig, recorder=None) -> SimResult:
    """Run the requests through ``cfg.instances`` colocated instances (prefill and decode
    sharing one device, one HBM budget and one schedule)."""
    check_colocated_config(cfg)
    mode = L.MODE_PRIORITY if cfg.scheduler == "prefill_priority" else L.MODE_CHUNKED
    k = cfg.instances
    ip = np.array(
        [
            k,
            k,
            1,
            cfg.max_batch,
            cfg.step_token_budget,
            min(cfg.prefix_cache_tokens, 2**61),
            cfg.budget_tokens,
            cfg.on_full == "wait",
            0,
            0,
            0,
            1,
            mode,
            recorder is not None,
        ],
        dtype=np.int64,
    )
    t_warm = _t_warm(req, cfg.warmup_requests)
    fp = np.array([1.0, 0.0, cfg.wait_timeout_s, t_warm] + _costs(cfg.cost, cfg.cost))
    r = _Run(req, ip, fp, np.zeros(0, dtype=np.int64))
    IS, F = r.IS, r.F
    F[L.G_ITL_NW] = cfg.warmup_requests
    t_steady = _t_steady(req, t_warm)
    F[L.FP_TSTEADY] = t_steady
    args = lambda: (IS, F, r.R, r.B32, r.EHT, r.EHI, r.TLF, r.TLI, r.bid, r.bt)  # noqa: E731
    while (status := _run_colocated(*args())) != DONE:
        r.grow(status)
    r.close()
    t_end = float(F[L.G_NOW])
    r.log(recorder, "colocated", (k, k, 1))

    cols = r.columns(True)
    cols["t_decode_start"][:] = cols["t_prefill_end"]  # no hand-off: t_transfer_* stay NaN
    window = _window(_steady_end(t_end, t_steady), t_warm)
    busy = sum(float(F[L.DF0 + i * L.NDF + L.DF_BUSY]) for i in range(k))
    stats = {
        "t_warm": t_warm,
        "t_end": t_end,
        "t_steady": _steady_end(t_end, t_steady),
        "budget_tokens": float(cfg.budget_tokens),
        "mean_replica_tokens": 0.0,
        "peak_replica_tokens": 0.0,
        "mean_used_tokens": float(F[L.G_USED_AREA]) / window / k,
        "peak_used_tokens": float(IS[L.GI_PEAK_USED]),
        "prefill_util": busy / window / k,
        "decode_util": busy / window / k,
        "mean_decode_batch": float(F[L.G_BATCH_AREA]) / window / k,
        "link_util": 0.0,
        "decode_busy_s": [float(F[L.DF0 + i * L.NDF + L.DF_BUSY]) for i in range(k)],
        **_work(IS, F, 0, k),
        **_itl_stats(F),
        "link_util_egress": 0.0,
        "link_util_ingress": 0.0,
    }
    r.release_dead(True)
    return SimResult(cols, stats)


def warm_up(colocated: bool = False) -> None:
    """Compile (or load from the cache) the engine on a three-request run, so that worker
    processes started afterwards load the cached machine code instead of each compiling it.
    numba compiles whole functions by argument types, so one run that calls every entry
    point (the prewarm's, and the timeline's through a recorder) compiles every function
    (tests/test_firstrun.py checks that none is left)."""
    from prefixbench.physics.costmodel import InstanceCost

    from .recorder import Recorder

    cost = InstanceCost(**{f.name: 1.0 for f in fields(InstanceCost)})
    req = Requests(
        arrival=np.array([0.0, 0.5, 1.0]),
        prompt_len=np.array([8, 8, 8], dtype=np.int64),
        output_len=np.array([2, 2, 2], dtype=np.int64),
        blk_ptr=np.array([0, 1, 2, 2], dtype=np.int64),
        blk_hash=np.array([1, 1], dtype=np.int64),
        blk_tokens=np.array([4, 4], dtype=np.int64),
        prefix_id=np.array([0, 0, -1], dtype=np.int64),
    )
    cfg = EngineConfig(policy="replicate_hotset", prefill_cost=cost, decode_cost=cost)
    recorder = Recorder()
    simulate(req, replace(cfg, hot_blocks=[(1, 4)], prewarm="link"), recorder=recorder)
    recorder.events()
    if colocated:
        simulate_colocated(req, ColocatedConfig(cost=cost, instances=1))
