"""How far each policy is from the best possible: a hindsight bound on the hand-off cost.

The objective (docs/model.md "The optimal bound") is the **unloaded hand-off time** of the
measured, admitted requests: for each request, the time its missing KV takes to reach the
decode instance with no queue anywhere, i.e. ``latency + tokens·kv_bytes / link rate`` for
what crosses the link, or, if the decode instance rebuilds ``m`` prefix tokens after ``h``
resident ones, the later of that transfer and the recompute's roofline time. Queueing is
left out on purpose: it depends on every other request's choices, so no per-request
argument bounds it, and a policy that unloads the link can beat any "optimum" priced with
the loaded link. On this objective:

* ``bound`` is a true lower bound for any policy, online or offline: each request is
  priced at the cheapest choice (transfer, recompute, or a local prefill of the whole rest
  on the decode instance) with the longest resident leading run it could possibly have:
  its chain up to the decode KV capacity plus the host-DRAM pool (the host tier's policies
  hold blocks there, and a promotion moves nothing over the link), but only through blocks
  whose KV exists before it, computed by an earlier request (its prompt, or its answer
  when generated tokens are cached) or in the prewarmed hot set. A block's first use pays
  for its computation: nothing can hold a block no request has computed yet. The
  per-request cost never increases with the resident run, so no schedule of the cache
  can do better on any request.
* ``hindsight`` is what an offline policy that knows the future stream achieves: Belady's
  MIN on blocks (prewarmed free with the hot set only; after each request keep the
  blocks whose next use is soonest, up to the capacity) plus the cheapest choice per
  request. It is a feasible schedule of the relaxed model (one pooled cache of the whole
  budget, ready at once; HBM only), so ``bound ≤ optimum ≤ hindsight`` for the policies
  without a host tier (with one, ``hindsight`` is an estimate, not a bound); with equal-size blocks and
  transfer only (a miss costs the same per block) it is the exact optimum (Belady 1966;
  a chain's tail is never needed before its root, so the kept set stays a prefix).
  tests/test_bound.py checks both claims against exhaustive search on small cases.

A policy's share of the achievable reduction is (base − policy) / (base − bound), base =
``transfer_per_request`` (the whole prompt crosses on every request) on the same requests;
100% means it reaches the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from prefixbench.workload.dense import joint_ids
from prefixbench.workload.reuse import leading_runs

INF = math.inf


@dataclass(frozen=True)
class Prices:
    """Unloaded hand-off prices of one decode instance (the engine's formulas)."""

    kv_bpt: float  # KV bytes per token
    link_bps: float  # bytes/s one transfer moves at
    link_lat: float  # s
    cost: object  # the decode instance's costmodel.InstanceCost

    def transfer(self, tokens):
        t = np.asarray(tokens, dtype=np.float64)
        return np.where(t > 0, self.link_lat + t * self.kv_bpt / self.link_bps, 0.0)

    def recompute(self, m, h):
        """Rebuild ``m`` tokens after ``h`` resident ones (engine/costaware.recompute_time)."""
        from prefixbench.physics.costmodel import operator_time, recompute_rates

        c = self.cost
        m = np.asarray(m, dtype=np.float64)
        h = np.asarray(h, dtype=np.float64)
        lin, att = recompute_rates(c)  # a CED model's prompt pass (§2.12)
        kv_h = c.ced_prompt_kv if c.ced_prompt_lin else c.kv_bpt  # what attending h reads
        attn = att * m * (m + 1) / 2.0 + att * m * h
        kv_io = c.kv_bpt * m + kv_h * h
        t = operator_time(c, m * lin, m, c.flops_rate_prefill, attn, kv_io) + c.prefill_overhead
        return np.where(m > 0, t + c.comm_time(m), 0.0)

    def best(self, prompt, ph, h):
        """Cheapest hand-off with ``h`` tokens resident: transfer the rest, recompute the
        prefill-cached part the decode lacks and transfer only what the prefill computed,
        or prefill the whole rest on the decode instance (conditional_disagg's local
        prefill: nothing crosses)."""
        prompt, ph, h = (np.asarray(a, dtype=np.float64) for a in (prompt, ph, h))
        xfer = self.transfer(prompt - h)
        rc = np.maximum(self.transfer(prompt - ph), self.recompute(np.maximum(ph - h, 0), h))
        local = self.recompute(np.maximum(prompt - h, 0), h)
        return np.minimum(np.where(ph > h, np.minimum(xfer, rc), xfer), local)

    def of_choice(self, xfer_tokens, rc_tokens, h):
        """What a run's actual choice costs (its transfer_tokens, recompute_tokens)."""
        x = self.transfer(xfer_tokens)
        return np.where(np.asarray(rc_tokens) > 0, np.maximum(x, self.recompute(rc_tokens, h)), x)


# ---------------------------------------------------------------- the two schedules


def max_resident(ptr, blocks, tokens, capacity: float, warm=(), answers=None) -> np.ndarray:
    """Per request: tokens of its longest leading run of blocks that fits in ``capacity``
    and whose KV exists before it: computed by an earlier request's prompt, or its answer
    when ``answers`` = (ans_ptr, ans_hash) is given, or in the prewarmed hot set ``warm``.
    A block is computed once before anything can hold it, so its first use pays for it.
    One compiled pass over the chains with a byte per block (workload/reuse.py
    ``leading_runs``; was a per-reference array of first requests, the same integers)."""
    if np.asarray(tokens).size == 0:
        return np.zeros(len(ptr) - 1, dtype=np.int64)
    return leading_runs(ptr, blocks, tokens, float(capacity), warm, answers)


def belady_resident(ptr, blocks, tokens, capacity: float, warm=()) -> np.ndarray:
    """Per request: resident leading-run tokens under Belady's MIN, prewarmed free with the
    hot set ``warm`` only (no other block exists before a request computes it).

    Before request i the cache holds what the schedule kept; after it, the cache may keep
    any of its own blocks and the request's chain (all on the decode instance now), and it
    keeps those whose next use is soonest (a deeper block first out on a tie), up to the
    capacity in tokens. Blocks never used again are dropped."""
    ptr = np.asarray(ptr, dtype=np.int64)
    n = len(ptr) - 1
    blocks = np.asarray(blocks, dtype=np.int64)
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    if blocks.size == 0:
        return np.zeros(n, dtype=np.int64)
    warm = np.asarray(warm, dtype=np.int64)
    (ids, w_ids), u = joint_ids(blocks, warm)  # one numbering, without a concatenation
    w_ids = np.unique(w_ids)
    nxt = np.empty(ids.shape[0], dtype=np.int64)  # allocated in Python: see _next_uses
    first = np.full(u, n, dtype=np.int64)
    size = np.zeros(u, dtype=np.int64)
    bdepth = np.zeros(u, dtype=np.int64)
    _next_uses(ptr, ids, tokens, nxt, first, size, bdepth)
    w_ids = w_ids[first[w_ids] < n]  # a warm block no request uses is never held
    pre = w_ids[np.lexsort((bdepth[w_ids], first[w_ids]))]  # free prewarm: used soonest first
    out = np.zeros(n, dtype=np.int64)
    hk = np.empty(blocks.size + pre.size + 1, dtype=np.int64)  # at most one entry a push
    hb = np.empty(blocks.size + pre.size + 1, dtype=np.int64)
    when = np.full(u, -1, dtype=np.int64)  # next use of a cached block, -1: not cached
    cap = float(capacity)
    _belady(ptr, ids, tokens, nxt, first, size, bdepth, pre, cap, n, hk, hb, when, out)
    return out


@njit(cache=True)
def _next_uses(ptr, ids, tokens, nxt, first, size, bdepth):
    """One backward pass over the references: each one's next request using the same block
    (n: never again), and per block its first request, size and depth at that request
    (``first`` comes filled with n, ``size`` and ``bdepth`` with zeros). The caller
    allocates: compiled code that allocates loads numba's array module with its cache
    (``numba.np.arrayobj`` and 12 others, about 0.07 CPU-s of a process's start-up)."""
    n = ptr.shape[0] - 1
    for j in range(ids.shape[0]):  # a block's size: its last reference's (as the numpy pass)
        size[ids[j]] = tokens[j]
    for i in range(n - 1, -1, -1):
        for j in range(ptr[i + 1] - 1, ptr[i] - 1, -1):
            b = ids[j]
            nxt[j] = first[b]
            first[b] = i
            bdepth[b] = j - ptr[i]


@njit(cache=True)
def _push(hk, hb, hn, key, b):
    """Max-heap on ``key`` = next use · D + depth (the farthest next use, deeper on a tie,
    on top), sifting a hole up: the same arrangement as swapping pairwise."""
    i = hn
    while i > 0:
        p = (i - 1) // 2
        if hk[p] >= key:
            break
        hk[i], hb[i] = hk[p], hb[p]
        i = p
    hk[i], hb[i] = key, b
    return hn + 1


@njit(cache=True)
def _pop(hk, hb, hn):
    hn -= 1
    key, b = hk[hn], hb[hn]
    i = 0
    while True:
        a, best, top = 2 * i + 1, i, key
        if a < hn and hk[a] > top:
            best, top = a, hk[a]
        if a + 1 < hn and hk[a + 1] > top:
            best = a + 1
        if best == i:
            break
        hk[i], hb[i] = hk[best], hb[best]
        i = best
    hk[i], hb[i] = key, b
    return hn


@njit(cache=True)
def _belady(ptr, ids, tokens, nxt, first, size, bdepth, pre, cap, n, hk, hb, when, out):
    """Belady's MIN over the requests; the heap keeps stale entries (lazy deletion).
    ``when`` (one per block, filled with -1) is each cached block's next use."""
    D = 1  # keys pack (next use, depth) as next use · D + depth, depth < D
    for i in range(n):
        D = max(D, ptr[i + 1] - ptr[i])
    for k in range(pre.shape[0]):
        D = max(D, bdepth[pre[k]] + 1)
    used = 0
    hn = 0
    for k in range(pre.shape[0]):
        b = pre[k]
        when[b] = first[b]
        used += size[b]
        hn = _push(hk, hb, hn, first[b] * D + bdepth[b], b)
    never = n * D  # keys from here up: a next use of n, never again
    for i in range(-1, n):
        if i >= 0:
            h = 0
            for j in range(ptr[i], ptr[i + 1]):
                if when[ids[j]] < 0:
                    break
                h += tokens[j]
            out[i] = h
            for j in range(ptr[i], ptr[i + 1]):
                b = ids[j]
                if when[b] < 0:
                    used += size[b]
                when[b] = nxt[j]
                hn = _push(hk, hb, hn, nxt[j] * D + (j - ptr[i]), b)
        while hn > 0 and (used > cap or hk[0] >= never):
            w, b = hk[0] // D, hb[0]
            hn = _pop(hk, hb, hn)
            if when[b] == w:
                when[b] = -1
                used -= size[b]


# ---------------------------------------------------------------- per run


_PER_PREP: dict[str, tuple[object, object]] = {}


def _once_per_prep(name: str, prep, compute):
    """``compute()``, kept for the last prepared scenario asked under ``name`` (a study runs
    its policies on one prepared workload together, so each is computed once for them)."""
    hit = _PER_PREP.get(name)
    if hit is not None and hit[0] is prep:
        return hit[1]
    value = compute()
    _PER_PREP[name] = (prep, value)
    return value


def _resident(prep) -> tuple[np.ndarray, np.ndarray | None]:
    """(bound's, hindsight's) resident tokens per request of a prepared scenario (once;
    hindsight's None when skipped)."""
    return _once_per_prep("resident", prep, lambda: _resident_of(prep))


def _resident_of(prep) -> tuple[np.ndarray, np.ndarray | None]:
    req, b = prep.requests, prep.base
    cap = float(b.budget_tokens) * b.n_decode
    # the bound may hold the host-DRAM pool too (replicate_tiered and cost_aware keep one,
    # and a promoted block costs them no link time), so that no policy can beat it
    cap_all = cap + float(b.host_kv_tokens) * b.n_decode
    warm = [h for h, _ in b.hot_blocks]  # replicate_hotset's set, resident from the start
    ans = getattr(req, "ans_ptr", None)  # generated-token caching: answers count as computed
    answers = None if ans is None else (ans, req.ans_hash)
    from prefixbench.system.runner import hindsight_on

    hind = None  # skipped above run.hindsight_max_requests (docs/model.md "The optimal bound")
    if hindsight_on(prep.scenario, len(req)):
        hind = belady_resident(req.blk_ptr, req.blk_hash, req.blk_tokens, cap, warm)
    return max_resident(req.blk_ptr, req.blk_hash, req.blk_tokens, cap_all, warm, answers), hind


def prices(prep) -> Prices:
    from prefixbench.engine.api import link_rate

    b = prep.base
    return Prices(b.decode_cost.kv_bpt, link_rate(b), b.link_latency_s, b.decode_cost)


COLUMNS = (
    "handoff_ms",
    "handoff_base_ms",
    "handoff_hindsight_ms",
    "handoff_bound_ms",
    "bound_share",
)


GAP_CHUNK = 1 << 18  # requests priced at a time: the temporaries of a few MB, not the run's


def masked_mean(mask: np.ndarray, price, chunk: int = GAP_CHUNK) -> float:
    """The mean of ``price(rows)`` over the rows ``mask`` selects (``rows``: their indices,
    ascending): priced ``chunk`` rows of the run at a time into one buffer of the selected
    rows, whose mean is then numpy's over the same values in the same order as one
    full-length pricing (element-wise arithmetic does not depend on the slice), so the
    figure is the same to the bit with a few MB of temporaries instead of a dozen
    full-length arrays."""
    out = np.empty(int(np.count_nonzero(mask)))
    at = 0
    for lo in range(0, mask.shape[0], chunk):
        rows = lo + np.flatnonzero(mask[lo : lo + chunk])
        out[at : at + rows.size] = price(rows)
        at += rows.size
    return float(out.mean())


PRICE_ROWS = 1 << 18  # runs up to this long keep their request-only prices per workload


@dataclass
class _Fixed:
    """A prepared workload's request-only hand-off prices, full length, computed once for
    all its policies: the base's transfer of the whole prompt, and for each resident run
    ``h`` (bound's, hindsight's) the transfer of the rest, the local prefill and their
    minimum (``Prices.best`` where the prefill holds no more than ``h``)."""

    base: np.ndarray
    best: dict  # name -> (xfer, local, min(xfer, local), h)


def _fixed(prep, pr: Prices, hs: dict) -> _Fixed:
    return _once_per_prep("fixed", prep, lambda: _fixed_of(prep, pr, hs))


def _fixed_of(prep, pr: Prices, hs: dict) -> _Fixed:
    prompt = np.asarray(prep.requests.prompt_len, dtype=np.float64)
    best = {}
    for name, h in hs.items():
        h = np.asarray(h, dtype=np.float64)
        xfer = pr.transfer(prompt - h)
        local = pr.recompute(np.maximum(prompt - h, 0), h)
        best[name] = (xfer, local, np.minimum(xfer, local), h)
    return _Fixed(pr.transfer(prompt), best)


def _best_at(pr: Prices, fx: tuple, prompt, ph, rows: np.ndarray) -> np.ndarray:
    """``pr.best(prompt[rows], ph[rows], h[rows])`` from the fixed prices: only the rows
    whose prefill holds more than ``h`` price the recompute (the same element-wise
    arithmetic on the same values, so the same bits)."""
    xfer, local, floor, h = fx
    out = floor[rows]
    p, f, hh = (np.asarray(a[rows], dtype=np.float64) for a in (prompt, ph, h))
    more = f > hh
    if more.any():
        r = rows[more]
        p, f, hh = p[more], f[more], hh[more]
        rc = np.maximum(pr.transfer(p - f), pr.recompute(np.maximum(f - hh, 0), hh))
        out[more] = np.minimum(np.minimum(xfer[r], rc), local[r])
    return out


def _gap_fast(prep, pr: Prices, cols: dict, measured: np.ndarray, lb_h, bel_h) -> dict:
    """gap_columns' four means for a run short enough to keep its workload's request-only
    prices (``PRICE_ROWS``): each the mean numpy takes of the measured rows' prices in
    request order, as ``masked_mean`` has them."""
    hs = {"bound": lb_h} if bel_h is None else {"bound": lb_h, "hindsight": bel_h}
    fx = _fixed(prep, pr, hs)
    rows = np.flatnonzero(measured)
    prompt, ph = prep.requests.prompt_len, np.asarray(cols["prefill_hit_tokens"])
    xt, rc = np.asarray(cols["transfer_tokens"])[rows], np.asarray(cols["recompute_tokens"])[rows]
    rh = np.asarray(cols["replica_hit_tokens"])[rows]
    ms = lambda x: float(x.mean()) * 1e3  # noqa: E731
    return {
        "handoff_ms": ms(pr.of_choice(xt, rc, rh)),
        "handoff_base_ms": ms(fx.base[rows]),
        "handoff_hindsight_ms": None
        if bel_h is None
        else ms(_best_at(pr, fx.best["hindsight"], prompt, ph, rows)),
        "handoff_bound_ms": ms(_best_at(pr, fx.best["bound"], prompt, ph, rows)),
    }


def gap_columns(prep, cols: dict, measured: np.ndarray) -> dict:
    """The run's unloaded hand-off figures over its measured admitted requests (``measured``:
    a boolean mask) and its share of the achievable reduction (None when nothing can be
    gained or the run has no hand-off)."""
    none = dict.fromkeys(COLUMNS)
    if prep.scenario.cluster.mode == "colocated" or not measured.any():
        return none
    req, pr = prep.requests, prices(prep)
    lb_h, bel_h = _resident(prep)
    if len(req) <= PRICE_ROWS:
        out = _gap_fast(prep, pr, cols, measured, lb_h, bel_h)
    else:
        out = _gap_chunked(pr, req, cols, measured, lb_h, bel_h)
    room = out["handoff_base_ms"] - out["handoff_bound_ms"]
    share = (
        (out["handoff_base_ms"] - out["handoff_ms"]) / room
        if room > 1e-9 * out["handoff_base_ms"]
        else None
    )
    out["bound_share"] = share
    return out


def _gap_chunked(pr: Prices, req, cols: dict, measured: np.ndarray, lb_h, bel_h) -> dict:
    """gap_columns' four means priced ``GAP_CHUNK`` rows at a time (a long run)."""
    prompt, ph = req.prompt_len, np.asarray(cols["prefill_hit_tokens"])
    xt, rc = np.asarray(cols["transfer_tokens"]), np.asarray(cols["recompute_tokens"])
    rh = np.asarray(cols["replica_hit_tokens"])
    mean = lambda price: masked_mean(measured, price) * 1e3  # noqa: E731
    return {
        "handoff_ms": mean(lambda r: pr.of_choice(xt[r], rc[r], rh[r])),
        "handoff_base_ms": mean(lambda r: pr.transfer(prompt[r])),
        "handoff_hindsight_ms": None
        if bel_h is None
        else mean(lambda r: pr.best(prompt[r], ph[r], bel_h[r])),
        "handoff_bound_ms": mean(lambda r: pr.best(prompt[r], ph[r], lb_h[r])),
    }
