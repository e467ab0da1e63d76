"""The shared L3 store under the decode tiers (docs/model.md §1.13.1, "The shared L3 store").

Mooncake Store, LMCache's remote backend and HiCache's L3 (3FS, Mooncake) as SGLang's
decode HiCache uses them: one store for the cluster, reached over the network. The decode
node writes a finished request's blocks to it, its chain and then its answer
(``l3_write_run``, SGLang's decode offload at finish): a block it later evicts from HBM and
the host tier is there already. Decode admission: once the HBM run and the host run are
matched, the store continues the leading run (the *L3 run*); those blocks are read from it
instead of crossing the prefill→decode link. Prefill: the store continues the prefix
cache's run, and the step computes only past it, once the read has landed. Every read and write queues FCFS on the
store's one queue (``FP_L3_*``: its bandwidth, the link's latency, pipelined), as the NICs
do. The store is LRU over its capacity in tokens; a block is stored once (a write of a
stored block refreshes it and moves nothing), a read refreshes it too.

On only under ``replicate_tiered`` with ``IP_L3CAP`` > 0; otherwise nothing here runs.
Records: block ``h`` at ``IS[H_L3] + 4·h`` in ``B32`` (tokens, LRU prev, LRU next, present).
"""

from __future__ import annotations

from . import layout as L
from .hosttier import leading_present
from .jit import jit
from .queues import lru_append, lru_unlink
from .window import clipped


@jit
def l3_match(IS, B32, bid, i0, i1):
    """Leading blocks of ``bid[i0:i1]`` present in the store."""
    return leading_present(B32, IS[L.H_L3], bid, i0, i1)


@jit
def l3_move(IS, F, t, nbytes):
    """Queue ``nbytes`` on the store at ``t`` (FCFS, reads and writes alike); returns when
    they land (the link's latency after the move, pipelined)."""
    start = t if F[L.FP_L3_FREE] <= t else F[L.FP_L3_FREE]
    occupy = nbytes / F[L.FP_L3_BPS]
    F[L.FP_L3_FREE] = start + occupy
    F[L.FP_L3_BUSY] += clipped(F, start, start + occupy)
    if start >= F[L.FP_TWARM]:
        F[L.FP_L3_BYTES] += nbytes
    return start + occupy + F[L.FP_LINK_LAT]


@jit
def _touch(IS, B32, h):
    base = IS[L.H_L3]
    lru_unlink(B32, IS, L.GI_L3LRUH, base, L.HT_PREV, L.HT_NEXT, h)
    lru_append(B32, IS, L.GI_L3LRUH, base, L.HT_PREV, L.HT_NEXT, h)


@jit
def _drop(IS, B32, h):
    base = IS[L.H_L3]
    lru_unlink(B32, IS, L.GI_L3LRUH, base, L.HT_PREV, L.HT_NEXT, h)
    B32[base + 4 * h + L.HT_IN] = 0
    IS[L.GI_L3USED] -= B32[base + 4 * h + L.HT_TOK]


@jit
def l3_put(IS, F, B32, h, tokens, t):
    """The decode node writes block ``h`` at ``t``: a stored block is refreshed; a new one
    becomes the freshest (LRU blocks dropped over capacity) and its copy queues on the
    store. A block larger than the whole store is not written."""
    if IS[L.IP_L3CAP] <= 0:
        return
    base = IS[L.H_L3]
    if B32[base + 4 * h + L.HT_IN]:
        _touch(IS, B32, h)
        return
    cap = IS[L.IP_L3CAP]
    if tokens > cap:
        return
    B32[base + 4 * h + L.HT_IN] = 1
    B32[base + 4 * h + L.HT_TOK] = tokens
    lru_append(B32, IS, L.GI_L3LRUH, base, L.HT_PREV, L.HT_NEXT, h)
    IS[L.GI_L3USED] += tokens
    while IS[L.GI_L3USED] > cap:
        _drop(IS, B32, IS[L.GI_L3LRUH])
    if IS[L.GI_L3USED] > IS[L.GI_L3PEAK]:
        IS[L.GI_L3PEAK] = IS[L.GI_L3USED]
    l3_move(IS, F, t, tokens * F[L.FP_DC + L.C_KV])


@jit
def l3_read(IS, F, B32, bid, i0, i1, t):
    """Read the L3 run ``bid[i0:i1]`` at ``t`` (each block refreshed, root first); returns
    when it lands on the decode instance."""
    base = IS[L.H_L3]
    tok = 0
    for j in range(i0, i1):
        tok += B32[base + 4 * bid[j] + L.HT_TOK]
        _touch(IS, B32, bid[j])
    return l3_move(IS, F, t, tok * F[L.FP_DC + L.C_KV])


@jit
def l3_write_run(IS, F, B32, bid, bt, a0, a1, t):
    """A finished request's blocks ``bid[a0:a1]`` (its chain, then its answer) are written
    to the store at ``t``, root first, as SGLang's decode offload writes a finished
    request's KV (``decode_kvcache_offload_manager.offload_kv_cache``)."""
    if IS[L.IP_L3CAP] <= 0:
        return
    for j in range(a0, a1):
        l3_put(IS, F, B32, bid[j], bt[j], t)


@jit
def _past_run(bt, i0, i1, hit):
    """The first chain block past the leading ``hit`` tokens (whole blocks)."""
    j, cum = i0, 0
    while j < i1 and cum + bt[j] <= hit:
        cum += bt[j]
        j += 1
    return j


@jit
def l3_prefill_tokens(IS, B32, bid, bt, i0, i1, hit, prompt):
    """Prompt tokens the prefill node reads from the store: the store's leading run from
    the first block past its prefix cache's ``hit``, at most ``prompt − 1 − hit`` (the
    last prompt token is always computed). 0 without a store or with layer-wise streaming
    (whose hand-off starts with the step)."""
    if IS[L.IP_L3CAP] <= 0 or IS[L.IP_STREAM] or i1 <= i0:
        return 0
    j = _past_run(bt, i0, i1, hit)
    k = l3_match(IS, B32, bid, j, i1)
    tok = 0
    for m in range(j, j + k):
        tok += bt[m]
    room = prompt - 1 - hit
    return tok if tok < room else room


@jit
def l3_prefill_read(IS, F, B32, bid, bt, i0, i1, hit, tokens, t):
    """The prefill node reads ``tokens`` past its ``hit`` from the store at ``t`` (each
    block of the run refreshed, root first); returns when they land."""
    j = _past_run(bt, i0, i1, hit)
    base = IS[L.H_L3]
    cum = 0
    while j < i1 and cum < tokens and B32[base + 4 * bid[j] + L.HT_IN]:
        _touch(IS, B32, bid[j])
        cum += bt[j]
        j += 1
    return l3_move(IS, F, t, tokens * F[L.FP_PC + L.C_KV])
