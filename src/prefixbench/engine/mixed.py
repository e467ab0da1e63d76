"""The price of a mixed decode iteration: the running batch's decode tokens plus recompute
chunks in one step (docs/model.md §1.9, §2.13). One pricing for every caller: the run
(recompute.mixed_step) and the cost-aware estimate that walks those iterations
(costaware.recompute_time).

With speculative decoding the real iteration follows vLLM V1's scheduler: each running
sequence's γ draft tokens plus its one token (g = γ + 1 to verify) are scheduled first out
of the same token budget as the prefill chunks, which take what is left. The engine's
fluid iteration is ``1/τ`` of a real one (every sequence emits one token), so per engine
iteration the chunks take ``c = ⌊(budget − b·g) / τ⌋`` tokens (the real iteration carries
``τ·c``) and everything the real iteration does once (the verify pass, its weight and KV
reads, the draft steps, the overheads, the fabric) counts ``1/τ``, while each chunk's own
FLOPs are its ``c`` tokens' (the causal attention of a job's ``m`` tokens sums to
``m(m+1)/2`` however it is chunked, so the job's FLOPs are exact) and its KV: the
``c`` tokens written, the ``done`` prefix read once per real iteration (``done/τ``).
Without a batch (``b = 0``) nothing speculates: a plain chunk step. With speculation off
(g = τ = 1, draft terms 0) every operation is today's, in today's order: bit-identical.
"""

from __future__ import annotations

import math

import numpy as np

from . import layout as L
from .jit import jit
from .series import comm, op_time, weights_read_tokens

# τ comes from a closed form here and may differ from another computation of it in the last
# bit: a quotient within this of an integer counts as that integer (so 68 / 1.7 is 40)
ROOM_EPS = 1e-9


@jit
def spec_of(F, nb):
    """(g, τ) of an iteration over ``nb`` sequences: the verified tokens per sequence and
    the expected tokens per sequence; (1, 1) without a batch."""
    if nb == 0:
        return 1.0, 1.0
    return F[L.FP_DC + L.C_SG], F[L.FP_DC + L.C_STAU]


@jit
def chunk_room(IS, F, nb):
    """Recompute tokens one engine iteration beside ``nb`` sequences may carry:
    ⌊(budget − nb·g) / τ⌋ (the budget less the batch without speculation)."""
    g, tau = spec_of(F, nb)
    if tau == 1.0 and g == 1.0:
        return IS[L.IP_RCHUNK] - nb
    return np.int64(math.floor((IS[L.IP_RCHUNK] - nb * int(g)) / tau + ROOM_EPS))


@jit
def mixed_open(F, nb, ctx):
    """(GEMM FLOPs, attention FLOPs, KV bytes) of the batch's part of an engine iteration:
    its verify pass over nb·g tokens attending to ``ctx``, over τ."""
    c0 = L.FP_DC
    g, tau = spec_of(F, nb)
    gemm = (nb * g * (F[c0 + L.C_LF] + F[c0 + L.C_LMH])) / tau
    return gemm, (F[c0 + L.C_ATT] * g * ctx) / tau, (F[c0 + L.C_KV] * ctx) / tau


@jit
def chunk_add(F, nb, gemm, attn, kv_io, m, done, prompt):
    """(GEMM FLOPs, attention FLOPs, KV bytes) after adding a chunk of ``m`` tokens after ``done`` computed ones:
    its own FLOPs (no logits), its KV written and its prefix read once per real iteration.
    ``prompt``: a recomputed prefix, which for a CED model is its prompt pass (the encoder
    and the decoder's K/V projections, attending over the encoder layers' KV, §2.12); a
    replay chunk runs the whole model."""
    c0 = L.FP_DC
    tau = spec_of(F, nb)[1]
    if prompt and F[c0 + L.C_CEDPL] > 0.0:
        att = F[c0 + L.C_CEDPA]
        gemm += m * F[c0 + L.C_CEDPL]
        attn += att * (m * done + m * (m + 1) / 2.0)
        kv_io += F[c0 + L.C_CEDPK] * done / tau + F[c0 + L.C_KV] * m
        return gemm, attn, kv_io
    att = F[c0 + L.C_ATT]
    gemm += m * F[c0 + L.C_LF]
    attn += att * (m * done + m * (m + 1) / 2.0)
    kv_io += F[c0 + L.C_KV] * (done / tau + m)
    return gemm, attn, kv_io


@jit
def mixed_close(F, nb, ctx, chunks, gemm, attn, kv_io):
    """(Duration, FLOPs, bytes) of the engine iteration: the operators (GEMMs at the real
    iteration's nb·g + τ·chunks tokens, attention) over the verify pass and the chunks,
    the draft steps (memory-bound: weights and KV at their bandwidths), the overheads of the g passes and the
    fabric of the real iteration's nb·g + τ·chunks tokens, all but the chunks' work over
    τ; the FLOPs and bytes returned include the draft's (for MFU, MBU and energy)."""
    c0 = L.FP_DC
    g, tau = spec_of(F, nb)
    br = F[c0 + L.C_BR]
    real = nb * g + tau * chunks
    wbytes = weights_read_tokens(F, c0, nb * g + tau * chunks) / tau
    bytes_ = wbytes + kv_io
    flops = gemm + attn
    dur = op_time(F, c0, gemm, real, F[c0 + L.C_FRD], wbytes, attn, kv_io)
    dur += F[c0 + L.C_DOV] * g / tau
    dw, dkv, df, da = 0.0, 0.0, 0.0, 0.0
    if nb > 0:
        dw, dkv, df, da = F[c0 + L.C_SDW], F[c0 + L.C_SDKV], F[c0 + L.C_SDF], F[c0 + L.C_SDA]
    dur += (dw / br + dkv * ctx / F[c0 + L.C_KR]) / tau
    dur += comm(F, c0, real) / tau
    work_f = flops + (nb * df + da * ctx) / tau
    work_b = bytes_ + (dw + dkv * ctx) / tau
    return dur, work_f, work_b
