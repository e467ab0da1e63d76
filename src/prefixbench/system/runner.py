"""From a validated scenario to simulated runs: workload, memory budget, hot set, engine.

``prepare`` does everything that does not depend on the policy once; ``simulate_policy``
runs one policy on it. Both are pure functions of the scenario (and its seed).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from prefixbench import catalog
from prefixbench.catalog.formats import with_formats
from prefixbench.catalog.specs import ModelSpec
from prefixbench.engine import (
    ColocatedConfig,
    EngineConfig,
    SimResult,
    simulate,
    simulate_colocated,
)
from prefixbench.engine.routing import DECODE_ROUTERS, PREFILL_ROUTERS
from prefixbench.errors import ScenarioError, SimulationError
from prefixbench.physics.costmodel import (
    InstanceCost,
    decode_iteration_time,
    kv_bytes_per_token,
    link_rate,
    transfer_fixed,
    weight_bytes,
)
from prefixbench.physics.power import with_power
from prefixbench.scenario.describe import run_notes
from prefixbench.scenario.models import Scenario, SessionWorkload, SyntheticWorkload, TraceWorkload
from prefixbench.support.suggest import did_you_mean
from prefixbench.workload.dense import shared_counts, unique_counts
from prefixbench.workload.requests import Requests

DEFAULT_REQUESTS = 10_000  # synthetic run length when run.requests is not set (docs/model.md)
HEADROOM_SIGMAS = 3.0  # budget_factor 1.0 covers the mean decode population + 3 sqrt(L)
WORKING_SET_COVERAGE = 0.9  # hot-prefix working set: shared blocks carrying 90% of their references


@dataclass
class Prepared:
    scenario: Scenario
    model: ModelSpec
    requests: Requests
    base: EngineConfig  # policy filled in per run
    kv_bpt: int
    reference_tokens: float  # reference decode KV demand per instance (tokens)
    active_tokens: float  # its active-set part
    working_set_tokens: float  # its hot-prefix part
    mean_decode_batch: float  # Little's-law estimate used for the reference
    notes: list[str]  # things the user should know about this run (shown on stderr)
    reference_gb: float = 0.0  # the reference demand in GB (on the reference system)


def build_requests(s: Scenario) -> tuple[Requests, list[str]]:
    """The scenario's requests and notes for the user (e.g. skipped trace records)."""
    w = s.workload
    if isinstance(w, SyntheticWorkload):
        from prefixbench.workload.synthetic import generate

        return generate(w, s.run.requests or DEFAULT_REQUESTS, s.cluster.block_size, s.seed), []
    if isinstance(w, SessionWorkload):
        from prefixbench.workload.sessions import generate as generate_sessions

        n = s.run.requests or DEFAULT_REQUESTS
        return generate_sessions(w, n, s.cluster.block_size, s.seed), []
    if isinstance(w, TraceWorkload):
        from prefixbench.workload.replay import trace_requests

        m = catalog.get_model(s.model)
        req, notes = trace_requests(
            w, s.run.requests, s.cluster.block_size, s.seed, m.max_context, m.name
        )
        if w.overlay is None:  # per-block chains: answers read off the follow-up turns
            from prefixbench.workload.answers import trace_answers

            req = trace_answers(req)
        return req, notes
    raise ScenarioError(f"unknown workload kind {w!r}")


def reference_demand(
    req: Requests, cost: InstanceCost, n_decode: int, max_batch: int, block: int = 1
) -> tuple[float, float, float, float]:
    """Reference decode KV demand per instance, in tokens (docs/model.md, "Memory budget").

    active = (L + 3·sqrt(L)) · E[prompt + output] + max(prompt + output), where L is the mean number of requests in
    a decode batch by Little's law: L = λ/D · E[output] · t_iter(L), solved as a fixed
    point; working set = tokens of the most-referenced blocks carrying 90% of references.
    With paged admission (``block`` = cluster.block_size) the largest request is counted in
    whole blocks, as it is allocated.
    """
    n = len(req)
    span = float(req.arrival[-1] - req.arrival[0]) if n > 1 else 0.0
    rate = (n - 1) / span / n_decode if span > 0 else 0.0
    mean_prompt = float(req.prompt_len.mean())
    mean_out = float(req.output_len.mean())
    b = 1.0
    for _ in range(100):
        t_it = float(
            decode_iteration_time(cost, max(b, 1.0), max(b, 1.0) * (mean_prompt + mean_out / 2))
        )
        b_new = min(rate * mean_out * t_it, float(max_batch))
        if abs(b_new - b) < 1e-9:
            break
        b = 0.5 * (b + b_new)
    # + one largest request, so that at budget 1.0 any single request fits even at light load
    largest = int((req.prompt_len + req.output_len).max())
    active = (b + HEADROOM_SIGMAS * math.sqrt(b)) * (mean_prompt + mean_out) + float(
        -(-largest // block) * block
    )
    ws = 0.0
    if len(req.blk_hash):
        # a block referenced once is never reused: not working set
        first, counts = shared_counts(req.blk_hash, 2)
        if counts.size:
            keep = most_referenced(counts, WORKING_SET_COVERAGE)
            ws = float(req.blk_tokens[first[keep]].sum())
    ws = min(ws, active)  # a vast reuse history (multi-turn traces) must not dwarf the active set
    return active + ws, active, ws, b


def most_referenced(counts: np.ndarray, coverage: float) -> np.ndarray:
    """The blocks (indices into ``counts``, blocks in ascending hash order) that the
    most-referenced-first order (ties: lower hash first) takes until they carry
    ``coverage`` of all references, found by counting instead of sorting: every block
    referenced more often than the cut's count, and the first blocks of the cut's count.
    The cut is where ``np.cumsum(counts[order]) / counts.sum()`` first reaches ``coverage``,
    the same float comparisons as the sorted order's (tests/test_dense.py)."""
    total = counts.sum()
    per = np.bincount(counts)  # blocks per reference count
    c_desc = np.arange(per.size - 1, -1, -1)
    ends = np.cumsum(per[::-1] * c_desc)  # references up to the end of each count's group
    g = min(int(np.searchsorted(ends / total, coverage)), per.size - 1)  # the cut's group
    c = int(c_desc[g])
    before = int(ends[g]) - c * int(per[c])  # references of the more-referenced blocks
    within = (before + c * np.arange(1, per[c] + 1)) / total
    r = min(int(np.searchsorted(within, coverage)) + 1, int(per[c]))
    return np.concatenate((np.flatnonzero(counts > c), np.flatnonzero(counts == c)[:r]))


def hot_blocks(req: Requests, upto: int, budget_tokens: float) -> list[tuple[int, int]]:
    """The globally hottest blocks as observed over the first ``upto`` requests, hottest first,
    cut at ``budget_tokens`` (the prewarmed set of replicate_hotset)."""
    end = int(req.blk_ptr[min(upto, len(req))])
    if end == 0 or budget_tokens <= 0:
        return []
    hashes, first, counts = unique_counts(req.blk_hash[:end])
    tokens = req.blk_tokens[:end][first]
    order = np.lexsort((hashes, -counts))
    csum = np.cumsum(tokens[order])
    keep = order[csum <= budget_tokens]
    return list(zip(hashes[keep].tolist(), tokens[keep].tolist(), strict=True))


def ced_prefill(
    p_cost: InstanceCost, model: ModelSpec, layers: int, on: str, window: int, c
) -> InstanceCost:
    """The prefill pool's cost of a causal encoder-decoder (docs/model.md §2.12)."""
    from prefixbench.physics.costmodel import ced_prefill_cost

    if c.mode == "colocated":
        raise SimulationError(
            "the engine does not run a CED model in colocated mode yet",
            where="cluster.mode",
            fix="use mode: disaggregated, or drop model.ced_encoder_layers",
        )
    return ced_prefill_cost(
        p_cost, model, layers, c.prefill.devices, c.prefill.parallelism(), on, window
    )


def speculative(d_cost: InstanceCost, model: ModelSpec, c) -> tuple[InstanceCost, ModelSpec]:
    """The decode pool's cost with speculative decoding, and its draft (docs/model.md §2.13)."""
    from prefixbench.physics.costmodel import check_draft_bound, speculative_cost

    sp = c.decode.speculative
    if c.mode == "colocated":
        raise SimulationError(
            "the engine does not run speculative decoding in colocated mode",
            where="cluster.decode.speculative",
            fix="use mode: disaggregated, or drop speculative",
        )
    if sp.method == "mtp":
        draft = model.model_copy(update={"name": f"{model.name}-mtp", "layers": sp.mtp_layers})
    else:
        draft = catalog.get_model(sp.draft_model)
    if draft.is_moe or draft.is_mla:
        raise ScenarioError(
            f"the draft ({draft.name}) is MoE or MLA; speculative drafts are priced dense",
            where="cluster.decode.speculative",
            fix="use a dense draft model (e.g. llama-3.1-8b, qwen2-0.5b)",
        )
    cost = speculative_cost(d_cost, draft, sp.gamma, sp.acceptance)
    check_draft_bound(cost, c.max_decode_batch)
    return cost, draft


@dataclass
class Costs:
    """A scenario's instances priced: costs, weights and KV bytes (policy-independent)."""

    model: ModelSpec
    p_cost: InstanceCost
    d_cost: InstanceCost
    kv_bpt: int  # KV bytes per token of the model
    kv_mem: int  # bytes of decode memory per KV token (the draft's KV included)
    pwbytes: float  # weights resident on a prefill instance
    dwbytes: float  # weights resident on a decode instance (the draft's included)


def resolve_model(s: Scenario) -> tuple[ModelSpec, tuple]:
    """The scenario's model in its formats, and its CED settings (layers, replay on, window)."""
    fmt = s.model_format.model_dump()
    ced = (fmt.pop("ced_encoder_layers"), fmt.pop("ced_replay_on"), fmt.pop("ced_replay_tokens"))
    return with_formats(catalog.get_model(s.model), **fmt), ced


def check_routers(c) -> None:
    for field, name, known in (
        ("prefill_router", c.prefill_router, PREFILL_ROUTERS),
        ("decode_router", c.decode_router, DECODE_ROUTERS),
    ):
        if name not in known:
            raise ScenarioError(
                f"unknown {field.replace('_', ' ')} '{name}'",
                where=f"cluster.{field}",
                fix=did_you_mean(name, known),
            )


def check_tp(model: ModelSpec, c) -> None:
    """Tensor parallelism shards attention by heads: its degree must divide them (vLLM
    refuses otherwise: vllm/config, "Total number of attention heads must be divisible by
    tensor parallel size")."""
    for role, grp in (("prefill", c.prefill), ("decode", c.decode)):
        tp = grp.tp_degree()
        if model.heads % tp:
            ok = [d for d in range(1, grp.devices + 1) if model.heads % d == 0 and grp.devices % d == 0]
            raise ScenarioError(
                f"tensor parallelism {tp} does not divide the {model.heads} attention heads "
                f"of {model.name}",
                where=f"cluster.{role}",
                fix=f"set cluster.{role}.tp (or devices) to one of {', '.join(map(str, ok))}",
            )


def instance_costs(s: Scenario) -> Costs:
    """Price both pools: roofline, CED, power cap, speculative decoding."""
    model, (ced_layers, ced_on, ced_w) = resolve_model(s)
    c = s.cluster
    check_tp(model, c)
    p_dev = catalog.get_accelerator(c.prefill.accelerator)
    d_dev = catalog.get_accelerator(c.decode.accelerator)
    p_cost = InstanceCost.build(
        model, p_dev, c.prefill.devices, s.efficiency, c.prefill.parallelism()
    )
    d_cost = InstanceCost.build(
        model, d_dev, c.decode.devices, s.efficiency, c.decode.parallelism()
    )
    if ced_layers is not None:  # --- asymmetric models
        from dataclasses import replace

        from prefixbench.physics.costmodel import ced_decode_cost

        p_cost = ced_prefill(p_cost, model, ced_layers, ced_on, ced_w, c)
        d_cost = ced_decode_cost(d_cost, model, ced_layers)  # its recomputed prefixes
        if ced_on == "decode":  # the decode instance replays before the first iteration
            d_cost = replace(d_cost, ced_window=float(ced_w))
    p_cost = with_power(  # --- power: cap folded into the FLOP rates
        p_cost, p_dev, c.prefill.devices, s.efficiency, c.prefill.power_cap_w,
        c.prefill.dvfs, "cluster.prefill",
    )  # fmt: skip
    d_cost = with_power(
        d_cost, d_dev, c.decode.devices, s.efficiency, c.decode.power_cap_w,
        c.decode.dvfs, "cluster.decode",
    )  # fmt: skip
    kv_bpt = kv_bytes_per_token(model)
    wbytes = weight_bytes(model)
    pwbytes = wbytes  # --- ced: a replay-on-decode prefill instance holds the encoder only
    if ced_layers is not None and ced_on == "decode":
        from prefixbench.physics.costmodel import ced_prefill_weight_bytes

        pwbytes = ced_prefill_weight_bytes(model, ced_layers)
    kv_mem, dwbytes = kv_bpt, wbytes  # --- speculative: the draft's KV and weights too
    if c.decode.speculative is not None:
        d_cost, draft = speculative(d_cost, model, c)
        kv_mem = kv_bpt + kv_bytes_per_token(draft)
        dwbytes = wbytes + weight_bytes(draft)
    return Costs(model, p_cost, d_cost, kv_bpt, kv_mem, pwbytes, dwbytes)


def check_weights_fit(s: Scenario, k: Costs) -> None:
    from prefixbench.physics.sizing import fit_fix

    c = s.cluster
    for role, cost, grp, wb in (
        ("prefill", k.p_cost, c.prefill, k.pwbytes),
        ("decode", k.d_cost, c.decode, k.dwbytes),
    ):
        if wb >= cost.memory_bytes:
            dev = catalog.get_accelerator(grp.accelerator)
            raise SimulationError(
                f"{k.model.name} weights ({wb / 1e9:.1f} GB) do not fit a {role} instance "
                f"({grp.devices}x {dev.name}, {cost.memory_bytes / 1e9:.0f} GB)",
                where=f"cluster.{role}",
                fix=fit_fix(wb, role, grp.accelerator, grp.devices),
            )


def checked_requests(s: Scenario, model: ModelSpec) -> tuple[Requests, list[str]]:
    """The scenario's requests, refused when none, unrepresentable or too long."""
    from prefixbench.support.memcheck import check_fits

    if isinstance(s.workload, SyntheticWorkload):  # before generating anything
        check_fits(s.run.requests or DEFAULT_REQUESTS)
    req, notes = build_requests(s)
    notes = [*notes, *run_notes(model)]
    if isinstance(s.workload, TraceWorkload):
        check_fits(len(req), "run.requests (or the trace's length)")
    if len(req) == 0:
        raise SimulationError(
            "the workload produced no requests",
            where="workload",
            fix="check the trace and its replay window",
        )
    if not np.all(np.isfinite(req.arrival)):
        raise SimulationError(
            "arrival times overflow (the arrival rate is too low to represent)",
            where="workload.rate"
            if isinstance(s.workload, TraceWorkload)
            else "workload.arrivals.rate",
            fix="raise the arrival rate",
        )
    longest = int((req.prompt_len + req.output_len).max())
    if longest > model.max_context:
        raise SimulationError(
            f"a request needs {longest} tokens but {model.name} handles at most {model.max_context}",
            where="workload",
            fix="shorten the length distributions, or pick a longer-context model",
        )
    return req, notes


@dataclass(frozen=True)
class Reference:
    """The reference decode KV demand ``memory.budget_factor`` multiplies, per instance."""

    tokens: float
    active: float
    working_set: float
    batch: float
    kv_mem: int  # bytes per token on the reference system

    @property
    def gb(self) -> float:
        return self.tokens * self.kv_mem / 1e9


def same_system(a: Scenario, b: Scenario) -> bool:
    """Whether two scenarios differ at most in their memory section."""
    return a.model_dump(exclude={"memory"}) == b.model_dump(exclude={"memory"})


def reference_of(s: Scenario, req: Requests, k: Costs, n: int, block: int) -> Reference:
    """The reference demand of ``s``'s reference scenario (docs/model.md, "Memory in GB"):
    measured once on it — its rate, hardware, formats and seed — so that a --set changing
    any of them leaves the GB a budget factor stands for unchanged."""
    ref = s.reference()
    sized = s.memory.kv_budget_gb is not None or s.memory.gpu_memory_utilization is not None
    if sized or same_system(ref, s):  # its own reference (shown, not used): its requests
        return Reference(
            *reference_demand(req, k.d_cost, n, s.cluster.max_decode_batch, block), k.kv_mem
        )
    return _reference_cached(ref.model_dump_json(), n, block)


@functools.lru_cache(maxsize=64)
def _reference_cached(ref_json: str, n: int, block: int) -> Reference:
    ref = Scenario.model_validate_json(ref_json)
    k = instance_costs(ref)
    req, _ = checked_requests(ref, k.model)
    return Reference(
        *reference_demand(req, k.d_cost, n, ref.cluster.max_decode_batch, block), k.kv_mem
    )


def kv_budget(s: Scenario, k: Costs, ref: Reference | None, n_share: int = 0) -> float:
    """Decode KV budget per instance, tokens (not yet cut to int): memory.kv_budget_gb,
    memory.gpu_memory_utilization, or memory.budget_factor × the reference demand."""
    from prefixbench.physics.sizing import activation_reserve_bytes, kv_pool_bytes

    m, c = s.memory, s.cluster
    if m.kv_budget_gb is not None:  # colocated: the decode pool's total, shared out
        raw = m.kv_budget_gb * 1e9 / k.kv_mem
        return raw * c.decode_instances / n_share if n_share else raw
    if m.gpu_memory_utilization is not None:
        reserve = activation_reserve_bytes(
            k.model, c.decode.tp_degree(), c.chunk_token_budget, c.max_decode_batch
        )
        pool = kv_pool_bytes(
            m.gpu_memory_utilization, k.d_cost.memory_bytes, k.dwbytes, reserve, c.decode.devices
        )
        return max(pool, 0.0) / k.kv_mem
    if ref.kv_mem == k.kv_mem:  # the same bytes per token: tokens as measured
        return m.budget_factor * ref.tokens
    return m.budget_factor * ref.tokens * ref.kv_mem / k.kv_mem


def checked_budget(s: Scenario, k: Costs, raw: float, req: Requests) -> int:
    """The budget in whole tokens, refused when beyond the decode memory or below a request."""
    from prefixbench.physics.sizing import fit_fix

    c, kv_mem = s.cluster, k.kv_mem
    huge = not raw < 2**62  # beyond any HBM (or inf): refused below without int overflow
    budget = 2**62 if huge else int(raw)
    free = k.d_cost.memory_bytes - k.dwbytes
    if budget * kv_mem > free:
        shown = (raw if huge else budget) * kv_mem / 1e9
        raise SimulationError(
            f"decode KV budget {shown:.2f} GB exceeds the {free / 1e9:.2f} GB a decode "
            f"instance has left after weights",
            where="memory",
            fix=fit_fix(k.dwbytes + budget * kv_mem, "decode", c.decode.accelerator, c.decode.devices)
            + "; or lower memory.budget_factor / memory.kv_budget_gb",
        )
    smallest = int((req.prompt_len + req.output_len).min())
    if budget < smallest:
        raise SimulationError(
            f"decode KV budget ({budget} tokens) is below the smallest request ({smallest} tokens): "
            "nothing could ever be admitted",
            where="memory",
            fix="raise memory.budget_factor, memory.kv_budget_gb or "
            "memory.gpu_memory_utilization",
        )
    return budget


def _per_nic_rate(c) -> float:
    """Bytes per second one NIC (private paths: one channel) carries in a transfer: with
    shared NICs a transfer spans the smaller end's N NICs, so each carries min(η · line rate,
    ceiling / N) and together they reach min(η · N · line rate, ceiling) (docs/model.md "KV
    transfer cost"); a private path's channel is η · line rate."""
    link = c.link.spec()
    if c.link.topology != "shared_nics":
        return link_rate(link)
    n = min(
        c.link.nics_per_instance or c.prefill.devices, c.link.nics_per_instance or c.decode.devices
    )
    return link_rate(link, n) / n


def engine_config(s: Scenario, k: Costs, req: Requests, budget: int) -> EngineConfig:
    """The engine's configuration of the prepared scenario (policy filled in per run)."""
    c, m = s.cluster, s.memory
    prefill_cache = int((k.p_cost.memory_bytes - k.pwbytes) * c.prefill_cache_fraction / k.kv_bpt)
    host_tokens, host_bps, host_lat = host_tier(s, budget, k.kv_bpt)
    return EngineConfig(
        policy="transfer_per_request",
        prefill_cost=k.p_cost,
        decode_cost=k.d_cost,
        n_prefill=c.prefill_instances,
        n_decode=c.decode_instances,
        # per NIC: η · line rate, or its share of the instance's ceiling; every request's
        # transfer pays latency + setup once
        link_bytes_per_s=_per_nic_rate(c),
        link_latency_s=transfer_fixed(c.link.spec()),
        link_channels=c.link.channels,
        link_topology=c.link.topology,
        prewarm=c.link.prewarm,
        nics_prefill=c.link.nics_per_instance or c.prefill.devices,
        nics_decode=c.link.nics_per_instance or c.decode.devices,
        streaming=c.link.streaming,
        layers=k.model.layers,
        recompute_chunk_tokens=c.chunk_token_budget,
        max_batch=c.max_decode_batch,
        prefill_token_budget=c.prefill_token_budget,
        prefill_cache_tokens=prefill_cache,
        budget_tokens=budget,
        # the hot set is what an operator saw before deploying: the warm-up requests (or, with
        # no warm-up, the first tenth of the run) — never the future
        hot_blocks=hot_blocks(
            req, s.run.warmup_requests or max(1, len(req) // 10), m.hotset_share * budget
        ),
        hot_refresh_s=m.hotset_refresh_s or 0.0,
        hot_cap_tokens=int(min(m.hotset_share * budget, 2**62)),
        on_full=m.on_full,
        wait_timeout_s=m.wait_timeout_s,
        prefill_router=c.prefill_router,
        decode_router=c.decode_router,
        kv_overlap_weight=c.kv_overlap_weight,
        max_local_prefill_tokens=c.max_local_prefill_tokens,
        local_prefill_hit_ratio=c.local_prefill_hit_ratio,
        warmup_requests=s.run.warmup_requests,
        host_kv_tokens=host_tokens,
        host_path_bytes_per_s=host_bps,
        host_path_latency_s=host_lat,
        admission=m.admission,
        block_size=c.block_size,
        preemption=m.preemption,
        queue_timeout_s=m.queue_timeout_s,
        cache_generated=m.cache_generated,
        host_write_policy=m.host_write_policy,
        l3_store_tokens=int(min(m.l3_store_gb * 1e9 / k.kv_bpt, 2**62)),
        l3_store_bytes_per_s=m.l3_store_gbps * 1e9 / 8,
        swap_tokens=host_memory_tokens(s, k.kv_bpt),  # --- admit
        reserved_decode_tokens=m.reserved_decode_tokens,
        prefill_hold=m.prefill_hold,
        cost_aware_local=c.cost_aware_local_prefill,
    )


def host_memory_tokens(s: Scenario, kv_bpt: float) -> int:
    """A decode instance's host DRAM in KV tokens: what swapped-out KV may take, less the
    host KV pool of the tiered policies (the engine subtracts it; docs/model.md §1.5.1)."""
    return int(min(s.cluster.decode.host_memory() * 1e9 / kv_bpt, 2**62))


def prepare(s: Scenario) -> Prepared:
    """Resolve names, generate requests and size the memory budget (policy-independent)."""
    c = s.cluster
    check_routers(c)
    k = instance_costs(s)
    check_weights_fit(s, k)
    req, notes = checked_requests(s, k.model)
    paged = s.memory.admission == "paged" and c.mode != "colocated"
    block = c.block_size if paged else 1
    ref = reference_of(s, req, k, c.decode_instances, block)
    budget = checked_budget(s, k, kv_budget(s, k, ref), req)
    base = engine_config(s, k, req, budget)
    if s.run.warmup_requests >= len(req):
        raise ScenarioError(
            f"run.warmup_requests ({s.run.warmup_requests}) leaves none of the {len(req)} requests to measure",
            where="run.warmup_requests",
            fix="lower it or replay more requests",
        )
    if not hindsight_on(s, len(req)):
        notes.append(hindsight_note(s, len(req)))
    return Prepared(
        s, k.model, req, base, k.kv_bpt, ref.tokens, ref.active, ref.working_set, ref.batch,
        notes, ref.gb,
    )  # fmt: skip


def hindsight_on(s: Scenario, n: int) -> bool:
    """Whether the hindsight schedule (metrics/bound.py) is computed for ``n`` requests:
    at most ``run.hindsight_max_requests`` of them, or always when that is null."""
    cap = s.run.hindsight_max_requests
    return cap is None or n <= cap


def hindsight_note(s: Scenario, n: int) -> str:
    return (
        f"hindsight bound skipped: {n:,} requests > run.hindsight_max_requests "
        f"({s.run.hindsight_max_requests:,}); --set run.hindsight_max_requests=null computes it"
    )


HICACHE_RATIO = 2.0  # SGLang HiCache --hicache-ratio: host pool = 2x the device KV pool


def host_tier(s: Scenario, budget_tokens: int, kv_bpt: float) -> tuple[int, float, float]:
    """replicate_tiered's host pool per decode instance (tokens) and host path (bytes/s of
    the instance, one path per device with the KV sharded over them; latency, s).

    The pool is ``memory.host_kv_gb``, by default twice the HBM KV budget (SGLang HiCache's
    ratio) up to the instance's host memory; an explicit pool above that is refused."""
    from prefixbench.catalog.hostpaths import get_host_path

    dec = s.cluster.decode
    host_gb = dec.host_memory()
    want = s.memory.host_kv_gb
    if want is not None and want > host_gb:
        raise ScenarioError(
            f"host KV pool {want:g} GB exceeds the {host_gb:g} GB of host memory a decode "
            "instance has",
            where="memory.host_kv_gb",
            fix="lower memory.host_kv_gb or raise cluster.decode.host_memory_gb",
        )
    gb = min(HICACHE_RATIO * budget_tokens * kv_bpt / 1e9, host_gb) if want is None else want
    path = get_host_path(dec.host_path)
    tokens = int(min(gb * 1e9 / kv_bpt, 2**31 - 2))
    return tokens, path.bytes_per_s * dec.devices, path.latency_s


def colocated_budget(prep: Prepared, n: int) -> int:
    """KV budget per colocated instance: the same rule as a decode instance's, for a load
    spread over ``n`` instances (an absolute budget is shared out: D·budget / n; a share
    of HBM is the same pool as a decode instance's, on the same hardware)."""
    s, b = prep.scenario, prep.base
    m = s.memory
    if m.kv_budget_gb is not None:
        return b.budget_tokens * b.n_decode // n
    if m.gpu_memory_utilization is not None:
        return b.budget_tokens
    ref = s.reference()
    if same_system(ref, s):
        tokens = reference_demand(prep.requests, b.decode_cost, n, b.max_batch)[0]
        return int(m.budget_factor * tokens)
    r = _reference_cached(ref.model_dump_json(), n, 1)
    return int(m.budget_factor * r.tokens * r.kv_mem / prep.kv_bpt)


def colocated_config(prep: Prepared) -> ColocatedConfig:
    """The coupled system on the same hardware: P + D instances of the decode hardware, the
    same total KV budget spread over them, each with a prefix cache like a prefill node's."""
    c, b = prep.scenario.cluster, prep.base
    n = c.prefill_instances + c.decode_instances
    return ColocatedConfig(
        cost=b.decode_cost,
        instances=n,
        scheduler=c.colocated_scheduler,
        step_token_budget=c.prefill_token_budget
        if c.colocated_scheduler == "prefill_priority"
        else c.chunk_token_budget,
        max_batch=b.max_batch,
        budget_tokens=colocated_budget(prep, n),
        prefix_cache_tokens=b.prefill_cache_tokens,
        on_full=b.on_full,
        wait_timeout_s=b.wait_timeout_s,
        warmup_requests=b.warmup_requests,
    )


def simulate_policy(
    prep: Prepared, policy: str, *, track_gaps: bool = False, recorder=None
) -> SimResult:
    """One run: the prepared scenario under ``policy`` (colocated mode ignores the policy:
    without a hand-off there is nothing to choose)."""
    from dataclasses import replace

    if prep.scenario.cluster.mode == "colocated":
        return simulate_colocated(prep.requests, colocated_config(prep), recorder)
    return simulate(
        prep.requests, replace(prep.base, policy=policy, track_gaps=track_gaps), recorder
    )
