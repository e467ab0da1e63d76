"""Coupled (colocated) serving: every instance runs both prefill and decode.

Two schedulers, on the same total instance count as the disaggregated system:

- ``prefill_priority`` (vLLM v0 style): at each iteration boundary, waiting prompts are
  prefilled first, whole, up to the step token budget; every running sequence stalls
  for the whole prefill step. The prefill step emits each prompt's first token.
- ``chunked`` (Sarathi-Serve style): each step carries one decode token per running
  sequence plus prefill chunks of waiting prompts filling the rest of a per-step token
  budget; a prompt emits its first token at the end of the step finishing its last chunk.

When no prompt is waiting, the batch is advanced in closed form exactly as in the
disaggregated decode instance. There is no hand-off, so the prefix policies do not apply:
each instance keeps its own prefix cache (prefill work skipped on hits) and every request
reserves its own KV (docs/model.md, "Colocated mode").
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..costmodel import InstanceCost, decode_series_coeffs, iterations_within, series_time
from ..workload.requests import Requests
from .cache import BlockLRU
from .core import Outcome, Reason, SimResult

INF = math.inf
EV_STEP, EV_TIMEOUT, EV_ARRIVAL = 0, 1, 2


@dataclass
class ColocatedConfig:
    cost: InstanceCost
    instances: int
    scheduler: str = "prefill_priority"  # or "chunked"
    step_token_budget: int = (
        8192  # prefill tokens per step (prefill_priority) or all tokens (chunked)
    )
    max_batch: int = 64
    budget_tokens: int = 10**9
    prefix_cache_tokens: int = 10**9
    on_full: str = "reject"
    wait_timeout_s: float = 2.0
    warmup_requests: int = 0


class _Inst:
    __slots__ = (
        "waiting",
        "b",
        "ctx",
        "it",
        "t_seg",
        "heap",
        "next_t",
        "next_k",
        "version",
        "stepping",
        "used",
        "cache",
        "busy",
        "partial",
    )

    def __init__(self, cache_tokens: int) -> None:
        self.waiting: deque[int] = deque()
        self.b = 0
        self.ctx = 0
        self.it = 0
        self.t_seg = 0.0
        self.heap: list[tuple[int, int]] = []
        self.next_t = INF
        self.next_k = 0
        self.version = 0
        self.stepping = False  # a prefill or mixed step is running (its end is a boundary)
        self.used = 0
        self.cache = BlockLRU(cache_tokens)
        self.busy = 0.0
        self.partial: dict[int, int] = {}  # chunked: rid -> prompt tokens prefilled so far


class ColocatedSimulator:
    def __init__(self, req: Requests, cfg: ColocatedConfig, recorder=None) -> None:
        self.cfg = cfg
        self.rec = recorder
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
        self.t_first = [nan] * n
        self.t_done = [nan] * n
        self.t_admit = [nan] * n
        self.inst_of = [-1] * n
        self.outcome = [0] * n
        self.reason = [0] * n
        self.hit = [0] * n
        self.reserved = [0] * n
        self.max_gap = [0.0] * n
        self.last_tok = [nan] * n
        self.inst = [_Inst(cfg.prefix_cache_tokens) for _ in range(cfg.instances)]
        self.load = [0] * cfg.instances
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        warm = min(cfg.warmup_requests, n - 1) if n else 0
        self.t_warm = self.arrival[warm] if n else 0.0
        self.batch_area = 0.0
        self.peak_used = 0

    def push(self, t, kind, a, b=0):
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    def run(self) -> SimResult:
        if self.n:
            self.push(self.arrival[0], EV_ARRIVAL, 0)
        while self.events:
            t, kind, _, a, b = heapq.heappop(self.events)
            self.now = t
            if kind == EV_STEP:
                self._boundary(a, b, t)
            elif kind == EV_TIMEOUT:
                self._timeout(a, t)
            else:
                self._arrive(a, t)
        return self._result()

    # ------------------------------------------------------------------ arrivals

    def _arrive(self, rid: int, t: float) -> None:
        if rid + 1 < self.n:
            self.push(self.arrival[rid + 1], EV_ARRIVAL, rid + 1)
        i = min(range(self.cfg.instances), key=lambda j: (self.load[j], j))
        self.inst_of[rid] = i
        self.load[i] += 1
        self.inst[i].waiting.append(rid)
        if self.cfg.on_full == "wait":
            self.push(t + self.cfg.wait_timeout_s, EV_TIMEOUT, rid)
        self._interrupt(i, t)

    def _timeout(self, rid: int, t: float) -> None:
        if self.outcome[rid] == Outcome.PENDING and math.isnan(self.t_admit[rid]):
            self._reject(rid, t, Reason.TIMEOUT)

    def _reject(self, rid: int, t: float, reason: Reason) -> None:
        self.outcome[rid] = Outcome.REJECTED
        self.reason[rid] = reason
        self.t_done[rid] = t
        self.load[self.inst_of[rid]] -= 1

    def _interrupt(self, i: int, t: float) -> None:
        inst = self.inst[i]
        if inst.stepping:
            return
        if inst.b == 0:
            if inst.next_t > t:
                inst.version += 1
                inst.next_t, inst.next_k, inst.t_seg = t, 0, t
                self.push(t, EV_STEP, i, inst.version)
            return
        coeffs = decode_series_coeffs(self.cfg.cost, inst.b, inst.ctx)
        k_max = inst.heap[0][0] - inst.it
        k = min(iterations_within(coeffs, t - inst.t_seg, k_max) + 1, k_max)
        while k < k_max and inst.t_seg + series_time(coeffs, k) <= t:
            k += 1
        tb = inst.t_seg + series_time(coeffs, k)
        if tb < inst.next_t:
            inst.version += 1
            inst.next_t, inst.next_k = tb, k
            self.push(tb, EV_STEP, i, inst.version)

    # ------------------------------------------------------------------ admission

    def _admit_head(self, i: int, t: float) -> int | None:
        """The waiting head if its KV fits (reserved now), skipping rejected ones; else None."""
        inst, cfg = self.inst[i], self.cfg
        while inst.waiting:
            rid = inst.waiting[0]
            if self.outcome[rid] == Outcome.REJECTED:
                inst.waiting.popleft()
                continue
            if not math.isnan(self.t_admit[rid]):
                return rid  # chunked: already admitted, prefill in progress
            need = self.prompt[rid] + self.output[rid]
            if need > cfg.budget_tokens:
                inst.waiting.popleft()
                self._reject(rid, t, Reason.TOO_LARGE)
                continue
            if inst.used + need > cfg.budget_tokens:
                if cfg.on_full == "reject":
                    inst.waiting.popleft()
                    self._reject(rid, t, Reason.NO_MEMORY)
                    continue
                return None  # wait at the head until memory frees (or the timeout)
            self._reserve(rid, i, t, need)
            return rid
        return None

    def _reserve(self, rid: int, i: int, t: float, need: int) -> None:
        """Admit ``rid``: reserve its KV and look its prompt up in the prefix cache."""
        inst = self.inst[i]
        inst.used += need
        self.reserved[rid] = need
        self.t_admit[rid] = t
        self.peak_used = max(self.peak_used, inst.used)
        i0, i1 = self.ptr[rid], self.ptr[rid + 1]
        hit = (
            min(inst.cache.match(self.bh[i0:i1], self.bt[i0:i1]), self.prompt[rid] - 1)
            if i1 > i0
            else 0
        )
        self.hit[rid] = hit
        inst.partial[rid] = hit

    # ------------------------------------------------------------------ steps

    def _boundary(self, i: int, version: int, t: float) -> None:
        inst = self.inst[i]
        if version != inst.version:
            return
        cfg = self.cfg
        k = inst.next_k
        if (inst.b > 0 or inst.stepping) and inst.t_seg >= self.t_warm:
            inst.busy += t - inst.t_seg
            self.batch_area += inst.b * (t - inst.t_seg)
        if k > 0:
            self._gaps_closed_form(inst, k)
            if self.rec is not None:
                self.rec.segment(
                    "colocated",
                    f"instance {i}",
                    inst.t_seg,
                    decode_series_coeffs(cfg.cost, inst.b, inst.ctx),
                    k,
                    inst.b,
                )
        inst.it += k
        inst.ctx += inst.b * k
        inst.t_seg = t
        inst.stepping = False
        inst.next_t = INF
        while inst.heap and inst.heap[0][0] == inst.it:
            _, rid = heapq.heappop(inst.heap)
            self._finish(rid, i, t)
        step = (
            self._prefill_step(i, t)
            if cfg.scheduler == "prefill_priority"
            else self._chunked_step(i, t)
        )
        if step is not None:
            dur = step
            inst.stepping = True
            inst.version += 1
            inst.next_t, inst.next_k = t + dur, 0
            self.push(t + dur, EV_STEP, i, inst.version)
            return
        if inst.b == 0:
            return
        coeffs = decode_series_coeffs(cfg.cost, inst.b, inst.ctx)
        k_next = inst.heap[0][0] - inst.it
        inst.version += 1
        inst.next_t, inst.next_k = t + series_time(coeffs, k_next), k_next
        self.push(inst.next_t, EV_STEP, i, inst.version)

    def _gaps_closed_form(self, inst: _Inst, k: int) -> None:
        """Token gaps of k closed-form iterations: each running sequence emits a token per
        iteration; the largest gap of the series is its first or last iteration."""
        a1, s1, a2, s2, o = decode_series_coeffs(self.cfg.cost, inst.b, inst.ctx)
        worst = max(max(a1, a2), max(a1 + s1 * (k - 1), a2 + s2 * (k - 1))) + o
        t_first_it = inst.t_seg + series_time((a1, s1, a2, s2, o), 1)
        for _, rid in inst.heap:
            # the first iteration's gap runs from this sequence's previous token
            g = t_first_it - self.last_tok[rid]
            m = max(worst if k > 1 else 0.0, g)
            if m > self.max_gap[rid]:
                self.max_gap[rid] = m
            self.last_tok[rid] = inst.t_seg + series_time((a1, s1, a2, s2, o), k)

    def _step_time(self, flops: float, bytes_: float, prefill: bool) -> float:
        c = self.cfg.cost
        rate = c.flops_rate_prefill if prefill else c.flops_rate_decode
        over = c.prefill_overhead if prefill else c.decode_overhead
        return max(flops / rate, bytes_ / c.byte_rate) + over

    def _prefill_step(self, i: int, t: float) -> float | None:
        """vLLM-v0: prefill waiting prompts (whole) before the next decode iteration."""
        inst, cfg, c = self.inst[i], self.cfg, self.cfg.cost
        batch, new_sum, flops, kv_io = [], 0, 0.0, 0.0
        while inst.b + len(batch) < cfg.max_batch:
            rid = self._admit_head(i, t)
            if rid is None:
                break
            n_new = self.prompt[rid] - self.hit[rid]
            if batch and new_sum + n_new > cfg.step_token_budget:
                break
            inst.waiting.popleft()
            batch.append(rid)
            new_sum += n_new
            hit = self.hit[rid]
            flops += (
                n_new * c.linear_flops
                + c.lm_head_flops
                + c.attn_coef * (n_new * hit + n_new * (n_new + 1) / 2.0)
            )
            kv_io += c.kv_bpt * self.prompt[rid]
        if not batch:
            return None
        dur = self._step_time(flops, float(c.weights_read(new_sum)) + kv_io, True)
        end = t + dur
        for _, rid in inst.heap:  # running sequences stall for the whole prefill step
            g = end - self.last_tok[rid]
            if g > self.max_gap[rid]:
                self.max_gap[rid] = g
        for rid in batch:
            self.t_prefill_start[rid] = t
            self._prefilled(rid, i, end)
        if self.rec is not None:
            self.rec.slice(
                "colocated",
                f"instance {i}",
                f"prefill x{len(batch)} (decodes stalled)",
                t,
                end,
                {"tokens": new_sum},
            )
        return dur

    def _chunked_step(self, i: int, t: float) -> float | None:
        """Sarathi: one decode token per running sequence plus prefill chunks in the budget."""
        inst, cfg, c = self.inst[i], self.cfg, self.cfg.cost
        room = cfg.step_token_budget - inst.b
        chunks: list[tuple[int, int]] = []
        pos = 0
        flops = inst.b * (c.linear_flops + c.lm_head_flops) + c.attn_coef * inst.ctx
        kv_io = c.kv_bpt * inst.ctx
        while room > 0 and inst.b + len(chunks) < cfg.max_batch and pos < len(inst.waiting):
            if pos == 0:
                rid = self._admit_head(i, t)
                if rid is None:
                    break
            else:
                rid = inst.waiting[pos]
                if self.outcome[rid] == Outcome.REJECTED:
                    pos += 1
                    continue
                if math.isnan(self.t_admit[rid]):
                    # admit further prompts in FIFO order, stopping at the first that does not fit
                    need = self.prompt[rid] + self.output[rid]
                    if need > cfg.budget_tokens or inst.used + need > cfg.budget_tokens:
                        break
                    self._reserve(rid, i, t, need)
            done = inst.partial[rid]
            n = min(room, self.prompt[rid] - done)
            chunks.append((rid, n))
            if math.isnan(self.t_prefill_start[rid]):
                self.t_prefill_start[rid] = t
            flops += n * c.linear_flops + c.attn_coef * (n * done + n * (n + 1) / 2.0)
            kv_io += c.kv_bpt * (done + n)
            room -= n
            pos += 1
        if not chunks and inst.b == 0:
            return None
        if not chunks:
            return None  # plain decode: the closed form handles it
        finishing = [rid for rid, n in chunks if inst.partial[rid] + n == self.prompt[rid]]
        flops += len(finishing) * c.lm_head_flops
        dur = self._step_time(
            flops, float(c.weights_read(inst.b + sum(n for _, n in chunks))) + kv_io, False
        )
        end = t + dur
        # running sequences emit one token in this step
        for _, rid in inst.heap:
            g = end - self.last_tok[rid]
            if g > self.max_gap[rid]:
                self.max_gap[rid] = g
            self.last_tok[rid] = end
        inst.it += 1  # the step is one decode iteration for the running batch
        inst.ctx += inst.b
        for rid, n in chunks:
            inst.partial[rid] += n
        for rid in finishing:
            inst.waiting.remove(rid)
            self._prefilled(rid, i, end)
        if self.rec is not None:
            self.rec.slice(
                "colocated",
                f"instance {i}",
                f"mixed step b={inst.b} +{sum(n for _, n in chunks)} prefill",
                t,
                end,
                {},
            )
        return dur

    def _prefilled(self, rid: int, i: int, end: float) -> None:
        """Prompt done at ``end``: first token emitted; join the batch for the rest."""
        inst = self.inst[i]
        inst.partial.pop(rid, None)
        self.t_prefill_end[rid] = end
        self.t_first[rid] = end
        self.last_tok[rid] = end
        i0, i1 = self.ptr[rid], self.ptr[rid + 1]
        if i1 > i0:
            inst.cache.insert(self.bh[i0:i1], self.bt[i0:i1])
        if self.output[rid] == 1:
            self._finish(rid, i, end, joined=False)
            return
        inst.b += 1
        inst.ctx += self.prompt[rid] + 1
        # the boundary at ``end`` advances by next_k = 0, so ``it`` is already current
        heapq.heappush(inst.heap, (inst.it + self.output[rid] - 1, rid))

    def _finish(self, rid: int, i: int, t: float, joined: bool = True) -> None:
        inst = self.inst[i]
        self.t_done[rid] = t
        self.outcome[rid] = Outcome.COMPLETED
        if joined:
            inst.b -= 1
            inst.ctx -= self.prompt[rid] + self.output[rid]
        inst.used -= self.reserved[rid]
        self.load[i] -= 1

    def _result(self) -> SimResult:
        n = self.n
        t_end = max(self.now, self.t_warm)
        window = max(t_end - self.t_warm, 1e-12)
        f64 = lambda xs: np.asarray(xs, dtype=np.float64)  # noqa: E731
        nan = np.full(n, np.nan)
        zeros = np.zeros(n, dtype=np.int64)
        cols = {
            "t_prefill_start": f64(self.t_prefill_start),
            "t_prefill_end": f64(self.t_prefill_end),
            "t_admit": f64(self.t_admit),
            "t_transfer_start": f64(self.t_prefill_end),
            "t_transfer_end": f64(self.t_prefill_end),
            "t_recompute_start": nan,
            "t_recompute_end": nan,
            "t_decode_start": f64(self.t_prefill_end),
            "t_first_token": f64(self.t_first),
            "t_done": f64(self.t_done),
            "prefill_instance": np.asarray(self.inst_of, dtype=np.int64),
            "decode_instance": np.asarray(self.inst_of, dtype=np.int64),
            "outcome": np.asarray(self.outcome, dtype=np.int64),
            "reject_reason": np.asarray(self.reason, dtype=np.int64),
            "prefill_hit_tokens": np.asarray(self.hit, dtype=np.int64),
            "replica_hit_tokens": zeros,
            "recompute_tokens": zeros,
            "transfer_tokens": zeros,
            "persisted_tokens": zeros,
            "max_token_gap": f64(self.max_gap),
        }
        cfg = self.cfg
        stats = {
            "t_warm": self.t_warm,
            "t_end": t_end,
            "budget_tokens": float(cfg.budget_tokens),
            "mean_replica_tokens": 0.0,
            "peak_replica_tokens": 0.0,
            "mean_used_tokens": math.nan,
            "peak_used_tokens": float(self.peak_used),
            "prefill_util": sum(x.busy for x in self.inst) / window / cfg.instances,
            "decode_util": sum(x.busy for x in self.inst) / window / cfg.instances,
            "mean_decode_batch": self.batch_area / window / cfg.instances,
            "link_util": 0.0,
        }
        return SimResult(cols, stats)
