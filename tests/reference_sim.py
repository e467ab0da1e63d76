"""A deliberately naive reference simulator of the engine's semantics (BRIEF §6, rung 2).

Written from the semantics in docs/model.md and docs/coupled.md, not from the engine: plain
Python objects, linear scans instead of load arrays and indexes, and every decode iteration
is its own event (no closed-form series). It is slow on purpose and only meant for small
scenarios; ``tests/test_engine_reference.py`` checks that the product agrees with it on every
per-request timestamp and outcome.

It shares no physics with the product either: every step is priced by its own roofline
(``tests/reference_roofline.py``), written from docs/model.md §2 and the raw model config,
accelerator datasheet and efficiency numbers. Its inputs are those specs (``Roofline``) and
workload/configuration data (``RefConfig``: requests, budgets, hot set, routers, ...); it
never sees the product's step-cost objects. So agreement proves the cost model as well as
the event logic (see "How the reference is independent" below).

Semantics implemented, disaggregated mode (times in seconds):

* Events at equal times run in kind order DECODE < TRANSFER < PREFILL < TIMEOUT < ARRIVAL,
  then in the order they were scheduled.
* Prefill: a router picks the instance (``least_tokens``: fewest queued + running prompt
  tokens, ties lowest index; ``round_robin``). FIFO; an idle instance takes queue-head
  requests while their new tokens fit ``prefill_token_budget`` (the first always goes).
  Prefill hit = tokens of the longest leading run of the chain in the instance's LRU block
  cache, capped at prompt - 1. At step end every chain of the batch enters the cache (tail
  first, so a root is fresher than its tail; then LRU blocks are evicted over capacity),
  then each request, in batch order, is routed to a decode instance and handed off.
  Decode routing ``least_load``: fewest requests handed to the instance and not yet ended
  (ties lowest index); ``round_robin``; ``prefix_affinity``: most leading ready replica
  blocks of the chain, then least load, then lowest index.
* Hand-off (admission): replica hit = leading run of ready replica blocks (replicating
  policies only). need = prompt + output - hit. need > budget: rejected ``too_large``.
  If memory (after trimming idle replicas other than the hit) cannot hold need: rejected
  ``no_memory``, or with on_full=wait queued FIFO until memory frees (a request finishes)
  or the timeout passes (then it is rejected ``timeout`` and leaves the queue). With live
  waiters a newcomer queues behind them without trying; a queued request is admitted (or
  found too_large) only when it reaches the head. Otherwise hit blocks are pinned, idle
  replicas trimmed LRU until need fits, and the blocks the policy keeps (and that are not
  resident yet) become pending replicas, ready once the KV lands.
  The KV moves FCFS once both the prefill instance's egress NICs and the decode
  instance's ingress NICs are free, holding both (shared NICs, the default), or over the
  earliest-free channel of the (prefill, decode) path (private paths).
* Layer-wise streaming (``streaming="layerwise"``, shared NICs): the hand-off above happens
  when the request's prefill step starts (after the step's duration is known), for the
  step's requests in batch order. The moved KV is the last ``transfer_tokens`` of the
  prompt; its part the step computes (at most ``prompt - prefill_hit`` tokens) goes as one
  chunk per layer, layer l's ready at step start + (l + 1) * duration / layers; the rest
  (cached on the prefill node) as one chunk ready at admission. Chunks are FCFS on both
  NIC groups like whole transfers. For the requests admitted at a step's start the chunks
  are taken cached parts first (batch order), then layer by layer (batch order within a
  layer); a request admitted later takes its chunks alone, each ready at the later of its
  admission and its layer's end. It lands one latency after its last chunk.
* Decode: continuous batching, one event per iteration. A request is ready when its KV has
  landed and its recompute (if any) is done; it joins at the first boundary strictly after
  that (an idle instance starts a boundary at once).
* Recompute jobs (``recompute_on_decode``): a job of m prefix tokens is queued at admission.
  If jobs are queued or running on the instance, it shares with the one whose chain has the
  most leading tokens in common (block by block, at most either job's m; ties: the earliest
  queued) and waits until that job has done that many tokens; then they count as done and it
  computes the rest itself. ``recompute_tokens`` is the rest. While jobs are queued every
  iteration is a mixed one: at its start, after joins, the running batch gets one token each
  and the jobs (queue order) whose wait is over get chunks of min(room, m - done) tokens,
  room = chunk budget - batch size, shrinking as chunks are given; priced as one mixed step
  at decode efficiency, the chunks without logits. At the step's start every job's progress
  is booked (a waiting job whose partner reaches the shared tokens with this step counts
  them done); a job reaching m is done at the step's end and, if its KV has landed, enters
  the ready list then (at the step's start). At a boundary, before joins, a waiting job
  whose partner already has the shared tokens takes them; if that finishes it, it is done
  at the boundary. A job's ``t_recompute_start`` is the start of the first step (or the
  boundary) at which it made progress.
* Join order when the batch is full (the design leaves it open; this is the core's rule):
  FIFO by the moment a request entered the ready list: when its KV landed, or, for a
  request that also needs a recompute, the later of its KV landing and the start of the
  step that finishes its job.
* Requests finishing at the same boundary leave in request (arrival) order, which fixes
  the LRU order of the replica blocks they release (each request's chain tail first).
* ``cost_aware`` (docs/model.md "The cost-aware policy"): at admission, after the room
  check, every block of the chain gets its per-instance decayed use count bumped
  (``c = c·0.5^(Δt/T) + 1``, T = budget / (prompt tokens this instance admitted so far per
  second since its first admission), infinite at the first instant); blocks not resident
  with ``c ≥ 1.5`` are kept. With h replica-hit tokens and ph prefill-hit tokens, if ph > h
  it compares transfer (land time of prompt − h tokens queued now) against recompute of
  ph − h tokens (land of prompt − ph tokens vs. stall start = running stall's end or now,
  plus the queued recomputes, plus this one; charged + stall × running batch size) and
  recomputes only if strictly cheaper. Kept blocks of a recomputed request become ready
  when both its KV has landed and its recompute was run.
* Warm-up traffic (``prewarm: link``, replicate_hotset with a hot set): the hot blocks
  hold memory from the start but are not ready; at the first arrival, decode instance d
  (in order) receives all of them from prefill instance d mod P as one transfer queued
  like a request's (same NIC groups or earliest-free channel, same latency); when it lands
  the hot blocks that are idle and still not ready become ready.
* Hot-set refresh (``hot_refresh_s`` > 0, replicate_hotset with a hot set): every admitted
  request adds one use to each block of its chain (pooled over decode instances). Every
  period from the first arrival, while a request is in the system or still to arrive: the
  new hot set is the used blocks, most uses first (ties: smaller hash), taken while their
  tokens fit ``hot_cap_tokens`` (stop at the first that does not); uses reset; it replaces
  the set requests persist; each decode instance, in order, adds the blocks it lacks in
  that order as idle replicas (most recently used), trimming idle replicas LRU when the
  free memory is short, and stops at the first block that cannot fit; with prewarm=link
  the added blocks are not ready and travel as one transfer as at the start.
* ``max_token_gap``: the largest interval between two consecutive output tokens of a
  request (0 for a single token), from the token times themselves.

Colocated mode (``ColocatedReference``, docs/model.md §1.12, docs/coupled.md): see its
docstring.

How the reference is independent
--------------------------------
Nothing here imports the product's cost model or engine (a pre-stop hook greps for the
module names). The roofline in reference_roofline.py counts parameters per Hugging Face
module and prices steps from docs/model.md; the product's numbers enter only as results.
Mutation table (``tests/mutate_costmodel.py``, hypothesis seed 0): each term of the
product's cost-model file multiplied by 4, then by 1.1, one at a time; the tests of
tests/test_engine_reference.py that failed. D = test_disaggregated_matches_reference,
C = test_colocated_matches_reference, P = test_presets_match_reference,
F = test_costmodel_functions_match_reference_roofline (added after the first 34 rows were
run), +Nh = N hand-written cases. No mutation survived either factor. Terms used only by
the Python colocated engine (the decode-series and W(B) helpers; the compiled core has its
own copies) are caught by C; functions off the simulation path (crossover, reference
demand) by F.

    term                                   x4        x1.1
    attention FLOP coefficient             CDP +4h   CDP +4h
    linear FLOPs per token                 CDP +7h   CDP +4h
    LM-head FLOPs                          CDP +4h   CDP +4h
    KV bytes/token (GQA)                   CDP +8h   CDP +8h
    KV bytes/token (MLA)                   CDP       CDP
    weight bytes (weight_bytes)            CDP +9h   CDP +8h
    dense weights read per step            CDP +9h   CDP +8h
    routed-expert weight bytes             CDP       CDP
    expert-touch fraction k/E              CDP       CDP
    MFU prefill applied                    CDP +4h   CDP +4h
    MFU decode applied                     CDP +1h   CDP +1h
    MBU applied                            CDP +8h   CDP +8h
    prefill overhead                       CDP +9h   CDP +9h
    decode overhead                        CDP +9h   CDP +9h
    instance memory                        P         P
    q_proj params                          CDP +8h   CDP +8h
    k/v_proj params                        CDP +8h   CDP +8h
    o_proj params                          CDP +8h   CDP +8h
    QKV bias params                        CDP +8h   CDP +8h
    MLA attention params                   CDP       CDP
    MLA q_lora params                      D         D
    dense MLP params                       CDP +8h   CDP +8h
    expert MLP params                      DP        CDP
    shared experts + router params         CDP       CDP
    active experts params                  CDP       CDP
    norm params                            CDP +8h   CDP +8h
    embedding params                       CDP +8h   CDP +8h
    untied LM-head params                  CDP       CDP
    W(B) touched experts (weights_read)    CP        CP
    decode series a1 (FLOP term)           C         C
    decode series s1 (attention growth)    C         C
    decode series a2 (byte term)           CP        CP
    decode series s2 (KV growth)           CP        CP
    decode series overhead                 CP        CP
    prefill_parts attention term           F         F
    prefill_parts LM head                  F         F
    prefill_parts KV bytes                 F         F
    prefill_time weights read              F         F
    recompute_time FLOPs                   F         F
    recompute_time bytes                   F         F
    decode_iteration_time FLOPs            CF        CF
    decode_iteration_time bytes            CFP       CFP
    transfer_time bytes/bandwidth          F         F
    closed-form series sum                 CFP       CFP
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
from reference_roofline import Efficiency, Roofline, Split, reference_demand

DECODE, TRANSFER, PREFILL, TIMEOUT, ARRIVAL = range(5)
SWAPPED = "swapped"  # a TRANSFER event's payload tag: a swapped-out sequence's KV is back
PENDING, COMPLETED, REJECTED = 0, 1, 2
NO_REASON, NO_MEMORY, TIMED_OUT, TOO_LARGE = 0, 1, 2, 3
NAN = math.nan


# policies whose decode-side job computes after the request's resident (replica) hit
RESIDENT_AFTER = ("cost_aware", "conditional_disagg")


@dataclass
class Req:
    rid: int
    arrival: float
    prompt: int
    output: int
    chain: list[tuple[int, int]]  # (block hash, tokens), root first
    answer: list[tuple[int, int]] = field(default_factory=list)  # its output's full blocks
    # results
    t_prefill_start: float = NAN
    t_prefill_end: float = NAN
    t_admit: float = NAN
    t_transfer_start: float = NAN
    t_transfer_end: float = NAN
    t_recompute_start: float = NAN
    t_recompute_end: float = NAN
    t_decode_start: float = NAN
    t_first_token: float = NAN
    t_done: float = NAN
    prefill_instance: int = -1
    decode_instance: int = -1
    outcome: int = PENDING
    reject_reason: int = NO_REASON
    prefill_hit_tokens: int = 0
    replica_hit_tokens: int = 0
    recompute_tokens: int = 0
    transfer_tokens: int = 0
    persisted_tokens: int = 0
    hbm_hit_blocks: int = 0
    host_hit_blocks: int = 0
    link_blocks: int = 0
    host_hit_tokens: int = 0
    l3_hit_blocks: int = 0  # replicate_tiered with an L3 store: chain blocks read from it
    l3_prefill_tokens: int = 0  # and prompt tokens its prefill step read from it
    preemptions: int = 0
    preempt_tokens: int = 0  # re-prefilled (recompute) or swapped out (swap)
    preempt_delay_s: float = 0.0
    resumes: int = 0  # paged: times it got its blocks back (each preemption: one resume)
    solo: bool = False  # paged: once preempted running alone, it resumes without shared blocks
    swapped: bool = False  # paged swap: its context is in host memory (not to be recomputed)
    held: bool = False  # its prompt KV is held on its prefill instance until pulled
    # state
    prefill_done: bool = False
    landed: bool = False
    private: int = 0
    pinned: list[int] = field(default_factory=list)  # replica blocks this request holds a ref on
    held_hit: int = 0  # leading chain blocks it holds as its HBM hit (admission or resume)
    generated: int = 0
    last_token: float = NAN
    max_token_gap: float = 0.0
    done: int = 0  # colocated: prompt tokens prefilled (or cached) so far
    # recompute job: tokens done, the job it waits on and for how many tokens, pending
    rc_total: int = 0
    rc_done: int = 0
    rc_wait: Req | None = None
    rc_shared: int = 0
    rc_pending: bool = False
    stream_deferred: bool = False
    step_window: tuple = (NAN, NAN)  # layer-wise: its prefill step's start and end
    last_chunk_end: float = NAN
    promo_land: float = -math.inf  # replicate_tiered: when its promoted host blocks land
    gaps: list[float] = field(default_factory=list)  # every inter-token gap, in order
    # paged admission
    own0: int = 0  # prompt tokens not in replicas it reuses
    persisted_held: int = 0  # of which in the replicas it persisted (and still references)
    aseq: int = 0  # admission (or resume) order
    preempted_at: float = NAN  # while preempted
    # --- ced: its replay job (replay on decode) is queued or done
    replayed: bool = False
    # conditional_disagg: the decode instance chosen at arrival; prefilled there
    cond_decode: int = -1
    local: bool = False

    def emit(self, t: float) -> None:
        """One output token at ``t``."""
        if self.generated:
            self.max_token_gap = max(self.max_token_gap, t - self.last_token)
            self.gaps.append(t - self.last_token)
        self.last_token = t
        self.generated += 1


@dataclass
class Replica:
    tokens: int
    refs: int
    ready: bool
    idle_since: int = 0  # logical clock of the moment refs dropped to 0 (LRU order)
    backed: bool = False  # tiered, write-through: its host copy is written


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
    "preempt_delay_s",
    "max_token_gap",
)
INT_COLUMNS = (
    "prefill_instance",
    "decode_instance",
    "outcome",
    "reject_reason",
    "prefill_hit_tokens",
    "replica_hit_tokens",
    "recompute_tokens",
    "transfer_tokens",
    "persisted_tokens",
    "hbm_hit_blocks",
    "host_hit_blocks",
    "link_blocks",
    "host_hit_tokens",
    "preemptions",
    "preempt_tokens",
    "l3_hit_blocks",
    "l3_prefill_tokens",
)


@dataclass
class RefConfig:
    """Everything a run needs: two rooflines (physics) and plain configuration data."""

    prefill: Roofline
    decode: Roofline
    policy: str = "transfer_per_request"
    n_prefill: int = 1
    n_decode: int = 1
    link_bytes_per_s: float = 3.125e9
    link_latency_s: float = 0.0
    link_channels: int = 1
    link_topology: str = "shared_nics"
    nics_prefill: int = 1
    nics_decode: int = 1
    streaming: str = "after_prefill"
    layers: int = 1
    recompute_chunk_tokens: int = 1024
    max_batch: int = 64
    prefill_token_budget: int = 8192
    prefill_cache_tokens: int = 10**9
    budget_tokens: int = 10**9
    hot_blocks: list = field(default_factory=list)  # (hash, tokens), hottest first
    on_full: str = "reject"
    wait_timeout_s: float = 2.0
    prefill_router: str = "least_tokens"
    decode_router: str = "least_load"
    kv_overlap_weight: float = 1.0  # kv_aware routers: w in w·(prompt − hit) + load
    # conditional_disagg: local when prompt − decode hit ≤ max_local_prefill_tokens or
    # decode hit > local_prefill_hit_ratio · prompt
    max_local_prefill_tokens: int = 1000
    local_prefill_hit_ratio: float = 0.5
    # replicate_tiered: host pool per decode instance (tokens), host path rate and latency
    host_kv_tokens: int = 0
    host_path_bytes_per_s: float = 63.0e9
    host_path_latency_s: float = 1e-6
    prewarm: str = "free"  # replicate_hotset: free (ready at 0) or link (sent at the start)
    hot_refresh_s: float = 0.0  # replicate_hotset: re-rank and re-warm this often (0: never)
    hot_cap_tokens: int = 0  # the hot set's capacity in tokens
    admission: str = "reserve"
    block_size: int = 16
    preemption: str = "recompute"
    queue_timeout_s: float | None = None
    cache_generated: bool = False  # a finished request's answer blocks become replicas
    host_write_policy: str = "write_back"  # tiered: when an HBM block's host copy is written
    # replicate_tiered: the shared L3 store, capacity (tokens, 0: none) and its queue's rate
    l3_store_tokens: int = 0
    l3_store_bytes_per_s: float = 25.0e9
    # paged swap: host DRAM per decode instance (tokens); swapped-out contexts take what the
    # tiered policies' host pool leaves, and a victim that does not fit is recomputed
    swap_tokens: int = 2**62
    # paged: SGLang's reserved decode tokens: admission needs its own prompt blocks plus N
    # for every admitted, unfinished request there and min(N, output - 1) for itself
    reserved_decode_tokens: int = 0
    # a prefill instance holds each prompt's KV from its step's start until the decode pull
    # lands (or the request is rejected), out of its prefix cache's capacity; a step takes
    # a prompt only while the held KV and it fit (the first always when nothing is held)
    prefill_hold: bool = False
    # cost_aware's fourth option: prefill on the decode instance, priced at arrival
    cost_aware_local: bool = False
    # colocated mode
    instances: int = 1
    scheduler: str = "prefill_priority"
    step_token_budget: int = 8192


DATA_FIELDS = (
    "policy",
    "n_prefill",
    "n_decode",
    "link_bytes_per_s",
    "link_latency_s",
    "link_channels",
    "link_topology",
    "nics_prefill",
    "nics_decode",
    "streaming",
    "layers",
    "recompute_chunk_tokens",
    "max_batch",
    "prefill_token_budget",
    "prefill_cache_tokens",
    "budget_tokens",
    "hot_blocks",
    "on_full",
    "wait_timeout_s",
    "prefill_router",
    "decode_router",
    "kv_overlap_weight",
    "max_local_prefill_tokens",
    "local_prefill_hit_ratio",
    "host_kv_tokens",
    "host_path_bytes_per_s",
    "host_path_latency_s",
    "prewarm",
    "hot_refresh_s",
    "hot_cap_tokens",
    "admission",
    "block_size",
    "preemption",
    "queue_timeout_s",
    "cache_generated",
    "host_write_policy",
    "l3_store_tokens",
    "l3_store_bytes_per_s",
    "swap_tokens",
    "reserved_decode_tokens",
    "prefill_hold",
    "cost_aware_local",
)


def config_from(data, prefill: Roofline, decode: Roofline) -> RefConfig:
    """A RefConfig with the configuration data of ``data`` (any object with the fields
    named in DATA_FIELDS, e.g. the product's run configuration) and the given rooflines."""
    return RefConfig(prefill, decode, **{k: getattr(data, k) for k in DATA_FIELDS})


def roofline(
    model,
    accelerator,
    devices: int,
    efficiency,
    split=None,
    cap_w=None,
    encoder_layers=None,
    replay_on="prefill",  # --- ced
    replay_window=0,
) -> Roofline:
    return Roofline(
        model,
        accelerator,
        devices,
        Efficiency.of(efficiency),
        split,
        cap_w,
        encoder_layers,
        replay_on,
        replay_window,
    )


def group_split(group) -> Split:
    """§2.8 for one scenario instance group: its tp/pp/ep and its fabric's catalog numbers
    (the accelerator's own fabric unless ``fabric`` names one)."""
    from prefixbench.catalog.fabrics import default_fabric, get_fabric

    fab = get_fabric(group.fabric or default_fabric(group.accelerator))
    return Split(
        group.tp,
        group.pp,
        group.ep,
        fab.bandwidth_gbps,
        fab.latency_us,
        fab.allreduce_alpha_us,
        fab.allreduce_gbps,
    )


def decode_roofline(s, model) -> Roofline:
    """The decode pool's roofline: CED replay and speculative draft included (§2.12, §2.13)."""
    from prefixbench import catalog

    c = s.cluster
    d_roof = roofline(
        model,
        catalog.get_accelerator(c.decode.accelerator),
        c.decode.devices,
        s.efficiency,
        group_split(c.decode),
        c.decode.power_cap_w,
    )
    # --- ced: replay on decode: the decode instance replays each prompt's last W tokens
    ced_decode = s.model_format.ced_encoder_layers is not None
    ced_decode = ced_decode and s.model_format.ced_replay_on == "decode"
    d_roof.replay_window = s.model_format.ced_replay_tokens if ced_decode else 0
    if s.model_format.ced_encoder_layers is not None:  # its recomputed prefixes
        d_roof.prompt_pass(model, s.model_format.ced_encoder_layers)
    sp = c.decode.speculative
    if sp is not None:  # §2.13: the draft priced on the decode hardware, by its own shape
        draft = (
            model.model_copy(update={"layers": sp.mtp_layers})
            if sp.method == "mtp"
            else catalog.get_model(sp.draft_model)
        )
        d_acc = catalog.get_accelerator(c.decode.accelerator)
        d_draft = roofline(draft, d_acc, c.decode.devices, s.efficiency, group_split(c.decode))
        d_roof.speculate(d_draft, sp.gamma, sp.acceptance)
    return d_roof


def decode_budget(prep, model, d_roof, n: int, colocated: bool) -> int:
    """§3: the decode KV budget per instance, tokens (memory.kv_budget_gb, a share of HBM,
    or a budget factor of the reference demand)."""
    s = prep.scenario
    c, m = s.cluster, s.memory
    if m.kv_budget_gb is not None:
        budget = int(m.kv_budget_gb * 1e9 / getattr(d_roof, "kv_resident", d_roof.kv))
        return budget * c.decode_instances // n if colocated else budget
    if m.gpu_memory_utilization is not None:
        return utilization_budget(s, model, d_roof)
    return factor_budget(prep, d_roof, n, colocated)


def utilization_budget(s, model, d_roof) -> int:
    """vLLM's --gpu-memory-utilization: that share of the instance's HBM, less the weights
    (the draft's too) and per device a decode step's activations plus fp32 logits."""
    c = s.cluster
    tp = max(c.decode.devices // (c.decode.pp * c.decode.ep), 1) if c.decode.tp is None else c.decode.tp
    weights = d_roof.w_all + (d_roof.spec[0].w_all if getattr(d_roof, "spec", None) else 0.0)
    act = c.chunk_token_budget * (4 * model.hidden_size + 2 * model.intermediate_size / tp)
    reserve = act * model.weight_bytes + c.max_decode_batch * model.vocab_size * 4
    pool = s.memory.gpu_memory_utilization * d_roof.memory - weights - reserve * c.decode.devices
    return int(max(pool, 0.0) / getattr(d_roof, "kv_resident", d_roof.kv))


def factor_budget(prep, d_roof, n: int, colocated: bool) -> int:
    """memory.budget_factor × the reference demand, measured on the scenario's reference
    (the file as written on the run's model: its own requests, rate and hardware), kept in
    GB when the bytes per token differ (docs/model.md, "Memory in GB")."""
    from prefixbench import catalog
    from prefixbench.system.runner import build_requests, same_system

    s = prep.scenario
    rs = s.reference()
    own = same_system(rs, s)
    req = prep.requests if own else build_requests(rs)[0]
    r_roof = d_roof if own else decode_roofline(rs, catalog.get_model(rs.model))
    block = s.cluster.block_size if s.memory.admission == "paged" and not colocated else 1
    max_batch = s.cluster.max_decode_batch if own else rs.cluster.max_decode_batch
    tokens = reference_demand(req, r_roof, n, max_batch, block)
    kv_ref = getattr(r_roof, "kv_resident", r_roof.kv)
    kv = getattr(d_roof, "kv_resident", d_roof.kv)
    if kv_ref == kv:
        return int(s.memory.budget_factor * tokens)
    return int(s.memory.budget_factor * tokens * kv_ref / kv)


def _nic_bytes_per_s(c) -> float:
    """One NIC's (private paths: one channel's) bytes/s: η · line rate, and with shared NICs
    at most the instance ceiling's 1/N share, N the smaller end's NICs (docs/model.md "KV
    transfer cost": the N NICs together reach min(η · N · line rate, ceiling))."""
    link = c.link.spec()
    per = link.efficiency * link.bandwidth_gbps * 1e9
    if c.link.topology != "shared_nics" or link.ceiling_gbps is None:
        return per
    n = min(
        c.link.nics_per_instance or c.prefill.devices, c.link.nics_per_instance or c.decode.devices
    )
    return min(per, link.ceiling_gbps * 1e9 / n)


def scenario_config(prep) -> RefConfig:
    """The reference's configuration of a prepared scenario, physics derived here.

    From the scenario: model and accelerator specs (catalog data), device counts, the
    efficiency block, link, routers, batch and token budgets, memory options. From ``prep``:
    the requests and the hot set only. The decode KV budget, the prefill cache capacity and
    the colocated budget are computed with the reference roofline (docs/model.md §1.4, §3).
    """
    from prefixbench import catalog

    s = prep.scenario
    c, m = s.cluster, s.memory
    model = catalog.get_model(s.model)
    p_roof = roofline(
        model,
        catalog.get_accelerator(c.prefill.accelerator),
        c.prefill.devices,
        s.efficiency,
        group_split(c.prefill),
        c.prefill.power_cap_w,
        s.model_format.ced_encoder_layers,
        s.model_format.ced_replay_on,  # --- ced
        s.model_format.ced_replay_tokens,
    )
    d_roof = decode_roofline(s, model)
    colocated = c.mode == "colocated"
    n = c.prefill_instances + c.decode_instances if colocated else c.decode_instances
    budget = decode_budget(prep, model, d_roof, n, colocated)
    from prefixbench.catalog.hostpaths import HOST_DRAM_GB_PER_DEVICE, get_host_path

    host_gb = c.decode.host_memory_gb or HOST_DRAM_GB_PER_DEVICE * c.decode.devices
    pool_gb = (
        m.host_kv_gb if m.host_kv_gb is not None else min(2 * budget * d_roof.kv / 1e9, host_gb)
    )
    host_path = get_host_path(c.decode.host_path)
    return RefConfig(
        p_roof,
        d_roof,
        host_kv_tokens=int(min(pool_gb * 1e9 / d_roof.kv, 2**31 - 2)),
        host_path_bytes_per_s=host_path.bandwidth_gbps * 1e9 * c.decode.devices,
        host_path_latency_s=host_path.latency_us / 1e6,
        policy=s.policy.value if hasattr(s.policy, "value") else str(s.policy),
        n_prefill=c.prefill_instances,
        n_decode=c.decode_instances,
        link_bytes_per_s=_nic_bytes_per_s(c),
        link_latency_s=(c.link.spec().latency_us + c.link.spec().setup_us) / 1e6,
        link_channels=c.link.channels,
        link_topology=c.link.topology,
        nics_prefill=c.link.nics_per_instance or c.prefill.devices,
        nics_decode=c.link.nics_per_instance or c.decode.devices,
        streaming=c.link.streaming,
        layers=model.layers,
        recompute_chunk_tokens=c.chunk_token_budget,
        max_batch=c.max_decode_batch,
        prefill_token_budget=c.prefill_token_budget,
        prefill_cache_tokens=p_roof.prefix_cache_tokens(c.prefill_cache_fraction),
        budget_tokens=budget,
        hot_blocks=list(prep.base.hot_blocks),
        on_full=m.on_full,
        wait_timeout_s=m.wait_timeout_s,
        prefill_router=c.prefill_router,
        decode_router=c.decode_router,
        kv_overlap_weight=c.kv_overlap_weight,
        max_local_prefill_tokens=c.max_local_prefill_tokens,
        local_prefill_hit_ratio=c.local_prefill_hit_ratio,
        prewarm=c.link.prewarm,
        hot_refresh_s=m.hotset_refresh_s or 0.0,
        hot_cap_tokens=int(min(m.hotset_share * budget, 2**62)),
        admission=m.admission,
        block_size=c.block_size,
        preemption=m.preemption,
        queue_timeout_s=m.queue_timeout_s,
        cache_generated=m.cache_generated,
        host_write_policy=m.host_write_policy,
        l3_store_tokens=int(min(m.l3_store_gb * 1e9 / d_roof.kv, 2**62)),
        l3_store_bytes_per_s=m.l3_store_gbps * 1e9 / 8,
        swap_tokens=int(min(host_gb * 1e9 / d_roof.kv, 2**62)),
        reserved_decode_tokens=m.reserved_decode_tokens,
        prefill_hold=m.prefill_hold,
        cost_aware_local=c.cost_aware_local_prefill,
        instances=n,
        scheduler=c.colocated_scheduler,
        step_token_budget=c.prefill_token_budget
        if c.colocated_scheduler == "prefill_priority"
        else c.chunk_token_budget,
    )


def _chains(req) -> list[Req]:
    ptr = req.blk_ptr.tolist()
    hashes = req.blk_hash.tolist()
    toks = req.blk_tokens.tolist()
    out = []
    for i in range(len(req)):
        chain = [(hashes[j], toks[j]) for j in range(ptr[i], ptr[i + 1])]
        out.append(
            Req(i, float(req.arrival[i]), int(req.prompt_len[i]), int(req.output_len[i]), chain)
        )
    if req.ans_ptr is not None:  # the workload's answer blocks (docs/model.md §1.10.1)
        ap, ah, at = req.ans_ptr.tolist(), req.ans_hash.tolist(), req.ans_tokens.tolist()
        for i, r in enumerate(out):
            r.answer = [(ah[j], at[j]) for j in range(ap[i], ap[i + 1])]
    return out


def _columns(reqs: list[Req]) -> dict[str, np.ndarray]:
    out = {k: np.array([getattr(r, k) for r in reqs], dtype=np.float64) for k in TIME_COLUMNS}
    out.update({k: np.array([getattr(r, k) for r in reqs], dtype=np.int64) for k in INT_COLUMNS})
    return out


class PrefillInstance:
    def __init__(self, capacity: int) -> None:
        self.queue: list[Req] = []
        self.batch: list[Req] | None = None
        self.capacity = capacity
        self.cache: dict[int, list[int]] = {}  # hash -> [tokens, last use]
        self.held = 0  # prompt tokens held for pulls in flight (prefill_hold)
        self.kick = False  # a release may let a stalled step start (after the event)

    @property
    def room(self) -> int:
        """The cache's capacity less the held KV."""
        return max(self.capacity - self.held, 0)

    def evict(self) -> None:
        while sum(v[0] for v in self.cache.values()) > self.room:
            oldest = min(self.cache, key=lambda h: self.cache[h][1])
            del self.cache[oldest]


class DecodeInstance:
    def __init__(self) -> None:
        self.running: list[Req] = []
        self.ready: list[Req] = []  # ready to join, in the order they became ready
        self.recompute: list[Req] = []
        self.waiting: list[Req] = []
        self.replicas: dict[int, Replica] = {}
        self.host: dict[int, list[int]] = {}  # replicate_tiered: hash -> [tokens, last use]
        self.host_free = 0.0  # when the host path is next free
        self.state = "idle"  # idle | wake (boundary scheduled now) | iter | stall
        self.stall_end = NAN
        self.uses: dict[int, list[float]] = {}  # cost_aware: hash -> [decayed count, last t]
        self.first_admit = NAN
        self.admitted_tokens = 0
        self.resume: list[Req] = []  # paged: preempted sequences, next to resume first
        self.reprefill: list[Req] = []  # paged: resumed sequences whose re-prefill is due
        self.swap_used = 0  # paged swap: tokens of swapped-out contexts in host memory
        self.admitted = 0  # admitted, unfinished requests (the reserved-decode-tokens gate)


class ReferenceSim:
    def __init__(self, req, cfg) -> None:
        self.cfg = cfg
        self.reqs = _chains(req)
        self.pf = [PrefillInstance(cfg.prefill_cache_tokens) for _ in range(cfg.n_prefill)]
        self.dc = [DecodeInstance() for _ in range(cfg.n_decode)]
        self.swap_fallbacks = 0  # paged swap: victims recomputed for want of host memory
        self.reserve_waits = 0  # admissions the reserved decode tokens alone turned away
        self.channels = {
            (p, d): [0.0] * cfg.link_channels
            for p in range(cfg.n_prefill)
            for d in range(cfg.n_decode)
        }
        # shared NICs: when each prefill instance's egress group and each decode
        # instance's ingress group is next free
        self.egress_free = [0.0] * cfg.n_prefill
        self.ingress_free = [0.0] * cfg.n_decode
        self.deferring = False  # layer-wise: a step's hand-offs defer their chunks
        self.rr_prefill = 0
        self.rr_decode = 0
        self.clock = 0  # logical clock for LRU stamps
        self.host_decisions: list[bool] = []  # replicate_tiered: promoted (True) or sent
        self.l3: dict[int, list[int]] = {}  # the shared L3 store: hash -> [tokens, last use]
        self.l3_free = 0.0  # when its queue is next free
        self.aseq = 0  # paged: admission (and resume) counter
        self.events: list = []
        self.seq = 0
        self.hot = [h for h, _ in cfg.hot_blocks]
        if cfg.policy == "replicate_hotset":
            for dec in self.dc:
                # hottest first in the list; the least hot is the least recently used
                for h, t in reversed(cfg.hot_blocks):
                    if h not in dec.replicas:
                        dec.replicas[h] = Replica(t, 0, True, self.tick())
        self.peak_used = max((self.used(d) for d in range(cfg.n_decode)), default=0)  # KV tokens
        if cfg.policy == "replicate_hotset" and cfg.prewarm == "link" and self.reqs:
            self.send_hot_sets(self.reqs[0].arrival)
        self.refreshing = (
            cfg.policy == "replicate_hotset" and cfg.hot_blocks and cfg.hot_refresh_s > 0
        )
        self.uses: dict[int, int] = {}  # block uses since the last refresh
        self.block_tokens: dict[int, int] = {}
        if self.refreshing and self.reqs:
            self.schedule(self.reqs[0].arrival + cfg.hot_refresh_s, TIMEOUT, ("refresh",))

    def on_refresh(self, t: float) -> None:
        cfg = self.cfg
        ranked = sorted((-c, h) for h, c in self.uses.items() if c > 0)
        new, total = [], 0
        for _, h in ranked:
            if total + self.block_tokens[h] > cfg.hot_cap_tokens:
                break
            total += self.block_tokens[h]
            new.append(h)
        self.uses = {}
        self.hot = new
        link = cfg.prewarm == "link"
        for d, dec in enumerate(self.dc):
            added = 0
            for h in new:
                if h in dec.replicas:
                    continue
                tok = self.block_tokens[h]
                free = cfg.budget_tokens - self.used(d)
                idle = sum(rep.tokens for rep in dec.replicas.values() if rep.refs == 0)
                if free < tok and free + idle < tok:
                    break
                while free < tok:
                    cands = [k for k, rep in dec.replicas.items() if rep.refs == 0]
                    victim = min(cands, key=lambda k: dec.replicas[k].idle_since)
                    free += dec.replicas.pop(victim).tokens
                dec.replicas[h] = Replica(tok, 0, not link, self.tick())
                added += tok
            if added:
                self.peak_used = max(self.peak_used, self.used(d))
                if link:
                    self.send_to(d, t, added * cfg.decode.kv)
        live = any(r.prefill_instance != -1 and r.outcome == PENDING for r in self.reqs)
        if live or self.reqs[-1].arrival > t:
            self.schedule(t + cfg.hot_refresh_s, TIMEOUT, ("refresh",))

    def send_to(self, d: int, t0: float, nbytes: float) -> None:
        """Warm-up bytes from prefill instance d mod P to decode instance d, queued FCFS."""
        cfg = self.cfg
        p = d % cfg.n_prefill
        if cfg.link_topology == "shared_nics":
            start = max(t0, self.egress_free[p], self.ingress_free[d])
            busy = nbytes / (min(cfg.nics_prefill, cfg.nics_decode) * cfg.link_bytes_per_s)
            self.egress_free[p] = self.ingress_free[d] = start + busy
        else:
            chans = self.channels[(p, d)]
            c = chans.index(min(chans))
            start = max(t0, chans[c])
            busy = nbytes / cfg.link_bytes_per_s
            chans[c] = start + busy
        self.schedule(start + busy + cfg.link_latency_s, TRANSFER, ("prewarm", d))

    def send_hot_sets(self, t0: float) -> None:
        cfg = self.cfg
        for d, dec in enumerate(self.dc):
            if not dec.replicas:
                continue
            for rep in dec.replicas.values():
                rep.ready = False
            self.send_to(d, t0, sum(rep.tokens for rep in dec.replicas.values()) * cfg.decode.kv)

    def on_prewarm_landed(self, d: int) -> None:
        for rep in self.dc[d].replicas.values():
            if rep.refs == 0 and not rep.ready:
                rep.ready = True

    # ------------------------------------------------------------------ helpers

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def schedule(self, t: float, kind: int, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, payload))

    def uses_replicas(self) -> bool:
        return self.cfg.policy in (
            "replicate_hotset",
            "replicate_all_lru",
            "replicate_tiered",
            "cost_aware",
            "conditional_disagg",
        )

    def keeps(self, h: int, dec: DecodeInstance) -> bool:
        if self.cfg.policy in (
            "replicate_all_lru",
            "replicate_tiered",
            "conditional_disagg",
            "cost_aware",  # keeping costs no memory admission could use
        ):
            return True
        if self.cfg.policy == "replicate_hotset":
            return h in self.hot
        return False

    def used(self, d: int) -> int:
        """KV tokens in use on decode instance ``d``: admitted requests' own KV plus replicas."""
        private = sum(r.private for r in self.reqs if r.decode_instance == d)
        return private + sum(rep.tokens for rep in self.dc[d].replicas.values())

    # ------------------------------------------------------------------ run

    def run(self) -> dict[str, np.ndarray]:
        for r in self.reqs:
            self.schedule(r.arrival, ARRIVAL, r)
        while self.events:
            t, kind, _, payload = heapq.heappop(self.events)
            if kind == ARRIVAL:
                self.on_arrival(payload, t)
            elif kind == PREFILL:
                self.on_prefill_end(payload, t)
            elif kind == TRANSFER and isinstance(payload, tuple):
                if payload[0] == SWAPPED:
                    self.on_swapped_in(payload[1], t)
                else:
                    self.on_prewarm_landed(payload[1])
            elif kind == TRANSFER:
                self.on_landed(payload, t)
            elif kind == TIMEOUT and isinstance(payload, tuple):
                self.on_refresh(t)
            elif kind == TIMEOUT:
                self.on_timeout(payload, t)
            else:
                self.on_boundary(payload, t)
            for p, inst in enumerate(self.pf):  # a pull's release restarts a stalled step
                if inst.kick:
                    inst.kick = False
                    if inst.batch is None and inst.queue:
                        self.start_prefill(p, t)
        assert all(r.outcome != PENDING for r in self.reqs), "a request never ended"
        for d in range(self.cfg.n_decode):
            self.check_books(d)
            assert not self.dc[d].replicas or all(
                rep.refs == 0 for rep in self.dc[d].replicas.values()
            )
        return self.columns()

    # ------------------------------------------------------------------ prefill

    def on_arrival(self, r: Req, t: float) -> None:
        cfg = self.cfg
        if cfg.policy == "conditional_disagg":
            # Dynamo: the decode worker is chosen first and decides where the prefill runs
            r.cond_decode = d = self.route_decode(r)
            hit = self.ready_run_tokens(r, d)
            if (
                r.prompt - hit <= cfg.max_local_prefill_tokens
                or hit > cfg.local_prefill_hit_ratio * r.prompt
            ):
                self.prefill_locally(r, d, t)
                return
        if cfg.policy == "cost_aware" and cfg.cost_aware_local:
            d = self.cost_aware_local(r, t)
            if d is not None:  # prefilled on its decode instance, as conditional_disagg's
                self.prefill_locally(r, d, t)
                return
        if cfg.prefill_router == "round_robin":
            p = self.rr_prefill % cfg.n_prefill
            self.rr_prefill += 1
        elif cfg.prefill_router == "kv_aware":
            costs = []
            for i in range(cfg.n_prefill):
                queued = sum(
                    x.prompt for x in self.reqs if x.prefill_instance == i and not x.prefill_done
                )
                new = r.prompt - self.cache_hit(self.pf[i], r)
                costs.append(cfg.kv_overlap_weight * new + queued)
            p = costs.index(min(costs))
        else:
            loads = [
                sum(x.prompt for x in self.reqs if x.prefill_instance == i and not x.prefill_done)
                for i in range(cfg.n_prefill)
            ]
            p = loads.index(min(loads))
        r.prefill_instance = p
        inst = self.pf[p]
        inst.queue.append(r)
        if inst.batch is None:
            self.start_prefill(p, t)

    def ready_run_tokens(self, r: Req, d: int) -> int:
        """Tokens of ``r``'s leading blocks resident and ready on decode ``d``."""
        hit = 0
        for h, tok in r.chain:
            rep = self.dc[d].replicas.get(h)
            if rep is None or not rep.ready:
                break
            hit += tok
        return hit

    def cache_hit(self, inst: PrefillInstance, r: Req) -> int:
        hit = 0
        for h, tok in r.chain:
            if h not in inst.cache:
                break
            hit += tok
        return min(hit, r.prompt - 1) if r.chain else 0

    def start_prefill(self, p: int, t: float) -> None:
        inst = self.pf[p]
        batch: list[Req] = []
        total_new = 0
        ready = t  # the step computes once its L3 reads have landed
        while inst.queue:
            r = inst.queue[0]
            hit = self.cache_hit(inst, r)
            run = self.l3_prefill_run(r, hit)
            x3 = min(sum(tok for _, tok in run), r.prompt - 1 - hit)
            new = r.prompt - hit - x3
            if batch and total_new + new > self.cfg.prefill_token_budget:
                break
            if self.cfg.prefill_hold:  # back-pressure: the held KV and this prompt must fit
                if (batch or inst.held) and inst.held + r.prompt > inst.capacity:
                    break
                inst.held += r.prompt
                r.held = True
            inst.queue.pop(0)
            batch.append(r)
            total_new += new
            r.prefill_hit_tokens = hit
            r.l3_prefill_tokens = x3
            r.t_prefill_start = t
            if x3 > 0:
                cum = 0
                for h, tok in run:  # each block read refreshes it, root first
                    if cum >= x3:
                        break
                    self.l3[h][1] = self.tick()
                    cum += tok
                ready = max(ready, self.l3_move(t, x3 * self.cfg.prefill.kv))
        if not batch:  # stalled: a pull's landing restarts it
            return
        inst.evict()  # the held KV pushes cached blocks out
        step = self.cfg.prefill.prefill_step(
            [
                (r.prompt - r.prefill_hit_tokens - r.l3_prefill_tokens,
                 r.prefill_hit_tokens + r.l3_prefill_tokens)
                for r in batch
            ]
        )  # fmt: skip
        inst.batch = batch
        self.schedule(ready + step, PREFILL, p)
        if self.cfg.streaming == "layerwise":
            for r in batch:
                r.step_window = (t, t + step)
            self.deferring = True
            for r in batch:
                d = self.decode_for(r)
                r.decode_instance = d
                self.hand_off(r, d, t)
            self.deferring = False
            self.stream_step(batch, t, t + step)

    def on_prefill_end(self, p: int, t: float) -> None:
        inst = self.pf[p]
        batch, inst.batch = inst.batch, None
        for r in batch:
            r.t_prefill_end = t
            r.prefill_done = True
            for h, tok in reversed(r.chain):  # tail first: the root ends up freshest
                if h in inst.cache:
                    inst.cache[h][1] = self.tick()
                elif tok <= inst.room:
                    inst.cache[h] = [tok, self.tick()]
            inst.evict()
        if self.cfg.streaming != "layerwise":
            for r in batch:
                d = self.decode_for(r)
                r.decode_instance = d
                self.hand_off(r, d, t)
        if inst.queue:
            self.start_prefill(p, t)

    def decode_for(self, r: Req) -> int:
        """conditional_disagg keeps the decode instance chosen at arrival."""
        if self.cfg.policy == "conditional_disagg":
            return r.cond_decode
        return self.route_decode(r)

    def prefill_locally(self, r: Req, d: int, t: float) -> None:
        """``r`` prefills on decode instance ``d`` at ``t``: no prefill node, no link."""
        r.local = True
        r.prefill_instance = -1
        r.prefill_done = True
        r.t_prefill_start = r.t_prefill_end = t
        r.decode_instance = d
        self.hand_off(r, d, t)

    def pending_loads(self) -> list[int]:
        """Requests handed to each decode instance that have not ended yet."""
        return [
            sum(1 for x in self.reqs if x.decode_instance == i and x.outcome == PENDING)
            for i in range(self.cfg.n_decode)
        ]

    def affinity_pick(self, r: Req, loads: list[int]) -> int:
        """The decode instance holding the longest ready run of ``r``'s blocks (ties:
        fewest requests, lowest index)."""
        ranked = []
        for i in range(self.cfg.n_decode):
            ready = 0
            for h, _ in r.chain:
                rep = self.dc[i].replicas.get(h)
                if rep is None or not rep.ready:
                    break
                ready += 1
            ranked.append((-ready, loads[i], i))
        return min(ranked)[2]

    def route_decode(self, r: Req) -> int:
        cfg = self.cfg
        if cfg.decode_router == "round_robin":
            d = self.rr_decode % cfg.n_decode
            self.rr_decode += 1
            return d
        loads = self.pending_loads()
        if cfg.decode_router == "prefix_affinity":
            return self.affinity_pick(r, loads)
        if cfg.decode_router == "kv_aware":
            costs = []
            for i in range(cfg.n_decode):
                active = sum(  # prompt + output of the admitted, unfinished requests there
                    x.prompt + x.output
                    for x in self.reqs
                    if x.decode_instance == i and x.outcome == PENDING and not math.isnan(x.t_admit)
                )
                new = r.prompt - self.ready_run_tokens(r, i)
                costs.append(cfg.kv_overlap_weight * new + active)
            return costs.index(min(costs))
        assert cfg.decode_router == "least_load", cfg.decode_router
        return loads.index(min(loads))

    # ------------------------------------------------------------------ admission

    def hand_off(self, r: Req, d: int, t: float) -> None:
        dec = self.dc[d]
        queues = self.cfg.on_full == "wait" or self.paged
        if queues and (dec.waiting or dec.resume):  # only live waiters stay in the lists
            self.wait(r, d, t)
            return
        if not self.try_admit(r, d, t):
            if queues:
                self.wait(r, d, t)
            else:
                self.reject(r, t, NO_MEMORY)

    def wait(self, r: Req, d: int, t: float) -> None:
        self.dc[d].waiting.append(r)
        timeout = self.cfg.wait_timeout_s
        if self.paged:
            if self.cfg.queue_timeout_s is None:
                return  # wait for ever
            timeout = self.cfg.queue_timeout_s
        self.schedule(t + timeout, TIMEOUT, r)

    def on_timeout(self, r: Req, t: float) -> None:
        if r.outcome == PENDING and math.isnan(r.t_admit):
            self.dc[r.decode_instance].waiting.remove(r)
            self.reject(r, t, TIMED_OUT)

    def reject(self, r: Req, t: float, reason: int) -> None:
        r.outcome = REJECTED
        r.reject_reason = reason
        r.t_done = t
        self.release_hold(r)

    def release_hold(self, r: Req) -> None:
        """Its pull is complete (or it was rejected): the prefill instance frees its KV."""
        if r.held:
            r.held = False
            inst = self.pf[r.prefill_instance]
            inst.held -= r.prompt
            inst.kick = True

    def try_admit(self, r: Req, d: int, t: float) -> bool:
        """Admit ``r`` on decode instance ``d`` (or reject it too_large); False if no room."""
        cfg, dec = self.cfg, self.dc[d]
        hit_blocks: list[int] = []
        if self.uses_replicas():
            for h, _ in r.chain:
                rep = dec.replicas.get(h)
                if rep is None or not rep.ready:
                    break
                hit_blocks.append(h)
        host_run: list[int] = []  # replicate_tiered: host blocks continuing the HBM run
        tier = cfg.policy in ("replicate_tiered", "cost_aware")  # a host tier under HBM
        if tier:
            for h, _ in r.chain[len(hit_blocks) :]:
                if h not in dec.host:
                    break
                host_run.append(h)
        hit = sum(tok for _, tok in r.chain[: len(hit_blocks)])
        need = r.prompt + r.output - hit
        if self.paged:
            # the prompt's own blocks now; too large when even alone it could not finish
            # (its last iteration holds own prompt + output - 1 tokens, plus its hit)
            # (or, its hit evicted while it is preempted, in private blocks)
            whole = self.blocks(r.prompt + r.output - 1)
            if hit + self.blocks(need - 1) > cfg.budget_tokens or whole > cfg.budget_tokens:
                self.reject(r, t, TOO_LARGE)
                return True
            need = self.blocks(r.prompt - hit)
        if need > cfg.budget_tokens:
            self.reject(r, t, TOO_LARGE)
            return True
        free = cfg.budget_tokens - self.used(d)
        trimmable = sum(
            rep.tokens for h, rep in dec.replicas.items() if rep.refs == 0 and h not in hit_blocks
        )
        room = need  # paged: plus the reserved decode tokens of everyone admitted, and its own
        if self.paged and cfg.reserved_decode_tokens:
            n_res = cfg.reserved_decode_tokens
            room = self.blocks(r.prompt - hit + min(n_res, r.output - 1)) + n_res * dec.admitted
        if free < room and free + trimmable < room:
            self.reserve_waits += free + trimmable >= need
            return False
        dec.admitted += 1
        # every chain block past the HBM run goes to HBM now (promoted or sent): out of the
        # host pool, before the trim below demotes into it
        host_tok = sum(dec.host[h][0] for h in host_run)
        for h, _ in r.chain[len(hit_blocks) :]:
            dec.host.pop(h, None)
        for h in hit_blocks:
            dec.replicas[h].refs += 1
        if tier and cfg.host_write_policy == "write_through_selective":
            for h in hit_blocks:  # a block's first reuse writes its host copy
                self.write_through(dec, h, t)
        path_before = dec.host_free
        while free < need:
            idle = [h for h, rep in dec.replicas.items() if rep.refs == 0]
            victim = min(idle, key=lambda h: dec.replicas[h].idle_since)
            rep = dec.replicas.pop(victim)
            free += rep.tokens
            if tier:
                self.demote(dec, victim, rep.tokens, t, not rep.backed)
        # write-back: the HBM the trim freed takes this KV once the demotions are copied
        gate = dec.host_free + cfg.host_path_latency_s if dec.host_free != path_before else None
        if tier:  # a chain block past a gap, trimmed and
            for h, _ in r.chain[len(hit_blocks) :]:  # demoted, goes back to HBM now
                dec.host.pop(h, None)
        l3_run: list[int] = []  # the L3 store continues the HBM and host runs (after the trim)
        if self.l3_on:
            for h, _ in r.chain[len(hit_blocks) + len(host_run) :]:
                if h not in self.l3:
                    break
                l3_run.append(h)
        l3_tok = sum(tok for _, tok in r.chain[len(hit_blocks) + len(host_run) :][: len(l3_run)])
        persisted = 0
        pinned = list(hit_blocks)
        if self.refreshing:
            for h, tok in r.chain:
                self.uses[h] = self.uses.get(h, 0) + 1
                self.block_tokens[h] = tok
        for h, tok in r.chain[len(hit_blocks) :]:
            if h not in dec.replicas and self.keeps(h, dec):
                dec.replicas[h] = Replica(tok, 1, False)
                pinned.append(h)
                persisted += tok
        r.pinned = pinned
        r.held_hit = len(hit_blocks)
        r.private = need - persisted
        r.replica_hit_tokens = hit
        r.persisted_tokens = persisted
        r.t_admit = t
        r.own0 = r.prompt - hit
        r.persisted_held = persisted
        r.aseq = self.next_aseq()
        self.peak_used = max(self.peak_used, self.used(d))
        self.check_books(d)

        if cfg.policy == "transfer_per_request":
            xfer, rc = r.prompt, 0
        elif cfg.policy == "recompute_on_decode":
            xfer, rc = r.prompt - r.prefill_hit_tokens, r.prefill_hit_tokens
        elif cfg.policy == "cost_aware" and not r.local:
            xfer, rc, promote = self.cost_aware_choice(r, d, t, hit, host_tok if host_run else 0)
        elif r.local:  # conditional_disagg's local prefill: the uncached prompt, as chunks
            xfer, rc = 0, r.prompt - hit
        else:
            xfer, rc = r.prompt - hit, 0
        xfer -= l3_tok  # the L3 run is read from the store, never sent
        promo_land = None
        if host_run and cfg.policy == "cost_aware":
            if not r.local and promote:
                promo_land = self.host_move(dec, t, host_tok * cfg.decode.kv)
                r.promo_land = promo_land
                r.host_hit_blocks, r.host_hit_tokens = len(host_run), host_tok
        elif host_run:
            rest_tok = xfer - host_tok
            kv = cfg.decode.kv
            promo = (
                max(t, dec.host_free)
                + host_tok * kv / cfg.host_path_bytes_per_s
                + cfg.host_path_latency_s
            )
            start, rate = self.link_start(r, d, t)
            rest = start + rest_tok * kv / rate + cfg.link_latency_s if rest_tok > 0 else t
            everything = start + (rest_tok + host_tok) * kv / rate + cfg.link_latency_s
            promote = max(promo, rest) <= everything
            self.host_decisions.append(promote)
            if promote:
                xfer = rest_tok
                promo_land = self.host_move(dec, t, host_tok * kv)
                r.promo_land = promo_land
                r.host_hit_blocks, r.host_hit_tokens = len(host_run), host_tok
        if l3_run:
            for h in l3_run:  # each read refreshes it, root first
                self.l3[h][1] = self.tick()
            land3 = self.l3_move(t, sum(self.l3[h][0] for h in l3_run) * cfg.decode.kv)
            r.l3_hit_blocks = len(l3_run)
            if promo_land is None or land3 > promo_land:
                promo_land = land3
                r.promo_land = land3
        if gate is not None and (promo_land is None or gate > promo_land):
            promo_land = gate
            r.promo_land = gate
        if self.uses_replicas():
            r.hbm_hit_blocks = len(hit_blocks)
            r.link_blocks = len(r.chain) - len(hit_blocks) - r.host_hit_blocks - r.l3_hit_blocks
            if r.local:
                r.link_blocks = 0
        elif cfg.policy == "recompute_on_decode":
            inside, cum = 0, 0
            for _, tok in r.chain:
                cum += tok
                if cum > r.prefill_hit_tokens:
                    break
                inside += 1
            r.link_blocks = len(r.chain) - inside
        else:
            r.link_blocks = len(r.chain)
        r.transfer_tokens, r.recompute_tokens = xfer, rc
        nbytes = xfer * cfg.decode.kv
        land = t
        if nbytes > 0 and cfg.streaming == "layerwise":
            if self.deferring:
                r.stream_deferred = True
            else:
                self.stream_alone(r, t)
            if rc > 0:
                self.queue_job(dec, r, rc, hit if cfg.policy in RESIDENT_AFTER else 0)
                self.wake(d, t)
            return True
        if nbytes > 0 and cfg.link_topology == "shared_nics":
            # FCFS on both ends: the write starts when the sender's egress NICs and the
            # receiver's ingress NICs are both free and holds both; the KV is sharded by
            # head over the smaller group's NICs, each moving its share in parallel
            p = r.prefill_instance
            start = max(t, self.egress_free[p], self.ingress_free[d])
            busy = nbytes / (min(cfg.nics_prefill, cfg.nics_decode) * cfg.link_bytes_per_s)
            self.egress_free[p] = self.ingress_free[d] = start + busy
            r.t_transfer_start = start
            land = start + busy + cfg.link_latency_s
        elif nbytes > 0:
            chans = self.channels[(r.prefill_instance, d)]
            c = chans.index(min(chans))
            start = max(t, chans[c])
            busy = nbytes / cfg.link_bytes_per_s
            chans[c] = start + busy
            r.t_transfer_start = start
            land = start + busy + cfg.link_latency_s
        else:
            r.t_transfer_start = t
        if promo_land is not None:  # the promoted blocks land too
            land = max(land, promo_land)
        self.schedule(land, TRANSFER, r)
        if rc > 0:
            self.queue_job(dec, r, rc, hit if cfg.policy in RESIDENT_AFTER else 0)
            self.wake(d, t)
        return True

    # ------------------------------------------------------------------ streaming

    def split(self, r: Req) -> tuple[int, int]:
        """(cached, computed) tokens of the moved KV: the last transfer_tokens of the prompt,
        whose last prompt - prefill_hit the step computes."""
        new = min(r.transfer_tokens, r.prompt - r.prefill_hit_tokens)
        return r.transfer_tokens - new, new

    def chunk(self, r: Req, ready: float, seconds: float) -> None:
        p, d = r.prefill_instance, r.decode_instance
        start = max(ready, self.egress_free[p], self.ingress_free[d])
        self.egress_free[p] = self.ingress_free[d] = start + seconds
        if math.isnan(r.t_transfer_start):
            r.t_transfer_start = start
        r.last_chunk_end = start + seconds

    def rate(self) -> float:
        return min(self.cfg.nics_prefill, self.cfg.nics_decode) * self.cfg.link_bytes_per_s

    def layer_ready(self, window: tuple[float, float], layer: int) -> float:
        ts, te = window
        return ts + (layer + 1) * (te - ts) / self.cfg.layers

    def stream_step(self, batch: list[Req], ts: float, te: float) -> None:
        mine = [r for r in batch if r.stream_deferred]
        kv, rate = self.cfg.decode.kv, self.rate()
        for r in mine:
            cached, _ = self.split(r)
            if cached:
                self.chunk(r, ts, cached * kv / rate)
        for layer in range(self.cfg.layers):
            ready = self.layer_ready((ts, te), layer)
            for r in mine:
                self.chunk(r, ready, self.split(r)[1] * kv / rate / self.cfg.layers)
        for r in mine:
            r.stream_deferred = False
            self.schedule(
                max(r.last_chunk_end + self.cfg.link_latency_s, r.promo_land), TRANSFER, r
            )

    def stream_alone(self, r: Req, t: float) -> None:
        kv, rate = self.cfg.decode.kv, self.rate()
        cached, new = self.split(r)
        if cached:
            self.chunk(r, t, cached * kv / rate)
        for layer in range(self.cfg.layers):
            ready = max(t, self.layer_ready(r.step_window, layer))
            self.chunk(r, ready, new * kv / rate / self.cfg.layers)
        self.schedule(max(r.last_chunk_end + self.cfg.link_latency_s, r.promo_land), TRANSFER, r)

    # ------------------------------------------------------------------ recompute jobs

    def queue_job(self, dec: DecodeInstance, r: Req, m: int, h: int = 0) -> None:
        """A job rebuilding prefix tokens [h, h + m) (h resident: cost_aware)."""
        m += h
        best, best_s = None, 0
        for a in dec.recompute:
            if a.replayed:  # --- ced: a replay window is its prompt's own
                continue
            s = 0
            for (h1, tok), (h2, _) in zip(r.chain, a.chain, strict=False):
                if h1 != h2 or s >= min(m, a.rc_total):
                    break
                s += tok
            s = min(s, m, a.rc_total)
            if s > best_s:
                best, best_s = a, s
        if best_s <= h:
            best, best_s = None, 0
        r.rc_total, r.rc_done, r.rc_wait, r.rc_shared = m, h, best, best_s
        r.rc_pending = True
        r.recompute_tokens = m - max(best_s, h)
        dec.recompute.append(r)

    def job_done(self, dec: DecodeInstance, r: Req, t_end: float) -> None:
        r.t_recompute_end = t_end
        r.rc_pending = False
        dec.recompute.remove(r)
        if r.landed:
            for h in r.pinned:  # cost_aware keeps what it rebuilt
                dec.replicas[h].ready = True
            self.ready_or_replay(dec, r)  # --- ced

    def resolve_waits(self, dec: DecodeInstance, t: float) -> None:
        for r in list(dec.recompute):
            if r.rc_wait is not None and r.rc_wait.rc_done >= r.rc_shared:
                r.rc_done, r.rc_wait = r.rc_shared, None
                if math.isnan(r.t_recompute_start):
                    r.t_recompute_start = t
                if r.rc_done == r.rc_total:
                    self.job_done(dec, r, t)

    def mixed_recompute(self, d: int, t: float) -> None:
        cfg, dec = self.cfg, self.dc[d]
        room = cfg.decode.chunk_room(len(dec.running), cfg.recompute_chunk_tokens)  # --- spec
        chunks = {}
        for r in dec.recompute:
            if r.rc_wait is None and room > 0:
                n = min(room, r.rc_total - r.rc_done)
                chunks[r.rid] = n
                room -= n
        ctx = sum(r.prompt + r.generated for r in dec.running)
        step = cfg.decode.mixed_step(
            len(dec.running),
            ctx,
            [  # a recomputed prefix (not a CED replay) is a prompt pass (§2.12)
                (chunks[r.rid], r.rc_done, False, not r.replayed)
                for r in dec.recompute
                if r.rid in chunks
            ],
        )
        end = t + step
        for r in list(dec.recompute):
            moved = chunks.get(r.rid, 0) > 0
            r.rc_done += chunks.get(r.rid, 0)
            if r.rc_wait is not None and r.rc_wait.rc_done >= r.rc_shared:
                r.rc_done, r.rc_wait = r.rc_shared, None
                moved = True
            if moved and math.isnan(r.t_recompute_start):
                r.t_recompute_start = t
            if r.rc_done == r.rc_total:
                self.job_done(dec, r, end)
        dec.state = "mixed"
        self.schedule(end, DECODE, d)

    # ------------------------------------------------------------------ host tier

    def link_start(self, r: Req, d: int, t: float) -> tuple[float, float]:
        """(When a transfer issued now would start, the rate it would move at), nothing
        reserved."""
        cfg = self.cfg
        if cfg.link_topology == "shared_nics":
            p = r.prefill_instance
            rate = min(cfg.nics_prefill, cfg.nics_decode) * cfg.link_bytes_per_s
            return max(t, self.egress_free[p], self.ingress_free[d]), rate
        return max(t, min(self.channels[(r.prefill_instance, d)])), cfg.link_bytes_per_s

    def host_move(self, dec: DecodeInstance, t: float, nbytes: float) -> float:
        """FCFS on the instance's host path; returns when the bytes land."""
        start = max(t, dec.host_free)
        dec.host_free = start + nbytes / self.cfg.host_path_bytes_per_s
        return dec.host_free + self.cfg.host_path_latency_s

    def demote(self, dec: DecodeInstance, h: int, tok: int, t: float, copy: bool) -> None:
        """A trimmed HBM block goes to the host pool (freshest); LRU host blocks make room.
        Its copy takes the host path unless it was written through before."""
        cap = self.cfg.host_kv_tokens
        if tok > cap:
            return
        dec.host[h] = [tok, self.tick()]
        while sum(v[0] for v in dec.host.values()) > cap:
            del dec.host[min(dec.host, key=lambda k: dec.host[k][1])]
        if copy:
            self.host_move(dec, t, tok * self.cfg.decode.kv)

    # ------------------------------------------------------------------ the L3 store

    @property
    def l3_on(self) -> bool:
        return self.cfg.policy == "replicate_tiered" and self.cfg.l3_store_tokens > 0

    def l3_move(self, t: float, nbytes: float) -> float:
        """FCFS on the store's one queue; lands the link's latency after the move."""
        start = max(t, self.l3_free)
        self.l3_free = start + nbytes / self.cfg.l3_store_bytes_per_s
        return self.l3_free + self.cfg.link_latency_s

    def l3_prefill_run(self, r: Req, hit: int) -> list[tuple[int, int]]:
        """The store's leading run from the first chain block past the prefill cache's
        ``hit`` (none without a store, or with layer-wise streaming)."""
        if not self.l3_on or self.cfg.streaming == "layerwise":
            return []
        j, cum = 0, 0
        while j < len(r.chain) and cum + r.chain[j][1] <= hit:
            cum += r.chain[j][1]
            j += 1
        run = []
        for h, tok in r.chain[j:]:
            if h not in self.l3:
                break
            run.append((h, tok))
        return run

    def l3_put(self, h: int, tok: int, t: float) -> None:
        """The decode node writes block ``h``: a stored block is refreshed; a new one is
        the freshest (LRU ones dropped over capacity) and its copy takes the store's queue."""
        if not self.l3_on:
            return
        if h in self.l3:
            self.l3[h][1] = self.tick()
            return
        cap = self.cfg.l3_store_tokens
        if tok > cap:
            return
        self.l3[h] = [tok, self.tick()]
        while sum(v[0] for v in self.l3.values()) > cap:
            del self.l3[min(self.l3, key=lambda k: self.l3[k][1])]
        self.l3_move(t, tok * self.cfg.decode.kv)

    def write_through(self, dec: DecodeInstance, h: int, t: float) -> None:
        """An HBM block's host copy, written once (write_through, _selective)."""
        rep = dec.replicas[h]
        if not rep.backed:
            rep.backed = True
            self.host_move(dec, t, rep.tokens * self.cfg.decode.kv)

    def land_time(self, r: Req, d: int, t: float, tokens: int) -> float:
        """When ``tokens`` of KV sent now would land (the queues as they are, nothing sent)."""
        cfg = self.cfg
        nbytes = tokens * cfg.decode.kv
        if nbytes <= 0:
            return t
        if cfg.link_topology == "shared_nics":
            start = max(t, self.egress_free[r.prefill_instance], self.ingress_free[d])
            rate = min(cfg.nics_prefill, cfg.nics_decode) * cfg.link_bytes_per_s
        else:
            start = max(t, min(self.channels[(r.prefill_instance, d)]))
            rate = cfg.link_bytes_per_s
        return start + nbytes / rate + cfg.link_latency_s

    def recompute_price(self, d: int, m: int, h: int) -> tuple[float, float]:
        """(Span, extra over plain decode iterations) of rebuilding [h, h + m) in chunks
        beside the batch as it is now."""
        dec, roof = self.dc[d], self.cfg.decode
        nb = len(dec.running)
        ctx = sum(x.prompt + x.generated for x in dec.running)
        room = roof.chunk_room(nb, self.cfg.recompute_chunk_tokens)  # --- spec
        span = extra = 0.0
        done = h
        while m > 0:
            c = min(room, m)
            step = roof.mixed_step(nb, ctx, [(c, done, False, True)])
            span += step
            extra += step - (roof.mixed_step(nb, ctx, []) if nb else 0.0)
            done += c
            m -= c
            ctx += nb
        return span, extra

    def cost_aware_choice(
        self, r: Req, d: int, t: float, hit: int, host_tok: int
    ) -> tuple[int, int, bool]:
        """(Tokens sent, tokens recomputed, promote the host run): the cheapest of sending
        the missing KV, promoting the host run and sending the rest, and recomputing the
        prefill-cached part (plus its delay to the batch); ties: send, promote, recompute."""
        dec, cfg = self.dc[d], self.cfg
        full = r.prompt - hit
        cost = self.land_time(r, d, t, full) - t
        choice = (full, 0, False)
        if host_tok > 0:
            promo = (
                max(t, dec.host_free)
                + host_tok * cfg.decode.kv / cfg.host_path_bytes_per_s
                + cfg.host_path_latency_s
            )
            ready_p = max(promo, self.land_time(r, d, t, full - host_tok))
            if ready_p - t <= cost:
                cost, choice = ready_p - t, (full - host_tok, 0, True)
        ph = r.prefill_hit_tokens
        if ph <= hit:
            return choice
        m = ph - hit
        start = t
        for q in dec.recompute:
            if q.rc_wait is None and q.rc_total > q.rc_done:
                start += self.recompute_price(d, q.rc_total - q.rc_done, q.rc_done)[0]
        span, extra = self.recompute_price(d, m, hit)
        ready_rc = max(self.land_time(r, d, t, r.prompt - ph), start + span)
        cost_rc = ready_rc - t + len(dec.running) * extra
        return (r.prompt - ph, m, False) if cost_rc < cost else choice

    def cost_aware_local(self, r: Req, t: float) -> int | None:
        """cost_aware at arrival (docs/model.md §1.14.1): the decode instance to prefill
        ``r`` on, or None (remote). The candidate holds the longest ready run of its blocks
        (ties: fewest requests, lowest index) and must admit it now without trimming, with
        nobody queued there; local is priced as a recompute of the uncached prompt, remote
        as the least loaded prefill queue as one step, its own step and its KV over the
        link at the group rate; ties go remote."""
        cfg = self.cfg
        d = self.affinity_pick(r, self.pending_loads())
        dec = self.dc[d]
        hit = self.ready_run_tokens(r, d)
        free = cfg.budget_tokens - self.used(d)
        if dec.waiting or dec.resume or free < r.prompt + r.output - hit:
            return None
        start = t
        for q in dec.recompute:
            if q.rc_wait is None and q.rc_total > q.rc_done:
                start += self.recompute_price(d, q.rc_total - q.rc_done, q.rc_done)[0]
        span, extra = self.recompute_price(d, r.prompt - hit, hit)
        local = start + span - t + len(dec.running) * extra
        queued = [
            sum(x.prompt for x in self.reqs if x.prefill_instance == i and not x.prefill_done)
            for i in range(cfg.n_prefill)
        ]
        p = queued.index(min(queued))
        ph = self.cache_hit(self.pf[p], r)
        remote = self.cfg.prefill.prefill_step([(queued[p], 0)]) if queued[p] > 0 else 0.0
        remote = remote + self.cfg.prefill.prefill_step([(r.prompt - ph, ph)])
        nbytes = (r.prompt - hit) * cfg.decode.kv
        if nbytes > 0:
            rate = cfg.link_bytes_per_s
            if cfg.link_topology == "shared_nics":
                rate = min(cfg.nics_prefill, cfg.nics_decode) * cfg.link_bytes_per_s
            remote = remote + nbytes / rate + cfg.link_latency_s
        return d if local < remote else None

    # ------------------------------------------------------------------ link

    def on_landed(self, r: Req, t: float) -> None:
        r.t_transfer_end = t
        r.landed = True
        self.release_hold(r)
        dec = self.dc[r.decode_instance]
        if not r.rc_pending:
            for h in r.pinned:  # a recomputed request's blocks: once rebuilt (job_done)
                dec.replicas[h].ready = True
            # no recompute, or its job is done by the end of the running step
            self.ready_or_replay(dec, r)  # --- ced
            self.wake(r.decode_instance, t)

    def ready_or_replay(self, dec: DecodeInstance, r: Req) -> None:
        """--- ced (§2.12, replay on decode): a request whose KV is all here first replays
        its prompt's last w = min(W, prompt) tokens through the whole model, as a job of w
        tokens after prompt − w done (so it attends to the whole prompt); it is ready when
        that job is done. A resumed (preempted) request does not replay again."""
        window = getattr(self.cfg.decode, "replay_window", 0)
        if not window or r.replayed:
            dec.ready.append(r)
            return
        r.replayed = True
        w = min(window, r.prompt)
        r.rc_total, r.rc_done, r.rc_wait, r.rc_shared = r.prompt, r.prompt - w, None, 0
        r.rc_pending = True
        dec.recompute.append(r)

    # ------------------------------------------------------------------ decode

    def wake(self, d: int, t: float) -> None:
        """Work arrived: an idle instance starts a boundary now; a busy one takes it at its next."""
        dec = self.dc[d]
        if dec.state == "idle":
            dec.state = "wake"
            self.schedule(t, DECODE, d)

    def on_boundary(self, d: int, t: float) -> None:
        cfg, dec = self.cfg, self.dc[d]
        freed = False
        if dec.state in ("iter", "mixed"):  # an iteration ended; finishers leave in rid order
            for r in sorted(dec.running, key=lambda x: x.rid):
                r.emit(t)
                if r.generated == 1:
                    r.t_first_token = t
                if r.generated == r.output:
                    self.complete(r, dec, t)
                    freed = True
        if freed:  # kept answer blocks can hold more than the private KV they replace
            self.peak_used = max(self.peak_used, self.used(d))
        # (after a stall nothing finishes: its recomputed requests are already in dec.ready)
        if freed and self.resume_preempted(d, t):
            self.admit_waiting(d, t)
        if dec.reprefill:  # paged: resumed sequences rebuild the KV they held, as a stall
            end = t
            for r in dec.reprefill:
                m, c = self.reprefill_tokens(r)
                end += cfg.decode.reprefill(m, c)
                dec.ready.append(r)
            dec.reprefill = []
            dec.state = "stall"
            self.schedule(end, DECODE, d)
            return
        if dec.recompute:
            self.resolve_waits(dec, t)
        while dec.ready and len(dec.running) < cfg.max_batch:
            r = dec.ready.pop(0)
            if not r.generated:
                r.t_decode_start = t
            if not math.isnan(r.preempted_at):
                r.preempt_delay_s += t - r.preempted_at
                r.preempted_at = NAN
            dec.running.append(r)
        if self.paged and dec.running:
            self.take_blocks(d, t)
            held = any(x.private for x in self.reqs if x.decode_instance == d) or any(
                rep.refs > 0 for rep in dec.replicas.values()
            )  # an admitted request whose prompt is all hits holds only references
            if not dec.running and not held and dec.resume and self.resume_preempted(d, t):
                self.admit_waiting(d, t)  # nothing runs, nothing held: retry them now
            if not dec.running and (dec.ready or dec.reprefill):  # all preempted: the
                dec.state = "wake"  # ready ones join (or the resumed re-prefill) now
                self.schedule(t, DECODE, d)
                return
        if dec.recompute:
            self.mixed_recompute(d, t)
            return
        if not dec.running:
            dec.state = "idle"
            return
        ctx = sum(r.prompt + r.generated for r in dec.running)
        step = cfg.decode.decode_iteration(len(dec.running), ctx)
        dec.state = "iter"
        self.schedule(t + step, DECODE, d)

    def admit_waiting(self, d: int, t: float) -> None:
        """Admit waiting requests in order until one does not fit."""
        dec = self.dc[d]
        while dec.waiting:
            if not self.try_admit(dec.waiting[0], d, t):
                break
            dec.waiting.pop(0)

    def check_books(self, d: int) -> None:
        """Invariants of decode instance ``d``: each replica's refcount is the number of live
        requests pinning it, an idle replica has landed, memory is within the budget."""
        dec = self.dc[d]
        holders: dict[int, int] = {}
        for x in self.reqs:
            if x.decode_instance == d and x.outcome == PENDING and not math.isnan(x.t_admit):
                for h in x.pinned:
                    holders[h] = holders.get(h, 0) + 1
        for h, rep in dec.replicas.items():
            assert rep.refs == holders.get(h, 0), "replica refcount out of step"
            # a warm-up block whose transfer is in flight
            warming = self.cfg.prewarm == "link" and self.cfg.policy == "replicate_hotset"
            assert rep.refs > 0 or rep.ready or warming, "an idle replica that never landed"
        assert set(holders) <= set(dec.replicas)
        assert not set(dec.host) & set(dec.replicas), "a block in both HBM and host tiers"
        assert sum(v[0] for v in dec.host.values()) <= self.cfg.host_kv_tokens, "host over pool"
        assert 0 <= self.used(d) <= self.cfg.budget_tokens, "decode KV over budget"

    def complete(self, r: Req, dec: DecodeInstance, t: float) -> None:
        r.outcome = COMPLETED
        r.t_done = t
        dec.admitted -= 1
        dec.running.remove(r)
        r.private = 0
        self.keep_answer(r, dec)
        answer = r.answer if self.cfg.cache_generated else []
        for h, tok in r.chain + answer:  # its chain, then its answer, to the L3 store
            self.l3_put(h, tok, t)
        if self.cfg.host_write_policy == "write_through" and self.cfg.policy in (
            "replicate_tiered",
            "cost_aware",
        ):  # its blocks past its HBM hit, then its answer, root first
            answer = r.answer if self.cfg.cache_generated else []
            for h, _ in r.chain[r.held_hit :] + answer:
                if h in dec.replicas and dec.replicas[h].ready:
                    self.write_through(dec, h, t)
        self.release(r, dec)
        self.check_books(r.decode_instance)

    def keep_answer(self, r: Req, dec: DecodeInstance) -> None:
        """Its answer's full blocks become idle replicas: those in neither tier that the
        policy keeps, root first while they fit what is free; stamped before the chain's
        release (tail first), so they are trimmed before it."""
        if not (self.cfg.cache_generated and self.uses_replicas()):
            return
        room = self.cfg.budget_tokens - self.used(r.decode_instance)
        take = []
        for h, tok in r.answer:
            if h in dec.replicas or h in dec.host or not self.keeps(h, dec):
                continue
            if tok > room:
                break
            room -= tok
            take.append((h, tok))
        for h, tok in reversed(take):
            dec.replicas[h] = Replica(tok, 0, True, self.tick())

    def release(self, r: Req, dec: DecodeInstance) -> None:
        """Drop ``r``'s references on its replica blocks."""
        pinned = set(r.pinned)
        r.pinned = []
        for h, _ in reversed(r.chain):  # tail first: the root stays freshest
            if h in pinned:
                rep = dec.replicas[h]
                rep.refs -= 1
                assert rep.refs >= 0
                if rep.refs == 0:
                    if rep.ready:
                        rep.idle_since = self.tick()
                    else:
                        del dec.replicas[h]

    # ------------------------------------------------------------------ paged KV

    @property
    def paged(self) -> bool:
        return self.cfg.admission == "paged"

    def next_aseq(self) -> int:
        self.aseq += 1
        return self.aseq

    def blocks(self, tokens: int) -> int:
        """``tokens`` rounded up to whole blocks, in tokens."""
        bs = self.cfg.block_size
        return -(-tokens // bs) * bs

    def holds(self, r: Req, g: int) -> int:
        """Private tokens of ``r`` for its iteration after ``g`` generated tokens: own tokens
        (own prompt + g) in whole blocks, less the blocks it persisted as replicas."""
        return self.blocks(r.own0 + g) - r.persisted_held

    def trim(self, d: int, need: int, t: float) -> None:
        """Trim idle replicas LRU until ``need`` tokens are free (or none is idle);
        replicate_tiered demotes each to the host tier."""
        dec = self.dc[d]
        while self.cfg.budget_tokens - self.used(d) < need:
            idle = [h for h, rep in dec.replicas.items() if rep.refs == 0]
            if not idle:
                return
            victim = min(idle, key=lambda h: dec.replicas[h].idle_since)
            rep = dec.replicas.pop(victim)
            if self.cfg.policy in ("replicate_tiered", "cost_aware"):
                self.demote(dec, victim, rep.tokens, t, not rep.backed)

    def take_blocks(self, d: int, t: float) -> None:
        """An iteration starts: each running sequence takes the blocks its context now
        needs; short of memory, trim idle replicas, then preempt the most recently admitted
        running sequence, until the iteration fits."""
        dec = self.dc[d]
        while dec.running:
            need = sum(max(0, self.holds(r, r.generated) - r.private) for r in dec.running)
            self.trim(d, need, t)
            if need <= self.cfg.budget_tokens - self.used(d):
                break
            victim = max(dec.running, key=lambda r: r.aseq)
            victim.solo = victim.solo or len(dec.running) == 1  # resumes without shared blocks
            self.preempt(victim, d, t)
        for r in dec.running:
            r.private = max(r.private, self.holds(r, r.generated))
        self.peak_used = max(self.peak_used, self.used(d))
        self.check_books(d)

    def preempt(self, r: Req, d: int, t: float) -> None:
        dec = self.dc[d]
        dec.running.remove(r)
        r.preemptions += 1
        r.preempted_at = t
        self.release(r, dec)  # its replica blocks stay resident, idle unless shared
        r.held_hit = 0
        r.persisted_held = 0
        tokens = self.blocks(r.prompt + max(r.generated - 1, 0))
        if self.cfg.preemption == "swap" and dec.swap_used + tokens <= self.swap_room:
            # its whole context, copied out over the host path, while host memory is left
            r.swapped = True
            dec.swap_used += tokens
            r.preempt_tokens += tokens
            self.host_move(dec, t, tokens * self.cfg.decode.kv)
        elif self.cfg.preemption == "swap":
            self.swap_fallbacks += 1  # host memory full: recomputed on resume
        r.private = 0
        dec.resume.insert(0, r)

    def reprefill_tokens(self, r: Req) -> tuple[int, int]:
        """(tokens rebuilt, cached tokens attended): the context it held (prompt + tokens
        generated before its last iteration), less the replica blocks it found resident."""
        cached = r.prompt - r.own0
        return r.prompt + max(r.generated - 1, 0) - cached, cached

    def resume_preempted(self, d: int, t: float) -> bool:
        """Memory freed: resume preempted sequences first; True when none is left."""
        dec = self.dc[d]
        while dec.resume:
            r = dec.resume[0]
            hit_blocks: list[int] = []
            if self.uses_replicas() and not r.swapped and not r.solo:
                for h, _ in r.chain:  # the prefix cache again, as vLLM's resume does
                    rep = dec.replicas.get(h)
                    if rep is None or not rep.ready:
                        break
                    hit_blocks.append(h)
            hit = sum(tok for _, tok in r.chain[: len(hit_blocks)])
            need = self.blocks(r.prompt - hit + max(r.generated - 1, 0))
            trimmable = sum(
                rep.tokens
                for h, rep in dec.replicas.items()
                if rep.refs == 0 and h not in hit_blocks
            )
            free = self.cfg.budget_tokens - self.used(d)
            if free < need and free + trimmable < need:
                return False
            for h in hit_blocks:
                dec.replicas[h].refs += 1
            r.pinned = hit_blocks
            r.held_hit = len(hit_blocks)
            r.own0 = r.prompt - hit
            self.trim(d, need, t)
            dec.resume.pop(0)
            r.resumes += 1
            r.private = need
            r.aseq = self.next_aseq()
            self.peak_used = max(self.peak_used, self.used(d))
            if r.swapped:
                land = self.host_move(self.dc[d], t, need * self.cfg.decode.kv)
                self.schedule(land, TRANSFER, (SWAPPED, r))
            else:
                r.preempt_tokens += self.reprefill_tokens(r)[0]
                dec.reprefill.append(r)
                self.wake(d, t)
        return True

    @property
    def swap_room(self) -> int:
        """Host memory a decode instance has for swapped-out contexts (tokens)."""
        tiered = self.cfg.policy in ("replicate_tiered", "cost_aware")
        return max(self.cfg.swap_tokens - (self.cfg.host_kv_tokens if tiered else 0), 0)

    def on_swapped_in(self, r: Req, t: float) -> None:
        dec = self.dc[r.decode_instance]
        dec.swap_used -= self.blocks(r.prompt + max(r.generated - 1, 0))
        r.swapped = False
        self.dc[r.decode_instance].ready.append(r)
        self.wake(r.decode_instance, t)

    # ------------------------------------------------------------------ output

    def columns(self) -> dict[str, np.ndarray]:
        return _columns(self.reqs)


def pooled_gaps(sim, warmup: int = 0) -> np.ndarray:
    """Every inter-token gap of the requests from index ``warmup`` on, pooled (vLLM bench
    serve's ITL list), from a finished ReferenceSim or ColocatedReference."""
    out = [g for r in sim.reqs if r.rid >= warmup for g in r.gaps]
    return np.array(out, dtype=np.float64)


def reference_simulate(req, cfg: RefConfig) -> dict[str, np.ndarray]:
    """Per-request columns (same names as the product's result columns), naive simulator."""
    return ReferenceSim(req, cfg).run()


# ---------------------------------------------------------------------- colocated mode

STEP = 0  # colocated event kinds, in the order they run at equal times
C_TIMEOUT, C_ARRIVAL = 1, 2


class _Colo:
    def __init__(self, capacity: int) -> None:
        self.waiting: list[Req] = []  # FIFO; an admitted, partly prefilled prompt stays here
        self.running: list[Req] = []  # decoding, in join order
        self.used = 0  # KV tokens reserved by admitted requests
        self.load = 0  # requests assigned and not ended
        self.cache = PrefillInstance(capacity)  # its block prefix cache
        self.busy = False  # a step, an iteration or a wake-up boundary is scheduled
        self.step: tuple[str, list] = ("wake", [])  # what ends at that boundary
        self.look = False  # arrivals since the last boundary


class ColocatedReference:
    """Coupled serving, one event per step or iteration (docs/model.md §1.12, coupled.md).

    ``instances`` instances of the decode hardware (``cfg.decode`` roofline), each with its
    own FIFO, block prefix cache (``prefill_cache_tokens``) and KV budget (``budget_tokens``).

    * Arrival: to the instance with the fewest requests assigned and not ended (ties: lowest
      index); an idle instance takes a boundary at once, a busy one looks at its queue at
      its next boundary. With on_full=wait the request is rejected ``timeout`` if it is not
      admitted ``wait_timeout_s`` after its arrival (it leaves the queue then).
    * The scheduler looks at the queue at a boundary if something may have changed: the
      instance was idle, a prefill or mixed step just ended, a request finished (memory
      freed), or a request arrived since the previous boundary. (A timeout alone does not
      make it look.) Otherwise the batch keeps decoding, one iteration per event.
    * Admission, when the queue head is considered: need = prompt + output; need > budget
      rejects ``too_large``; not fitting rejects ``no_memory`` (reject) or keeps the head
      waiting (wait). Admitting reserves need and looks the prompt up in the prefix cache
      (hit capped at prompt - 1).
    * ``prefill_priority``: admitted prompts from the head, whole, while the batch plus the
      new prompts stay under ``max_batch`` and their new tokens within the step budget (the
      first always goes; a head admitted but over the budget waits, admitted, for the next
      step). One prefill step (§2.3 at prefill efficiency); running sequences stall.
    * ``chunked``: one decode token per running sequence plus chunks of waiting prompts in
      FIFO order filling ``step_token_budget`` tokens (and ``max_batch`` sequences); prompts
      behind the head are admitted in order, stopping at the first that does not fit; the
      mixed step is priced at decode efficiency (decode FLOPs and KV reads, the chunks'
      FLOPs with attention to their prefilled part, their KV, an LM head per finished prompt).
    * The step finishing a prompt emits its first token (``t_first_token`` = ``t_prefill_end``
      = ``t_decode_start``), its chain enters the cache, and it joins the batch for the
      other output - 1 tokens; a 1-token request ends there.
    """

    def __init__(self, req, cfg: RefConfig) -> None:
        self.cfg = cfg
        self.reqs = _chains(req)
        assert cfg.instances >= 1
        self.inst = [_Colo(cfg.prefill_cache_tokens) for _ in range(cfg.instances)]
        self.events: list = []
        self.seq = 0
        self.clock = 0
        self.peak_used = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def schedule(self, t: float, kind: int, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, payload))

    def run(self) -> dict[str, np.ndarray]:
        for r in self.reqs:
            self.schedule(r.arrival, C_ARRIVAL, r)
        while self.events:
            t, kind, _, payload = heapq.heappop(self.events)
            if kind == C_ARRIVAL:
                self.on_arrival(payload, t)
            elif kind == C_TIMEOUT:
                self.on_timeout(payload, t)
            else:
                self.on_boundary(payload, t)
        assert all(r.outcome != PENDING for r in self.reqs), "a request never ended"
        assert all(x.used == 0 and x.load == 0 and not x.running for x in self.inst)
        cols = _columns(self.reqs)
        # no link in a colocated instance: no transfer times (docs/coupled.md)
        cols["t_decode_start"] = cols["t_prefill_end"].copy()
        cols["decode_instance"] = cols["prefill_instance"].copy()
        return cols

    def on_arrival(self, r: Req, t: float) -> None:
        loads = [x.load for x in self.inst]
        i = loads.index(min(loads))
        inst = self.inst[i]
        r.prefill_instance = i
        inst.load += 1
        inst.waiting.append(r)
        if self.cfg.on_full == "wait":
            self.schedule(t + self.cfg.wait_timeout_s, C_TIMEOUT, r)
        inst.look = True
        if not inst.busy:
            inst.busy, inst.step = True, ("wake", [])
            self.schedule(t, STEP, i)

    def on_timeout(self, r: Req, t: float) -> None:
        if r.outcome == PENDING and math.isnan(r.t_admit):
            self.inst[r.prefill_instance].waiting.remove(r)
            self.end(r, t, REJECTED, TIMED_OUT)

    def end(self, r: Req, t: float, outcome: int, reason: int = NO_REASON) -> None:
        inst = self.inst[r.prefill_instance]
        r.outcome, r.reject_reason, r.t_done = outcome, reason, t
        inst.load -= 1
        inst.used -= r.private
        r.private = 0

    def prompt_done(self, i: int, r: Req, t: float) -> None:
        inst = self.inst[i]
        r.t_prefill_end = r.t_first_token = t
        r.emit(t)
        cache = inst.cache
        for h, tok in reversed(r.chain):  # as a prefill node's cache (§1.4)
            if h in cache.cache:
                cache.cache[h][1] = self.tick()
            elif tok <= cache.capacity:
                cache.cache[h] = [tok, self.tick()]
        while sum(v[0] for v in cache.cache.values()) > cache.capacity:
            oldest = min(cache.cache, key=lambda h: cache.cache[h][1])
            del cache.cache[oldest]
        if r.generated == r.output:
            self.end(r, t, COMPLETED)
        else:
            inst.running.append(r)

    def on_boundary(self, i: int, t: float) -> None:
        inst, cfg = self.inst[i], self.cfg
        kind, work = inst.step
        look = kind != "iter" or inst.look
        inst.look = False
        if kind in ("iter", "mixed"):  # the running sequences emit a token
            for r in list(inst.running):  # (nobody joins or leaves during a step)
                r.emit(t)
                if r.generated == r.output:
                    inst.running.remove(r)
                    self.end(r, t, COMPLETED)
                    look = True
        if kind == "prefill":
            for r in work:
                self.prompt_done(i, r, t)
        if kind == "mixed":
            for r, n in work:
                r.done += n
                if r.done == r.prompt:
                    inst.waiting.remove(r)
                    self.prompt_done(i, r, t)
        if look:
            step = (
                self.prefill_step(i, t) if cfg.scheduler == "prefill_priority" else self.mixed(i, t)
            )
            if step is not None:
                return
        if inst.running:
            ctx = sum(r.prompt + r.generated for r in inst.running)
            inst.step = ("iter", [])
            self.schedule(t + cfg.decode.decode_iteration(len(inst.running), ctx), STEP, i)
        else:
            inst.busy = False

    def admit_head(self, i: int, t: float) -> Req | None:
        inst, cfg = self.inst[i], self.cfg
        while inst.waiting:
            r = inst.waiting[0]
            if not math.isnan(r.t_admit):
                return r
            need = r.prompt + r.output
            if need > cfg.budget_tokens:
                inst.waiting.pop(0)
                self.end(r, t, REJECTED, TOO_LARGE)
                continue
            if inst.used + need > cfg.budget_tokens:
                if cfg.on_full == "reject":
                    inst.waiting.pop(0)
                    self.end(r, t, REJECTED, NO_MEMORY)
                    continue
                return None
            self.reserve(i, r, t, need)
            return r
        return None

    def reserve(self, i: int, r: Req, t: float, need: int) -> None:
        inst = self.inst[i]
        inst.used += need
        r.private = need
        r.t_admit = t
        self.peak_used = max(self.peak_used, inst.used)
        assert inst.used <= self.cfg.budget_tokens
        hit = 0
        for h, tok in r.chain:
            if h not in inst.cache.cache:
                break
            hit += tok
        r.prefill_hit_tokens = min(hit, r.prompt - 1) if r.chain else 0
        r.done = r.prefill_hit_tokens

    def prefill_step(self, i: int, t: float):
        inst, cfg = self.inst[i], self.cfg
        batch: list[Req] = []
        new = 0
        while len(inst.running) + len(batch) < cfg.max_batch:
            r = self.admit_head(i, t)
            if r is None:
                break
            n = r.prompt - r.prefill_hit_tokens
            if batch and new + n > cfg.step_token_budget:
                break
            inst.waiting.pop(0)
            batch.append(r)
            new += n
        if not batch:
            return None
        for r in batch:
            r.t_prefill_start = t
        dur = cfg.decode.prefill_step(
            [(r.prompt - r.prefill_hit_tokens, r.prefill_hit_tokens) for r in batch]
        )
        inst.step = ("prefill", batch)
        self.schedule(t + dur, STEP, i)
        return dur

    def mixed(self, i: int, t: float):
        inst, cfg = self.inst[i], self.cfg
        b = len(inst.running)
        room = cfg.step_token_budget - b
        chunks: list[tuple[Req, int]] = []
        pos = 0
        while room > 0 and b + len(chunks) < cfg.max_batch and pos < len(inst.waiting):
            if pos == 0:
                r = self.admit_head(i, t)
                if r is None:
                    break
            else:
                r = inst.waiting[pos]
                if math.isnan(r.t_admit):
                    need = r.prompt + r.output
                    if need > cfg.budget_tokens or inst.used + need > cfg.budget_tokens:
                        break
                    self.reserve(i, r, t, need)
            n = min(room, r.prompt - r.done)
            chunks.append((r, n))
            if math.isnan(r.t_prefill_start):
                r.t_prefill_start = t
            room -= n
            pos += 1
        if not chunks:
            return None
        ctx = sum(r.prompt + r.generated for r in inst.running)
        dur = cfg.decode.mixed_step(
            b, ctx, [(n, r.done, r.done + n == r.prompt) for r, n in chunks]
        )
        inst.step = ("mixed", chunks)
        self.schedule(t + dur, STEP, i)
        return dur


def colocated_simulate(req, cfg: RefConfig) -> dict[str, np.ndarray]:
    return ColocatedReference(req, cfg).run()
