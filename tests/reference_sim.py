"""A deliberately naive reference simulator of the engine's semantics (BRIEF §6, rung 2).

Written from the semantics in the design notes, not from ``engine/core.py``: plain Python
objects, linear scans instead of load arrays and indexes, and every decode iteration is its
own event (no closed-form series). It is slow on purpose and only meant for small scenarios;
``tests/test_engine_reference.py`` checks that the fast core agrees with it on every
per-request timestamp.

Semantics implemented (times in seconds):

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
  (ties lowest index); ``round_robin``.
* Hand-off (admission): replica hit = leading run of ready replica blocks (replicating
  policies only). need = prompt + output - hit. need > budget: rejected ``too_large``.
  If memory (after trimming idle replicas other than the hit) cannot hold need: rejected
  ``no_memory``, or with on_full=wait queued FIFO until memory frees (a request finishes)
  or the timeout passes (then it is rejected ``timeout`` and leaves the queue). With live
  waiters a newcomer queues behind them without trying; a queued request is admitted (or
  found too_large) only when it reaches the head. Otherwise hit blocks are pinned, idle
  replicas trimmed LRU until need fits, and the blocks the policy keeps (and that are not
  resident yet) become pending replicas, ready once the KV lands.
  The KV moves over the earliest-free channel of the (prefill, decode) path.
* Decode: continuous batching, one event per iteration. A request is ready when its KV has
  landed and its recompute (if any) is done; it joins at the first boundary strictly after
  that (an idle instance starts a boundary at once). Queued recomputes run back to back at
  a boundary and stall the batch; the stall's end is a boundary, and the requests it
  recomputed join there.
* Join order when the batch is full (the design leaves it open; this is the core's rule):
  FIFO by the moment a request entered the join queue, i.e. when its KV landed, or, for a
  request that also needs a recompute, the later of its KV landing and the start of the
  stall that recomputes it (so a recomputed request whose KV landed before its stall goes
  ahead of one whose KV lands during the stall even though the latter is ready earlier).
* Requests finishing at the same boundary leave in request (arrival) order, which fixes
  the LRU order of the replica blocks they release (each request's chain tail first).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from prefixbench.costmodel import decode_iteration_time
from prefixbench.engine import TIME_COLUMNS

DECODE, TRANSFER, PREFILL, TIMEOUT, ARRIVAL = range(5)
PENDING, COMPLETED, REJECTED = 0, 1, 2
NO_REASON, NO_MEMORY, TIMED_OUT, TOO_LARGE = 0, 1, 2, 3
NAN = math.nan


@dataclass
class Req:
    rid: int
    arrival: float
    prompt: int
    output: int
    chain: list[tuple[int, int]]  # (block hash, tokens), root first
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
    # state
    prefill_done: bool = False
    landed: bool = False
    private: int = 0
    pinned: list[int] = field(default_factory=list)  # replica blocks this request holds a ref on
    generated: int = 0


@dataclass
class Replica:
    tokens: int
    refs: int
    ready: bool
    idle_since: int = 0  # logical clock of the moment refs dropped to 0 (LRU order)


class PrefillInstance:
    def __init__(self, capacity: int) -> None:
        self.queue: list[Req] = []
        self.batch: list[Req] | None = None
        self.capacity = capacity
        self.cache: dict[int, list[int]] = {}  # hash -> [tokens, last use]


class DecodeInstance:
    def __init__(self) -> None:
        self.running: list[Req] = []
        self.ready: list[Req] = []  # ready to join, in the order they became ready
        self.recompute: list[Req] = []
        self.waiting: list[Req] = []
        self.replicas: dict[int, Replica] = {}
        self.state = "idle"  # idle | wake (boundary scheduled now) | iter | stall


class ReferenceSim:
    def __init__(self, req, cfg) -> None:
        self.cfg = cfg
        self.reqs: list[Req] = []
        ptr = req.blk_ptr.tolist()
        hashes = req.blk_hash.tolist()
        toks = req.blk_tokens.tolist()
        for i in range(len(req)):
            chain = [(hashes[j], toks[j]) for j in range(ptr[i], ptr[i + 1])]
            self.reqs.append(
                Req(i, float(req.arrival[i]), int(req.prompt_len[i]), int(req.output_len[i]), chain)
            )
        self.pf = [PrefillInstance(cfg.prefill_cache_tokens) for _ in range(cfg.n_prefill)]
        self.dc = [DecodeInstance() for _ in range(cfg.n_decode)]
        self.channels = {
            (p, d): [0.0] * cfg.link_channels
            for p in range(cfg.n_prefill)
            for d in range(cfg.n_decode)
        }
        self.rr_prefill = 0
        self.rr_decode = 0
        self.clock = 0  # logical clock for LRU stamps
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

    # ------------------------------------------------------------------ helpers

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def schedule(self, t: float, kind: int, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, payload))

    def uses_replicas(self) -> bool:
        return self.cfg.policy in ("replicate_hotset", "replicate_all_lru")

    def keeps(self, h: int) -> bool:
        if self.cfg.policy == "replicate_all_lru":
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
            elif kind == TRANSFER:
                self.on_landed(payload, t)
            elif kind == TIMEOUT:
                self.on_timeout(payload, t)
            else:
                self.on_boundary(payload, t)
        return self.columns()

    # ------------------------------------------------------------------ prefill

    def on_arrival(self, r: Req, t: float) -> None:
        cfg = self.cfg
        if cfg.prefill_router == "round_robin":
            p = self.rr_prefill % cfg.n_prefill
            self.rr_prefill += 1
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

    def cache_hit(self, inst: PrefillInstance, r: Req) -> int:
        hit = 0
        for h, tok in r.chain:
            if h not in inst.cache:
                break
            hit += tok
        return min(hit, r.prompt - 1) if r.chain else 0

    def start_prefill(self, p: int, t: float) -> None:
        inst, cost = self.pf[p], self.cfg.prefill_cost
        batch: list[Req] = []
        total_new = 0
        while inst.queue:
            r = inst.queue[0]
            hit = self.cache_hit(inst, r)
            new = r.prompt - hit
            if batch and total_new + new > self.cfg.prefill_token_budget:
                break
            inst.queue.pop(0)
            batch.append(r)
            total_new += new
            r.prefill_hit_tokens = hit
            r.t_prefill_start = t
        flops = 0.0
        for r in batch:
            n, c = r.prompt - r.prefill_hit_tokens, r.prefill_hit_tokens
            flops += (
                n * cost.linear_flops
                + cost.lm_head_flops
                + cost.attn_coef * (n * c + n * (n + 1) / 2)
            )
        nbytes = float(cost.weights_read(total_new)) + cost.kv_bpt * sum(r.prompt for r in batch)
        step = max(flops / cost.flops_rate_prefill, nbytes / cost.byte_rate) + cost.prefill_overhead
        inst.batch = batch
        self.schedule(t + step, PREFILL, p)

    def on_prefill_end(self, p: int, t: float) -> None:
        inst = self.pf[p]
        batch, inst.batch = inst.batch, None
        for r in batch:
            r.t_prefill_end = t
            r.prefill_done = True
            for h, tok in reversed(r.chain):  # tail first: the root ends up freshest
                if h in inst.cache:
                    inst.cache[h][1] = self.tick()
                elif tok <= inst.capacity:
                    inst.cache[h] = [tok, self.tick()]
            while sum(v[0] for v in inst.cache.values()) > inst.capacity:
                oldest = min(inst.cache, key=lambda h: inst.cache[h][1])
                del inst.cache[oldest]
        for r in batch:
            d = self.route_decode()
            r.decode_instance = d
            self.hand_off(r, d, t)
        if inst.queue:
            self.start_prefill(p, t)

    def route_decode(self) -> int:
        cfg = self.cfg
        if cfg.decode_router == "round_robin":
            d = self.rr_decode % cfg.n_decode
            self.rr_decode += 1
            return d
        # requests handed to each decode instance that have not ended yet
        loads = [
            sum(1 for x in self.reqs if x.decode_instance == i and x.outcome == PENDING)
            for i in range(cfg.n_decode)
        ]
        return loads.index(min(loads))

    # ------------------------------------------------------------------ admission

    def hand_off(self, r: Req, d: int, t: float) -> None:
        dec = self.dc[d]
        if self.cfg.on_full == "wait" and dec.waiting:  # only live waiters stay in the list
            self.wait(r, d, t)
            return
        if not self.try_admit(r, d, t):
            if self.cfg.on_full == "wait":
                self.wait(r, d, t)
            else:
                self.reject(r, t, NO_MEMORY)

    def wait(self, r: Req, d: int, t: float) -> None:
        self.dc[d].waiting.append(r)
        self.schedule(t + self.cfg.wait_timeout_s, TIMEOUT, r)

    def on_timeout(self, r: Req, t: float) -> None:
        if r.outcome == PENDING and math.isnan(r.t_admit):
            self.dc[r.decode_instance].waiting.remove(r)
            self.reject(r, t, TIMED_OUT)

    def reject(self, r: Req, t: float, reason: int) -> None:
        r.outcome = REJECTED
        r.reject_reason = reason
        r.t_done = t

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
        hit = sum(tok for _, tok in r.chain[: len(hit_blocks)])
        need = r.prompt + r.output - hit
        if need > cfg.budget_tokens:
            self.reject(r, t, TOO_LARGE)
            return True
        free = cfg.budget_tokens - self.used(d)
        trimmable = sum(
            rep.tokens for h, rep in dec.replicas.items() if rep.refs == 0 and h not in hit_blocks
        )
        if free < need and free + trimmable < need:
            return False
        for h in hit_blocks:
            dec.replicas[h].refs += 1
        while free < need:
            idle = [h for h, rep in dec.replicas.items() if rep.refs == 0]
            victim = min(idle, key=lambda h: dec.replicas[h].idle_since)
            free += dec.replicas.pop(victim).tokens
        persisted = 0
        pinned = list(hit_blocks)
        for h, tok in r.chain[len(hit_blocks) :]:
            if h not in dec.replicas and self.keeps(h):
                dec.replicas[h] = Replica(tok, 1, False)
                pinned.append(h)
                persisted += tok
        r.pinned = pinned
        r.private = need - persisted
        r.replica_hit_tokens = hit
        r.persisted_tokens = persisted
        r.t_admit = t
        self.peak_used = max(self.peak_used, self.used(d))
        assert self.used(d) <= cfg.budget_tokens

        if cfg.policy == "transfer_per_request":
            xfer, rc = r.prompt, 0
        elif cfg.policy == "recompute_on_decode":
            xfer, rc = r.prompt - r.prefill_hit_tokens, r.prefill_hit_tokens
        else:
            xfer, rc = r.prompt - hit, 0
        r.transfer_tokens, r.recompute_tokens = xfer, rc
        nbytes = xfer * cfg.decode_cost.kv_bpt
        if nbytes > 0:
            chans = self.channels[(r.prefill_instance, d)]
            c = chans.index(min(chans))
            start = max(t, chans[c])
            busy = nbytes / cfg.link_bytes_per_s
            chans[c] = start + busy
            r.t_transfer_start = start
            self.schedule(start + busy + cfg.link_latency_s, TRANSFER, r)
        else:
            r.t_transfer_start = t
            self.schedule(t, TRANSFER, r)
        if rc > 0:
            dec.recompute.append(r)
            self.wake(d, t)
        return True

    # ------------------------------------------------------------------ link

    def on_landed(self, r: Req, t: float) -> None:
        r.t_transfer_end = t
        r.landed = True
        dec = self.dc[r.decode_instance]
        for h in r.pinned:
            dec.replicas[h].ready = True
        if r.recompute_tokens == 0 or not math.isnan(r.t_recompute_start):
            # no recompute, or it is already scheduled in a stall that ends at a boundary
            dec.ready.append(r)
            self.wake(r.decode_instance, t)

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
        if dec.state == "iter":  # one iteration just ended; finishers leave in request order
            for r in sorted(dec.running, key=lambda x: x.rid):
                r.generated += 1
                if r.generated == 1:
                    r.t_first_token = t
                if r.generated == r.output:
                    self.complete(r, dec, t)
                    freed = True
        # (after a stall nothing finishes: its recomputed requests are already in dec.ready)
        if freed:
            while dec.waiting:
                head = dec.waiting[0]
                if not self.try_admit(head, d, t):
                    break
                dec.waiting.pop(0)
        if dec.recompute:
            end = t
            for r in dec.recompute:
                n = r.recompute_tokens
                cost = cfg.decode_cost
                flops = n * cost.linear_flops + cost.attn_coef * n * (n + 1) / 2
                nbytes = float(cost.weights_read(n)) + cost.kv_bpt * n
                r.t_recompute_start = end
                end += (
                    max(flops / cost.flops_rate_prefill, nbytes / cost.byte_rate)
                    + cost.prefill_overhead
                )
                r.t_recompute_end = end
                if r.landed:  # queued to join now, in recompute order; joins at the stall end
                    dec.ready.append(r)
            dec.recompute = []
            dec.state = "stall"
            self.schedule(end, DECODE, d)
            return
        while dec.ready and len(dec.running) < cfg.max_batch:
            r = dec.ready.pop(0)
            r.t_decode_start = t
            dec.running.append(r)
        if not dec.running:
            dec.state = "idle"
            return
        ctx = sum(r.prompt + r.generated for r in dec.running)
        step = float(decode_iteration_time(cfg.decode_cost, len(dec.running), ctx))
        dec.state = "iter"
        self.schedule(t + step, DECODE, d)

    def complete(self, r: Req, dec: DecodeInstance, t: float) -> None:
        r.outcome = COMPLETED
        r.t_done = t
        dec.running.remove(r)
        pinned = set(r.pinned)
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
        r.private = 0

    # ------------------------------------------------------------------ output

    def columns(self) -> dict[str, np.ndarray]:
        f = list(TIME_COLUMNS)  # the output contract; the semantics here are independent
        i = [
            "prefill_instance",
            "decode_instance",
            "outcome",
            "reject_reason",
            "prefill_hit_tokens",
            "replica_hit_tokens",
            "recompute_tokens",
            "transfer_tokens",
            "persisted_tokens",
        ]
        out = {k: np.array([getattr(r, k) for r in self.reqs], dtype=np.float64) for k in f}
        out.update({k: np.array([getattr(r, k) for r in self.reqs], dtype=np.int64) for k in i})
        return out


def reference_simulate(req, cfg) -> dict[str, np.ndarray]:
    """Per-request columns (same names as ``SimResult.columns``) from the naive simulator."""
    return ReferenceSim(req, cfg).run()
