"""What one engine run takes and gives: configurations, results, outcome codes.

``EngineConfig`` is a disaggregated run, ``ColocatedConfig`` a colocated one (both built by
runner.py from a scenario). ``check_*`` refuse, with one line naming the field, anything
the engine cannot represent; nothing is silently run another way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from prefixbench.physics.costmodel import InstanceCost

from ..errors import SimulationError
from .layout import Outcome, Reason
from .policies import POLICIES
from .routing import DECODE_ROUTERS, PREFILL_ROUTERS

REASON_NAMES = {r.value: r.name.lower() for r in Reason}
SCHEDULERS = {
    "prefill_priority": "vLLM v0: whole prefills first; running decodes stall for each step",
    "chunked": "Sarathi-Serve: one decode token per sequence plus prefill chunks per step",
}
ON_FULL = ("reject", "wait")
ADMISSIONS = ("reserve", "paged")
PREEMPTIONS = ("recompute", "swap")
HOST_WRITE_POLICIES = ("write_back", "write_through", "write_through_selective")
LINK_TOPOLOGIES = ("shared_nics", "private_paths")
STREAMING = ("after_prefill", "layerwise")
PREWARM = ("free", "link")

# The per-request timestamp columns every run returns (SimResult.columns), in order.
TIME_COLUMNS = (
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
    "preempt_delay_s",  # paged: summed time from each preemption to rejoining the batch
)
INT32_MAX = 2**31 - 1


@dataclass
class EngineConfig:
    """Resolved, plain-number inputs of one disaggregated run (built by runner.prepare)."""

    policy: str
    prefill_cost: InstanceCost
    decode_cost: InstanceCost
    n_prefill: int = 1
    n_decode: int = 1
    link_bytes_per_s: float = 3.125e9
    link_latency_s: float = 0.0
    link_channels: int = 1  # private_paths only: channels per (prefill, decode) pair
    max_batch: int = 64
    prefill_token_budget: int = 8192
    prefill_cache_tokens: int = 10**9
    budget_tokens: int = 10**9  # decode KV budget per instance
    hot_blocks: list[tuple[int, int]] = field(default_factory=list)  # (hash, tokens), hottest first
    on_full: str = "reject"
    wait_timeout_s: float = 2.0
    prefill_router: str = "least_tokens"
    decode_router: str = "least_load"
    # --- kv routing: the kv_aware routers' overlap weight (engine/routing.py)
    kv_overlap_weight: float = 1.0
    # --- conditional: conditional_disagg's local-prefill thresholds (engine/conditional.py)
    max_local_prefill_tokens: int = 1000
    local_prefill_hit_ratio: float = 0.5
    warmup_requests: int = 0
    track_gaps: bool = False  # record each request's largest gap between tokens
    # NICs (docs/model.md "NICs"): shared_nics queues every transfer FCFS on its prefill
    # instance's egress group and its decode instance's ingress group; link_bytes_per_s is
    # then per NIC and a transfer moves at min(nics_prefill, nics_decode) NICs' rate (KV
    # sharded by head across the group). private_paths: link_channels per pair, each at
    # link_bytes_per_s.
    link_topology: str = "shared_nics"
    nics_prefill: int = 1
    nics_decode: int = 1
    # stream: after_prefill moves the KV once the prefill step ends; layerwise
    # admits at the step's start and streams layer by layer (engine/streaming.py), over
    # ``layers`` layers. recompute_chunk_tokens: the decode instance's per-iteration token
    # budget (decode tokens + recompute chunks, engine/recompute.py)
    streaming: str = "after_prefill"
    layers: int = 1
    recompute_chunk_tokens: int = 1024
    # --- tiered, replicate_tiered only: host-DRAM KV pool per decode instance
    # (tokens) and the instance's host<->GPU path (aggregate bytes/s over its devices, s)
    host_kv_tokens: int = 0
    host_path_bytes_per_s: float = 63.0e9
    host_path_latency_s: float = 1e-6
    # --- policy: the hot set's warm-up traffic (engine/warmup.py)
    prewarm: str = "free"  # free: resident and ready at time zero; link: sent at the start
    hot_refresh_s: float = 0.0  # re-rank and re-warm the hot set this often (0: never)
    hot_cap_tokens: int = 0  # the hot set's capacity (memory.hotset_share × budget)
    # decode KV admission (docs/model.md "Paged admission and preemption"): reserve (prompt
    # + output up front, on_full decides) or paged (blocks as tokens are generated, FCFS
    # queue with queue_timeout_s, None = wait for ever; preemption recompute or swap; swap
    # copies over the host path host_path_bytes_per_s / host_path_latency_s)
    admission: str = "reserve"
    block_size: int = 16
    preemption: str = "recompute"
    queue_timeout_s: float | None = None
    # a finished sequence's full answer blocks join its decode instance's replicas under
    # the replicating policies (SGLang cache_finished_req; docs/model.md §1.10.1); the
    # answers are the workload's (Requests.ans_*). False: prompt chains only
    cache_generated: bool = False
    # tiered: when an HBM block's host copy is written (SGLang --hicache-write-policy;
    # docs/model.md §1.13): write_back at its trim, write_through when its request finishes,
    # write_through_selective on its first reuse
    host_write_policy: str = "write_back"
    # --- l3: the shared L3 store (engine/l3store.py; replicate_tiered only): capacity in
    # tokens (0: no store) and its one FCFS queue's rate (bytes/s); latency: the link's
    l3_store_tokens: int = 0
    l3_store_bytes_per_s: float = 25.0e9
    # --- admit: host DRAM per decode instance (tokens); swapped-out KV takes what the
    # host KV pool of replicate_tiered / cost_aware leaves (paged swap falls back to
    # recompute when a victim's context does not fit in what is left), and
    # SGLang's reserved decode tokens: paged admission needs its own prompt blocks plus this
    # many tokens for every admitted request, itself included (0: off; docs/model.md §1.5.2)
    swap_tokens: int = 2**62
    reserved_decode_tokens: int = 0
    # --- admit: a prefill instance holds a request's prompt KV from its step's start until
    # the decode pull lands (or the request is rejected), out of its prefix cache's
    # capacity; a step starts only while the held KV and its prompts fit (docs/model.md §1.4.1)
    prefill_hold: bool = False
    # --- admit: cost_aware's fourth option, a local prefill on decode (engine/costlocal.py)
    cost_aware_local: bool = False


@dataclass
class ColocatedConfig:
    """One colocated run: ``instances`` devices each running prefill and decode."""

    cost: InstanceCost
    instances: int
    scheduler: str = "prefill_priority"  # or "chunked"
    step_token_budget: int = 8192  # prefill tokens per step (prefill_priority) or all (chunked)
    max_batch: int = 64
    budget_tokens: int = 10**9
    prefix_cache_tokens: int = 10**9
    on_full: str = "reject"
    wait_timeout_s: float = 2.0
    warmup_requests: int = 0


@dataclass
class SimResult:
    """Per-request columns (numpy) and per-run counters."""

    columns: dict[str, np.ndarray]
    stats: dict[str, float]
    state: object = None  # the engine's final state, with simulate(..., keep_state=True)


def _plain_int(v, lo: int, hi: int) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and lo <= int(v) <= hi


def _refuse(what: str, where: str, fix: str) -> None:
    raise SimulationError(what, where=where, fix=fix)


def _check_name(name: str, registry, where: str) -> None:
    if name not in registry:
        _refuse(f"the engine has no {where} '{name}'", where, "use one of: " + ", ".join(registry))


def _check_ints(pairs: list[tuple[str, object, int, int]]) -> None:
    for where, v, lo, hi in pairs:
        if not _plain_int(v, lo, hi):
            _refuse(f"{v!r} is not an integer in [{lo}, {hi}]", where, "pick a value in range")


def _check_common(cfg, instances: list[tuple[str, object]]) -> None:
    if cfg.on_full not in ON_FULL:
        _refuse(f"unknown on_full '{cfg.on_full}'", "memory.on_full", "use reject or wait")
    counts = [(where, v, 1, INT32_MAX) for where, v in instances]
    _check_ints(
        counts
        + [
            ("cluster.max_decode_batch", cfg.max_batch, 1, INT32_MAX),
            ("budget_tokens", cfg.budget_tokens, 0, 2**62),
            ("run.warmup_requests", cfg.warmup_requests, 0, 2**62),
        ]
    )


def check_engine_config(cfg: EngineConfig) -> None:
    """Refuse a disaggregated configuration the engine cannot run as given."""
    _check_name(cfg.policy, POLICIES, "policy")
    _check_name(cfg.prefill_router, PREFILL_ROUTERS, "prefill_router")
    _check_name(cfg.decode_router, DECODE_ROUTERS, "decode_router")
    _check_common(
        cfg,
        [
            ("cluster.prefill_instances", cfg.n_prefill),
            ("cluster.decode_instances", cfg.n_decode),
            ("cluster.link.channels", cfg.link_channels),
            ("cluster.link.nics_per_instance", cfg.nics_prefill),
            ("cluster.link.nics_per_instance", cfg.nics_decode),
        ],
    )
    if cfg.link_topology not in LINK_TOPOLOGIES:
        _refuse(
            f"unknown link topology '{cfg.link_topology}'",
            "cluster.link.topology",
            "use " + " or ".join(LINK_TOPOLOGIES),
        )
    if cfg.prewarm not in PREWARM:
        _refuse(f"unknown prewarm '{cfg.prewarm}'", "cluster.link.prewarm", "use free or link")
    if not (cfg.hot_refresh_s == 0.0 or 1e-3 <= cfg.hot_refresh_s <= 1e9):
        _refuse(
            f"refresh period {cfg.hot_refresh_s!r} s",
            "memory.hotset_refresh_s",
            "give 0.001 to 1e9 seconds (0: never)",
        )
    if cfg.link_topology == "shared_nics" and cfg.link_channels != 1:
        _refuse(
            f"link.channels={cfg.link_channels} applies to topology private_paths only",
            "cluster.link.channels",
            "set cluster.link.nics_per_instance for shared NICs, or topology: private_paths",
        )
    if not cfg.host_path_bytes_per_s > 0 or not cfg.host_path_latency_s >= 0:
        _refuse(
            "the host path needs a positive rate and a non-negative latency",
            "cluster.decode.host_path",
            "pick a host path from the catalog",
        )
    if not cfg.l3_store_bytes_per_s > 0:
        _refuse(
            f"L3 store bandwidth {cfg.l3_store_bytes_per_s!r} B/s",
            "memory.l3_store_gbps",
            "give a positive bandwidth",
        )
    if cfg.admission not in ADMISSIONS:
        _refuse(f"unknown admission '{cfg.admission}'", "memory.admission", "use paged or reserve")
    if cfg.host_write_policy not in HOST_WRITE_POLICIES:
        _refuse(
            f"unknown host write policy '{cfg.host_write_policy}'",
            "memory.host_write_policy",
            "use " + ", ".join(HOST_WRITE_POLICIES),
        )
    if cfg.preemption not in PREEMPTIONS:
        _refuse(
            f"unknown preemption '{cfg.preemption}'", "memory.preemption", "use recompute or swap"
        )
    _check_ints(
        [
            ("memory.host_kv_gb", cfg.host_kv_tokens, 0, INT32_MAX),
            ("memory.l3_store_gb", cfg.l3_store_tokens, 0, 2**62),
            ("cluster.decode.host_memory_gb", cfg.swap_tokens, 0, 2**62),
            ("memory.reserved_decode_tokens", cfg.reserved_decode_tokens, 0, INT32_MAX),
            ("cluster.block_size", cfg.block_size, 1, INT32_MAX),
            ("cluster.prefill_token_budget", cfg.prefill_token_budget, 1, 2**62),
            ("prefill_cache_tokens", min(cfg.prefill_cache_tokens, 2**61), 0, 2**62),
            ("model.layers", cfg.layers, 1, 2**20),
            ("cluster.chunk_token_budget", cfg.recompute_chunk_tokens, 2, 2**62),
        ]
    )
    _check_stream(cfg)


def _check_stream(cfg: EngineConfig) -> None:
    if cfg.streaming not in STREAMING:
        _refuse(
            f"unknown streaming mode '{cfg.streaming}'",
            "cluster.link.streaming",
            "use " + " or ".join(STREAMING),
        )
    if cfg.streaming == "layerwise" and cfg.link_topology != "shared_nics":
        _refuse(
            "layer-wise streaming is modelled on shared NICs only",
            "cluster.link.streaming",
            "set cluster.link.topology: shared_nics, or streaming: after_prefill",
        )
    # decode iterations carry chunks: recompute jobs, or a CED model's replay jobs (§2.12)
    recomputes = ("recompute_on_decode", "cost_aware", "conditional_disagg")
    what = "a recompute" if cfg.policy in recomputes else ""
    if not what and cfg.decode_cost.ced_window:  # --- ced
        what = "a CED replay"
    if not what:
        return
    _check_spec_room(cfg, what)
    if cfg.recompute_chunk_tokens <= cfg.max_batch:
        _refuse(
            f"chunk_token_budget {cfg.recompute_chunk_tokens} leaves no room for {what} "
            f"chunk beside a full decode batch of {cfg.max_batch}",
            "cluster.chunk_token_budget",
            "set cluster.chunk_token_budget above cluster.max_decode_batch",
        )


def _check_spec_room(cfg: EngineConfig, what: str) -> None:
    """With speculative decoding a full batch verifies max_batch·g tokens of the chunk budget
    (vLLM V1 schedules draft tokens in the same budget); what is left, over τ, must hold a
    recompute token per engine iteration (engine/mixed.chunk_room at a full batch)."""
    c = cfg.decode_cost
    g, tau = c.spec_tokens, c.spec_tau
    if g == 1.0 and tau == 1.0:
        return
    left = cfg.recompute_chunk_tokens - cfg.max_batch * int(g)
    if math.floor(left / tau + 1e-9) < 1:  # engine/mixed.chunk_room's rounding
        _refuse(
            f"chunk_token_budget {cfg.recompute_chunk_tokens} leaves no room for {what} "
            f"chunk beside a full decode batch of {cfg.max_batch} verifying {int(g)} tokens "
            "each",
            "cluster.chunk_token_budget",
            f"set cluster.chunk_token_budget to at least "
            f"{cfg.max_batch * int(g) + math.ceil(tau)}, or lower cluster.max_decode_batch",
        )


def check_colocated_config(cfg: ColocatedConfig) -> None:
    """Refuse a colocated configuration the engine cannot run as given."""
    _check_name(cfg.scheduler, SCHEDULERS, "cluster.colocated_scheduler")
    _check_common(cfg, [("instances", cfg.instances)])
    _check_ints(
        [
            ("step_token_budget", cfg.step_token_budget, 1, 2**62),
            ("prefix_cache_tokens", min(cfg.prefix_cache_tokens, 2**61), 0, 2**62),
        ]
    )


__all__ = [
    "ColocatedConfig",
    "EngineConfig",
    "Outcome",
    "REASON_NAMES",
    "Reason",
    "SimResult",
    "TIME_COLUMNS",
    "check_colocated_config",
    "check_engine_config",
]
