"""The discrete-event core: prefill → admission → KV link → decode, vectorized over requests.

State is one array (list) per field indexed by request id; the event queue is
``(time, kind, seq, a, b)`` so equal times resolve by kind priority then insertion order.
A decode instance is advanced between events in closed form: a fixed batch's iterations
cost an arithmetic series in the resident context (costmodel.series_time), so the work
grows with events, never with tokens or iterations.

Semantics are specified in docs/model.md; tests/reference_sim.py re-implements them one
decode iteration at a time and must agree on every timestamp.
"""

from __future__ import annotations

import heapq
import math
import os
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from ..costmodel import InstanceCost, decode_series_coeffs, iterations_within, series_time
from ..workload.requests import Requests
from .cache import BlockLRU, ReplicaStore
from .policies import POLICIES
from .routing import DECODE_ROUTERS, PREFILL_ROUTERS

INF = math.inf


class Ev(IntEnum):
    """Event kinds, in the order they run when times are equal."""

    DECODE = 0  # a decode instance reaches an iteration boundary it scheduled
    TRANSFER = 1  # a request's KV has landed on its decode instance
    PREFILL = 2  # a prefill step finished
    TIMEOUT = 3  # a waiting admission gives up
    ARRIVAL = 4


class Outcome(IntEnum):
    PENDING = 0
    COMPLETED = 1
    REJECTED = 2


class Reason(IntEnum):
    NONE = 0
    NO_MEMORY = 1  # on_full=reject and nothing trimmable made room
    TIMEOUT = 2  # on_full=wait and no room within the timeout
    TOO_LARGE = 3  # needs more KV than the whole budget


REASON_NAMES = {r.value: r.name.lower() for r in Reason}

# The per-request timestamp columns every engine returns (SimResult.columns), in order.
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
)


@dataclass
class EngineConfig:
    """Resolved, plain-number inputs of one run (built by runner.prepare)."""

    policy: str
    prefill_cost: InstanceCost
    decode_cost: InstanceCost
    n_prefill: int = 1
    n_decode: int = 1
    link_bytes_per_s: float = 3.125e9
    link_latency_s: float = 0.0
    link_channels: int = 1
    max_batch: int = 64
    prefill_token_budget: int = 8192
    prefill_cache_tokens: int = 10**9
    budget_tokens: int = 10**9  # decode KV budget per instance
    hot_blocks: list[tuple[int, int]] = field(default_factory=list)  # (hash, tokens), hottest first
    on_full: str = "reject"
    wait_timeout_s: float = 2.0
    prefill_router: str = "least_tokens"
    decode_router: str = "least_load"
    warmup_requests: int = 0
    track_gaps: bool = (
        False  # record each request's largest gap between tokens (costs O(batch)/event)
    )


class _Decode:
    """One decode instance: its batch (in closed form), queues and memory."""

    __slots__ = (
        "b",
        "ctx",
        "it",
        "t_seg",
        "heap",
        "joinq",
        "recq",
        "waitq",
        "stall_end",
        "in_stall",
        "next_t",
        "next_k",
        "version",
        "private",
        "store",
        "busy",
    )

    def __init__(self) -> None:
        self.b = 0  # sequences in the batch
        self.ctx = 0  # tokens the next iteration attends to, summed over the batch
        self.it = 0  # iterations done since the start of the run
        self.t_seg = 0.0  # time of the last boundary the state was advanced to
        self.heap: list[tuple[int, int]] = []  # (iteration at which it finishes, rid)
        self.joinq: deque[int] = deque()  # ready requests waiting for a batch slot
        self.recq: deque[int] = deque()  # prefix recompute jobs waiting to run
        self.waitq: deque[int] = deque()  # requests waiting for admission (on_full=wait)
        self.stall_end = -INF
        self.in_stall = False
        self.next_t = INF
        self.next_k = 0
        self.version = 0
        self.private = 0  # KV tokens reserved by admitted requests, replicas excluded
        self.store = ReplicaStore()
        self.busy = 0.0


@dataclass
class SimResult:
    """Per-request columns (numpy) and per-run counters."""

    columns: dict[str, np.ndarray]
    stats: dict[str, float]


class Simulator:
    def __init__(self, req: Requests, cfg: EngineConfig, recorder=None) -> None:
        self.cfg = cfg
        self.rec = recorder  # engine.recorder.Recorder for timelines, or None
        self.policy = POLICIES[cfg.policy](frozenset(h for h, _ in cfg.hot_blocks))
        self.prefill_route = PREFILL_ROUTERS[cfg.prefill_router]
        self.decode_route = DECODE_ROUTERS[cfg.decode_router]
        n = self.n = len(req)
        self.arrival = req.arrival.tolist()
        self.prompt = req.prompt_len.tolist()
        self.output = req.output_len.tolist()
        self.ptr = req.blk_ptr.tolist()
        self.bh = req.blk_hash.tolist()
        self.bt = req.blk_tokens.tolist()
        nan = math.nan
        self.t_prefill_start = [nan] * n
        self.t_prefill_end = [nan] * n
        self.t_admit = [nan] * n
        self.t_xfer_start = [nan] * n
        self.t_xfer_end = [nan] * n
        self.t_rc_start = [nan] * n
        self.t_rc_end = [nan] * n
        self.t_decode_start = [nan] * n
        self.t_first = [nan] * n
        self.t_done = [nan] * n
        self.p_inst = [-1] * n
        self.d_inst = [-1] * n
        self.outcome = [0] * n
        self.reason = [0] * n
        self.prefill_hit = [0] * n
        self.replica_hit = [0] * n
        self.recompute_tok = [0] * n
        self.xfer_tok = [0] * n
        self.persist_tok = [0] * n
        self.private = [0] * n
        self.held: list[list[int] | None] = [None] * n
        self.persisted: list[list[int] | None] = [None] * n
        self.max_gap = [0.0] * n
        self.last_tok = [nan] * n
        self.rc_pending = [False] * n
        self.xfer_done = [False] * n

        self.prefill_load = [0] * cfg.n_prefill
        self.decode_load = [0] * cfg.n_decode
        self.counts = {"prefill": cfg.n_prefill, "decode": cfg.n_decode}
        self.rr = {"prefill": 0, "decode": 0}
        self.pq = [deque() for _ in range(cfg.n_prefill)]
        self.p_batch: list[list[int] | None] = [None] * cfg.n_prefill
        self.p_cache = [BlockLRU(cfg.prefill_cache_tokens) for _ in range(cfg.n_prefill)]
        self.p_busy = [0.0] * cfg.n_prefill
        self.dec = [_Decode() for _ in range(cfg.n_decode)]
        self.chan_free = [
            [[0.0] * cfg.link_channels for _ in range(cfg.n_decode)] for _ in range(cfg.n_prefill)
        ]
        self.link_busy = 0.0

        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.now = 0.0
        warm = min(cfg.warmup_requests, n - 1) if n else 0
        self.t_warm = self.arrival[warm] if n else 0.0
        # memory tracking (time-weighted replica KV in the steady window, peaks over the run)
        self.mem_t = [0.0] * cfg.n_decode
        self.rep_area = 0.0
        self.used_area = 0.0
        self.peak_replica = 0
        self.peak_used = 0
        self.batch_area = 0.0

        if self.policy.name == "replicate_hotset" and cfg.hot_blocks:
            for d in self.dec:
                d.store.prewarm([h for h, _ in cfg.hot_blocks], [t for _, t in cfg.hot_blocks])
            self.peak_replica = self.dec[0].store.used
            self.peak_used = self.peak_replica
        self._last_rep = [d.store.used for d in self.dec]  # value since mem_t, per instance
        self._last_used = [d.store.used for d in self.dec]

    # ------------------------------------------------------------------ event queue

    def push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    def run(self) -> SimResult:
        if self.n:
            self.push(self.arrival[0], Ev.ARRIVAL, 0)
        events = self.events
        pop = heapq.heappop
        while events:
            t, kind, _, a, b = pop(events)
            self.now = t
            if kind == Ev.DECODE:
                self._decode_boundary(a, b, t)
            elif kind == Ev.TRANSFER:
                self._landed(a, t)
            elif kind == Ev.PREFILL:
                self._prefill_done(a, t)
            elif kind == Ev.TIMEOUT:
                self._timeout(a, t)
            else:
                self._arrive(a, t)
        return self._result()

    # ------------------------------------------------------------------ prefill

    def _arrive(self, rid: int, t: float) -> None:
        if rid + 1 < self.n:
            self.push(self.arrival[rid + 1], Ev.ARRIVAL, rid + 1)
        p = self.prefill_route(self, rid)
        self.p_inst[rid] = p
        self.pq[p].append(rid)
        self.prefill_load[p] += self.prompt[rid]
        if self.p_batch[p] is None:
            self._start_prefill(p, t)

    def _start_prefill(self, p: int, t: float) -> None:
        q, cache, cost = self.pq[p], self.p_cache[p], self.cfg.prefill_cost
        budget = self.cfg.prefill_token_budget
        batch: list[int] = []
        new_sum = 0
        flops = 0.0
        kv_io = 0.0
        ptr, bh, bt = self.ptr, self.bh, self.bt
        while q:
            rid = q[0]
            i0, i1 = ptr[rid], ptr[rid + 1]
            prompt = self.prompt[rid]
            hit = min(cache.match(bh[i0:i1], bt[i0:i1]), prompt - 1) if i1 > i0 else 0
            n_new = prompt - hit
            if batch and new_sum + n_new > budget:
                break
            q.popleft()
            batch.append(rid)
            new_sum += n_new
            self.prefill_hit[rid] = hit
            self.t_prefill_start[rid] = t
            flops += (
                n_new * cost.linear_flops
                + cost.lm_head_flops
                + cost.attn_coef * (n_new * hit + n_new * (n_new + 1) / 2.0)
            )
            kv_io += cost.kv_bpt * prompt
        bytes_ = float(cost.weights_read(new_sum)) + kv_io
        dur = max(flops / cost.flops_rate_prefill, bytes_ / cost.byte_rate) + cost.prefill_overhead
        if t >= self.t_warm:
            self.p_busy[p] += dur
        self.p_batch[p] = batch
        self.push(t + dur, Ev.PREFILL, p)
        if self.rec is not None:
            self.rec.slice(
                "prefill",
                f"prefill {p}",
                f"prefill x{len(batch)}",
                t,
                t + dur,
                {"new_tokens": new_sum, "requests": len(batch)},
            )
            self.rec.counter("prefill", f"prefill {p}", "queued", t, len(q))

    def _prefill_done(self, p: int, t: float) -> None:
        batch = self.p_batch[p]
        self.p_batch[p] = None
        cache = self.p_cache[p]
        ptr, bh, bt = self.ptr, self.bh, self.bt
        for rid in batch:
            self.t_prefill_end[rid] = t
            self.prefill_load[p] -= self.prompt[rid]
            i0, i1 = ptr[rid], ptr[rid + 1]
            if i1 > i0:
                cache.insert(bh[i0:i1], bt[i0:i1])
        for rid in batch:
            d = self.decode_route(self, rid)
            self.d_inst[rid] = d
            self.decode_load[d] += 1
            dec = self.dec[d]
            if dec.waitq and self.cfg.on_full == "wait":
                self._wait(rid, d, t)  # first come, first admitted
            elif not self._admit(rid, d, t):
                self._refuse(rid, d, t)
        if self.pq[p]:
            self._start_prefill(p, t)

    # ------------------------------------------------------------------ admission

    def _admit(self, rid: int, d: int, t: float) -> bool:
        """Reserve KV on decode instance ``d`` and start the hand-off; False if no room."""
        cfg, dec = self.cfg, self.dec[d]
        store, policy = dec.store, self.policy
        i0, i1 = self.ptr[rid], self.ptr[rid + 1]
        chain = self.bh[i0:i1]
        toks = self.bt[i0:i1]
        nhit = store.match(chain) if policy.uses_replicas and chain else 0
        hit_blocks = chain[:nhit]
        hit_tok = sum(toks[:nhit])
        need = self.prompt[rid] + self.output[rid] - hit_tok
        if need > cfg.budget_tokens:
            self._reject(rid, d, t, Reason.TOO_LARGE)
            return True
        free = cfg.budget_tokens - dec.private - store.used
        if free < need:
            refs = store.refs
            idle_hit = sum(store.tokens[h] for h in hit_blocks if refs[h] == 0)
            if free + store.idle - idle_hit < need:
                return False
        store.acquire(hit_blocks)
        if free < need:
            store.trim(need - free)
        persisted: list[int] = []
        ptoks = 0
        if policy.uses_replicas:
            for j in range(nhit, len(chain)):
                h = chain[j]
                if h not in store and policy.persists(h):
                    store.add_pending(h, toks[j])
                    persisted.append(h)
                    ptoks += toks[j]
        private = need - ptoks
        dec.private += private
        self.private[rid] = private
        self.held[rid] = hit_blocks
        self.persisted[rid] = persisted
        self.persist_tok[rid] = ptoks
        self.replica_hit[rid] = hit_tok
        self.t_admit[rid] = t
        self._mem_changed(d, t)

        ho = policy.handoff(self.prompt[rid], self.prefill_hit[rid], hit_tok)
        self.xfer_tok[rid] = ho.transfer_tokens
        self.recompute_tok[rid] = ho.recompute_tokens
        land = t
        nbytes = ho.transfer_tokens * cfg.decode_cost.kv_bpt
        if nbytes > 0:
            chans = self.chan_free[self.p_inst[rid]][d]
            c = min(range(len(chans)), key=chans.__getitem__)
            start = max(t, chans[c])
            occupy = nbytes / cfg.link_bytes_per_s
            chans[c] = start + occupy
            if start >= self.t_warm:
                self.link_busy += occupy
            land = start + occupy + cfg.link_latency_s
            self.t_xfer_start[rid] = start
            if self.rec is not None:
                self.rec.slice(
                    "link",
                    f"p{self.p_inst[rid]}->d{d} ch{c}",
                    "kv",
                    start,
                    start + occupy,
                    {"bytes": nbytes, "request": rid},
                )
        else:
            self.t_xfer_start[rid] = t
        self.push(land, Ev.TRANSFER, rid)
        if ho.recompute_tokens > 0:
            self.rc_pending[rid] = True
            dec.recq.append(rid)
            self._interrupt(d, t)
        return True

    def _refuse(self, rid: int, d: int, t: float) -> None:
        if self.cfg.on_full == "wait":
            self._wait(rid, d, t)
        else:
            self._reject(rid, d, t, Reason.NO_MEMORY)

    def _wait(self, rid: int, d: int, t: float) -> None:
        self.dec[d].waitq.append(rid)
        self.push(t + self.cfg.wait_timeout_s, Ev.TIMEOUT, rid)

    def _timeout(self, rid: int, t: float) -> None:
        if self.outcome[rid] == Outcome.PENDING and math.isnan(self.t_admit[rid]):
            # Leave the wait queue now: a stale entry would make later requests queue behind
            # it although memory is free. Timeouts come in queue order, so it is at the head.
            self.dec[self.d_inst[rid]].waitq.remove(rid)
            self._reject(rid, self.d_inst[rid], t, Reason.TIMEOUT)

    def _reject(self, rid: int, d: int, t: float, reason: Reason) -> None:
        self.outcome[rid] = Outcome.REJECTED
        self.reason[rid] = reason
        self.t_done[rid] = t
        self.decode_load[d] -= 1

    def _drain_waiting(self, d: int, t: float) -> None:
        q = self.dec[d].waitq
        while q:
            rid = q[0]
            if self.outcome[rid] == Outcome.REJECTED:
                q.popleft()
            elif self._admit(rid, d, t):
                q.popleft()
            else:
                break

    # ------------------------------------------------------------------ link and recompute

    def _landed(self, rid: int, t: float) -> None:
        self.t_xfer_end[rid] = t
        d = self.d_inst[rid]
        if self.persisted[rid]:
            self.dec[d].store.mark_ready(self.persisted[rid])
        self.xfer_done[rid] = True
        if not self.rc_pending[rid]:
            self.dec[d].joinq.append(rid)
            self._interrupt(d, t)

    # ------------------------------------------------------------------ decode

    def _interrupt(self, d: int, t: float) -> None:
        """Work arrived for decode instance ``d``: make it stop at the next iteration boundary."""
        dec = self.dec[d]
        if dec.in_stall:
            return  # the end of the recompute stall is a boundary already scheduled
        if dec.b == 0:
            if dec.next_t > t:
                dec.version += 1
                dec.next_t, dec.next_k = t, 0
                dec.t_seg = t
                self.push(t, Ev.DECODE, d, dec.version)
            return
        coeffs = decode_series_coeffs(self.cfg.decode_cost, dec.b, dec.ctx)
        k_max = dec.heap[0][0] - dec.it
        k = min(iterations_within(coeffs, t - dec.t_seg, k_max) + 1, k_max)
        # The rounding of t - t_seg may be off by one boundary; decide in absolute time, the
        # way boundary times are computed: the first boundary strictly after t.
        while k < k_max and dec.t_seg + series_time(coeffs, k) <= t:
            k += 1
        while k > 1 and dec.t_seg + series_time(coeffs, k - 1) > t:
            k -= 1
        tb = dec.t_seg + series_time(coeffs, k)
        if tb < dec.next_t:
            dec.version += 1
            dec.next_t, dec.next_k = tb, k
            self.push(tb, Ev.DECODE, d, dec.version)

    def _decode_boundary(self, d: int, version: int, t: float) -> None:
        dec = self.dec[d]
        if version != dec.version:
            return  # superseded by an earlier boundary
        cfg = self.cfg
        k = dec.next_k
        if (dec.b > 0 or dec.in_stall) and dec.t_seg >= self.t_warm:
            dec.busy += t - dec.t_seg
            self.batch_area += dec.b * (t - dec.t_seg)
        if k > 0 and cfg.track_gaps:
            self._record_gaps(dec, k)
        if k > 0 and self.rec is not None:
            self.rec.segment(
                "decode",
                f"decode {d}",
                dec.t_seg,
                decode_series_coeffs(cfg.decode_cost, dec.b, dec.ctx),
                k,
                dec.b,
            )
        dec.it += k
        dec.ctx += dec.b * k
        dec.t_seg = t
        dec.in_stall = False
        dec.next_t = INF
        freed = False
        heap = dec.heap
        while heap and heap[0][0] == dec.it:
            _, rid = heapq.heappop(heap)
            self._finish(rid, d, t)
            freed = True
        if freed:
            self._mem_changed(d, t)
            self._drain_waiting(d, t)
        if dec.recq:
            self._run_recompute(d, t)
            return
        joined = []
        while dec.joinq and dec.b < cfg.max_batch:
            rid = dec.joinq.popleft()
            dec.b += 1
            dec.ctx += self.prompt[rid]
            heapq.heappush(heap, (dec.it + self.output[rid], rid))
            self.t_decode_start[rid] = t
            joined.append(rid)
        if dec.b == 0:
            return
        coeffs = decode_series_coeffs(cfg.decode_cost, dec.b, dec.ctx)
        if joined:
            first = t + series_time(coeffs, 1)
            for rid in joined:
                self.t_first[rid] = first
                self.last_tok[rid] = t  # so the first iteration's gap is measured from its start
        k_next = heap[0][0] - dec.it
        dec.version += 1
        dec.next_t, dec.next_k = t + series_time(coeffs, k_next), k_next
        self.push(dec.next_t, Ev.DECODE, d, dec.version)

    def _record_gaps(self, dec: _Decode, k: int) -> None:
        """Largest token gap per sequence over ``k`` closed-form iterations from ``dec.t_seg``:
        the first iteration's gap runs from the sequence's previous token (so it includes a
        recompute stall); later gaps are iteration times, largest at the first or last."""
        coeffs = decode_series_coeffs(self.cfg.decode_cost, dec.b, dec.ctx)
        a1, s1, a2, s2, o = coeffs
        worst = max(a1 + s1 * (k - 1), a2 + s2 * (k - 1), a1, a2) + o if k > 1 else 0.0
        t1 = dec.t_seg + series_time(coeffs, 1)
        tk = dec.t_seg + series_time(coeffs, k)
        gaps, last = self.max_gap, self.last_tok
        for _, rid in dec.heap:
            g = t1 - last[rid]
            if self.t_first[rid] == t1:
                g = 0.0  # this iteration emits its first token: no gap yet
            m = g if g > worst else worst
            if m > gaps[rid]:
                gaps[rid] = m
            last[rid] = tk

    def _run_recompute(self, d: int, t: float) -> None:
        """Run every queued prefix recompute back to back; the batch stalls meanwhile."""
        dec, cost = self.dec[d], self.cfg.decode_cost
        end = t
        while dec.recq:
            rid = dec.recq.popleft()
            n = self.recompute_tok[rid]
            flops = n * cost.linear_flops + cost.attn_coef * n * (n + 1) / 2.0
            bytes_ = float(cost.weights_read(n)) + cost.kv_bpt * n
            self.t_rc_start[rid] = end
            end += (
                max(flops / cost.flops_rate_prefill, bytes_ / cost.byte_rate)
                + cost.prefill_overhead
            )
            self.t_rc_end[rid] = end
            self.rc_pending[rid] = False
            if self.xfer_done[rid]:
                dec.joinq.append(rid)
        dec.in_stall = True
        dec.stall_end = end
        if self.rec is not None:
            self.rec.slice("decode", f"decode {d}", "prefix recompute (batch stalled)", t, end)
        dec.version += 1
        dec.next_t, dec.next_k = end, 0
        self.push(end, Ev.DECODE, d, dec.version)

    def _finish(self, rid: int, d: int, t: float) -> None:
        dec = self.dec[d]
        self.t_done[rid] = t
        self.outcome[rid] = Outcome.COMPLETED
        dec.b -= 1
        dec.ctx -= self.prompt[rid] + self.output[rid]
        dec.private -= self.private[rid]
        # One release over the whole chain (held hit, then persisted blocks: chain order) so it
        # goes tail first and the chain's root stays the freshest idle block.
        dec.store.release(self.held[rid] + self.persisted[rid])
        self.decode_load[d] -= 1

    # ------------------------------------------------------------------ accounting

    def _mem_changed(self, d: int, t: float) -> None:
        """Integrate replica and total KV over time (steady window) and track peaks."""
        dec = self.dec[d]
        lo = max(self.mem_t[d], self.t_warm)
        if t > lo:
            self.rep_area += self._last_rep[d] * (t - lo)
            self.used_area += self._last_used[d] * (t - lo)
        self.mem_t[d] = t
        rep = dec.store.used
        used = rep + dec.private
        if self.rec is not None:
            gb = self.cfg.decode_cost.kv_bpt / 1e9
            self.rec.counter("decode", f"decode {d}", "kv_used_gb", t, used * gb)
            self.rec.counter("decode", f"decode {d}", "replica_kv_gb", t, rep * gb)
        self._last_rep[d] = rep
        self._last_used[d] = used
        if rep > self.peak_replica:
            self.peak_replica = rep
        if used > self.peak_used:
            self.peak_used = used
        assert used <= self.cfg.budget_tokens, "decode KV over budget"

    def _result(self) -> SimResult:
        t_end = max(self.now, self.t_warm)
        for d in range(self.cfg.n_decode):
            self._mem_changed(d, t_end)
        f64 = lambda xs: np.asarray(xs, dtype=np.float64)  # noqa: E731
        i64 = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
        cols = {
            "t_prefill_start": f64(self.t_prefill_start),
            "t_prefill_end": f64(self.t_prefill_end),
            "t_admit": f64(self.t_admit),
            "t_transfer_start": f64(self.t_xfer_start),
            "t_transfer_end": f64(self.t_xfer_end),
            "t_recompute_start": f64(self.t_rc_start),
            "t_recompute_end": f64(self.t_rc_end),
            "t_decode_start": f64(self.t_decode_start),
            "t_first_token": f64(self.t_first),
            "t_done": f64(self.t_done),
            "prefill_instance": i64(self.p_inst),
            "decode_instance": i64(self.d_inst),
            "outcome": i64(self.outcome),
            "reject_reason": i64(self.reason),
            "prefill_hit_tokens": i64(self.prefill_hit),
            "replica_hit_tokens": i64(self.replica_hit),
            "recompute_tokens": i64(self.recompute_tok),
            "transfer_tokens": i64(self.xfer_tok),
            "persisted_tokens": i64(self.persist_tok),
        }
        if self.cfg.track_gaps:
            cols["max_token_gap"] = f64(self.max_gap)
        window = max(t_end - self.t_warm, 1e-12)
        cfg = self.cfg
        stats = {
            "t_warm": self.t_warm,
            "t_end": t_end,
            "budget_tokens": float(cfg.budget_tokens),
            "mean_replica_tokens": self.rep_area / window / cfg.n_decode,
            "peak_replica_tokens": float(self.peak_replica),
            "mean_used_tokens": self.used_area / window / cfg.n_decode,
            "peak_used_tokens": float(self.peak_used),
            "prefill_util": sum(self.p_busy) / window / cfg.n_prefill,
            "decode_util": sum(d.busy for d in self.dec) / window / cfg.n_decode,
            "mean_decode_batch": self.batch_area / window / cfg.n_decode,
            "link_util": self.link_busy
            / window
            / (cfg.n_prefill * cfg.n_decode * cfg.link_channels),
        }
        return SimResult(cols, stats)


def simulate(req: Requests, cfg: EngineConfig, recorder=None) -> SimResult:
    """Run one scenario's requests through the system described by ``cfg``.

    The compiled port (engine/fastcore.py, numba) gives bit-identical results about 50x
    faster; ``PREFIXBENCH_ENGINE=python`` selects this readable core, which is also used
    when numba cannot load and for features the port does not have (timelines)."""
    if os.environ.get("PREFIXBENCH_ENGINE", "fast") != "python":
        try:
            from .fastcore import simulate_fast
        except (ImportError, RuntimeError, OSError):  # numba missing or unusable
            pass
        else:
            return simulate_fast(req, cfg, recorder)
    return Simulator(req, cfg, recorder).run()
