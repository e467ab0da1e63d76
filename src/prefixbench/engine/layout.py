"""The engine's state: a few flat arrays, and the offset of every field in them.

numba compiles the event loop only over arrays, and its compile time grows with the number
of array arguments, so the whole state lives in five arrays (plus the event heap and the
timeline log, which grow on demand):

* ``IS`` int64: parameters, run scalars, the offsets of the sections below, one record of
  ``NDI`` fields per decode (or colocated) instance, ``NPI`` per prefill instance, the
  decode batch heaps, a join scratch area, the requests' block pointers and the integer
  result columns (row ``r`` of request ``rid`` at ``IS[IS[H_O] + r·n + rid]``);
* ``F`` float64: parameters (link, timeout, warm-up time, both instances' cost
  coefficients), run scalars, ``NDF`` fields per decode instance, prefill busy time, link
  channel free times, NIC group free and busy times, and the per-request time columns;
* ``R`` int32: one record of ``NR`` fields per request (queue links, lengths, flags);
* ``B32`` int32: one 4-field record per block id and instance (replica store of each decode
  instance, prefix cache of each prefill instance, then, under replicate_tiered only, each
  decode instance's host tier);
* ``B8`` uint8: replica state bits per block and decode instance, the per-block-reference
  "persisted" flag and the hot-set membership.

The offset convention (one place; docs/design.md repeats it): every field is a named
constant and a record is its section's base plus the record index times the record width.
Decode instance ``d``: ``b = DI0 + d * NDI``, field ``IS[b + D_x]``; prefill instance
``p``: ``IS[IS[H_PI] + p * NPI + P_x]``; decode floats: ``F[DF0 + d * NDF + DF_x]``;
request ``rid``: ``R[rid * NR + R_x]``; integer result column ``O_x``:
``IS[IS[H_O] + O_x * IS[IP_N] + rid]``. Sections sized by the run store their base in
``IS`` (the ``H_*`` slots); fixed ones (``DI0``, ``DF0``) are constants. A new field is one
more name at the end of its section's ``range(...)`` and a larger width.

A colocated instance is a prefill and a decode sharing one device: it uses decode instance
``i``'s record (batch, waiting queue, reserved KV) and prefill instance ``i``'s prefix cache.
The result columns are views into ``IS`` and ``F``: nothing is copied at the end.
"""

from __future__ import annotations

import math
from enum import IntEnum

import numpy as np

INF = math.inf


class Ev(IntEnum):
    """Event kinds, in the order they run when times are equal (then by insertion order)."""

    DECODE = 0  # a decode (or colocated) instance reaches a boundary it scheduled
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


class Mode(IntEnum):
    DISAGGREGATED = 0
    PREFILL_PRIORITY = 1  # colocated, vLLM-v0 style: whole prefills stall the batch
    CHUNKED = 2  # colocated, Sarathi-Serve style: mixed steps under a token budget


class Rec(IntEnum):
    """Timeline record kinds (see timeline.py)."""

    PREFILL = 0  # a prefill step: track p, a = requests, b = new tokens
    LINK = 1  # a KV transfer: track (p·D + d)·C + c, a = request, b = bytes
    DECODE = 2  # k closed-form iterations: track d, a = batch, b = k, c = context tokens
    STALL = 3  # decode mixed iteration with recompute chunks: track d, a = batch, b = chunk tokens
    KV = 4  # counter: track d, a = KV tokens used, b = replica tokens
    QUEUE = 5  # counter: track p, a = queued requests
    CO_PREFILL = 6  # colocated prefill step (decodes stalled): a = requests, b = tokens
    CO_MIXED = 7  # colocated mixed step: a = running batch, b = prefill tokens


EV_DECODE, EV_TRANSFER, EV_PREFILL, EV_TIMEOUT, EV_ARRIVAL = (int(e) for e in Ev)
OUT_PENDING, OUT_COMPLETED, OUT_REJECTED = 0, 1, 2
R_NONE, R_NO_MEMORY, R_TIMEOUT, R_TOO_LARGE = 0, 1, 2, 3
MODE_DISAGG, MODE_PRIORITY, MODE_CHUNKED = 0, 1, 2
REC_PREFILL, REC_LINK, REC_DECODE, REC_STALL, REC_KV, REC_QUEUE = 0, 1, 2, 3, 4, 5
REC_CO_PREFILL, REC_CO_MIXED = 6, 7
KIND_SHIFT = 56  # an event's heap key is kind << KIND_SHIFT | insertion number
POL_TRANSFER, POL_RECOMPUTE, POL_HOTSET, POL_ALL_LRU = 0, 1, 2, 3
POL_TIERED = 4  # --- tiered: all-LRU over HBM plus a host-DRAM tier
# --- policy
POL_COST_AWARE = 5  # uses replicas (codes >= POL_HOTSET do); engine/costaware.py
POL_COND = 6  # --- conditional: all-LRU replicas, short or well-hit prompts prefilled locally


def has_host_tier(policy) -> bool:
    """The policies with a host-DRAM tier under decode HBM (hosttier.py)."""
    return policy == POL_TIERED or policy == POL_COST_AWARE

NTL_F, NTL_I = 2, 5  # timeline record: floats (t0, t1), ints (kind, track, a, b, c)

# ---------------------------------------------------------------- IS (int64)
# parameters given by the caller
(
    IP_NP,
    IP_ND,
    IP_NC,
    IP_MAXB,
    IP_TOKB,
    IP_PCAP,
    IP_BUDGET,
    IP_WAIT,
    IP_POLICY,
    IP_PROUTE,
    IP_DROUTE,
    IP_GAPS,
    IP_MODE,
    IP_REC,
) = range(14)
NIP = 14
IP_N, IP_U = 14, 15  # requests, block ids
GI_PEAK_REP, GI_PEAK_USED, GI_RR_P, GI_RR_D, GI_SEQ, GI_HSZ, GI_INSYS, GI_TLN = range(16, 24)
H_PI, H_DH, H_CAPB, H_JN, H_PTR, H_O, H_FPB, H_FCH, H_FT, H_PC, H_PFLAG, H_HOT = range(24, 36)
# NIC groups (docs/model.md "NICs"): offset of the F section (egress free time per prefill
# instance, ingress free time per decode instance, then their busy times), and whether the
# link is shared NIC groups (1) or private per-pair channels (0)
H_FNIC, IP_SHARED = 36, 37
# --- stream: KV streaming mode (0 after_prefill, 1 layerwise), the model's
# layers, the decode instance's per-iteration token budget for recompute chunks, and a flag
# set while a prefill step's hand-offs defer their layer-wise transfers (streaming.py)
IP_STREAM, IP_LAYERS, IP_RCHUNK, GI_DEFER = 38, 39, 40, 41
# --- paged: admission mode (0 reserve, 1 paged), block size in tokens, preemption
# mode (0 recompute, 1 swap), the F section of per-request preemption times, the admission
# sequence counter (preemption picks the most recently admitted running sequence)
IP_PAGED, IP_BS, IP_SWAP, H_PGF, GI_ASEQ = 42, 43, 44, 45, 46
# --- conditional: conditional_disagg's largest uncached prompt prefilled on the decode
# instance (tokens; docs/model.md "Conditional disaggregation")
IP_LOCMAX = 47
# --- tiered: the host tier's write policy (hosttier.py): 0 write_back, 1 write_through,
# 2 write_through_selective (SGLang --hicache-write-policy)
IP_HWP = 48
# --- l3: the shared L3 store (l3store.py; replicate_tiered only, 0 = off): capacity in
# tokens, tokens stored, its LRU head/tail, its peak, the offset of its block records in B32
IP_L3CAP, GI_L3USED, GI_L3LRUH, GI_L3LRUT, GI_L3PEAK, H_L3 = range(49, 55)
# --- admit: host memory left for swapped-out KV per decode instance (tokens; paged swap
# falls back to recompute when it is full), SGLang's reserved decode tokens per admitted
# request (paged admission gate; 0 = off)
IP_SWAPCAP, IP_RDT = 55, 56
# --- admit: prefill KV held until the decode pull completes (vLLM NIXL delay_free_blocks;
# 1 on, 0 off), counted against the prefill instance's KV pool (its prefix cache)
IP_HOLD = 57
# --- admit: cost_aware may prefill on the decode instance (1) or never (0; costlocal.py)
IP_CALOC = 58
DI0 = 59
# decode instance fields (queue head/tail pairs adjacent)
(
    D_B,  # sequences in the batch
    D_CTX,  # tokens the next iteration attends to, summed over the batch
    D_IT,  # iterations done since the start of the run
    D_STALL,  # a recompute stall (or a colocated step) is running; its end is a boundary
    D_NK,  # iterations the scheduled boundary advances by
    D_VER,  # version of the scheduled boundary (older ones are stale)
    D_PRIV,  # KV tokens reserved by admitted requests, replicas excluded
    D_JQH,
    D_JQT,  # join queue: ready requests waiting for a batch slot
    D_RQH,
    D_RQT,  # prefix recompute jobs waiting to run
    D_WQH,
    D_WQT,  # requests waiting for admission (colocated: every waiting prompt)
    D_USED,  # replica tokens resident
    D_IDLE,  # of which idle (refcount 0), trimmable
    D_LRUH,
    D_LRUT,  # idle replica blocks, least recently used first
    D_LOAD,  # admitted-and-unfinished requests (routing)
    D_HSZ,  # sequences in the batch heap
    D_LREP,
    D_LUSED,  # replica and total KV since the last memory change (time integrals)
) = range(21)
# --- tiered: the host-DRAM tier under this instance's HBM (hosttier.py)
D_HUSED, D_HCAP, D_HLRUH, D_HLRUT, D_HPEAK, D_LHUSED = range(21, 27)
# --- paged: preempted sequences waiting to resume (ahead of the admission
# queue); resumed sequences whose re-prefill is due (paging.run_reprefills, linked by R_RQN)
D_PQH, D_PQT, D_FQH, D_FQT = range(27, 31)
# --- kv routing: prompt + output tokens of the admitted, unfinished requests (kvroute.py)
D_ACT = 31
# --- admit: swapped-out KV tokens held in host memory; admitted, unfinished requests
# (preempted ones included: the reserved-decode-tokens gate)
D_SWAPU, D_ADM = 32, 33
# --- paged: an iteration index through which every running sequence holds its blocks
# (paging.alloc_through sets it; a sequence joining the batch makes it unknown, -1)
D_ALLOC = 34
NDI = 35
P_LOAD, P_QH, P_QT, P_BH, P_USED, P_LRUH, P_LRUT, P_QN = range(8)
# --- admit: prompt tokens held until their pull completes; a release may restart a step
P_HELD, P_KICK = 8, 9
NPI = 10
# integer result columns
O_PI, O_DI, O_OUT, O_REA, O_PH, O_RH, O_RC, O_XT, O_PT = range(9)
O_HBMB, O_HOSTB, O_LINKB, O_HOSTT = range(9, 13)  # --- tiered
O_NPRE, O_PTOK = 13, 14  # --- paged: preemptions, tokens re-prefilled or swapped
O_L3B, O_L3P = 15, 16  # --- l3: chain blocks decode read from the store, prompt tokens
# the prefill step read from it
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
    # --- tiered: chain blocks served from decode HBM, promoted from the host
    # tier, sent over the link; tokens promoted
    "hbm_hit_blocks",
    "host_hit_blocks",
    "link_blocks",
    "host_hit_tokens",
    # --- paged
    "preemptions",
    "preempt_tokens",
    # --- l3
    "l3_hit_blocks",
    "l3_prefill_tokens",
)
NIC = len(INT_COLUMNS)

# ---------------------------------------------------------------- R (int32), per request
# private KV tokens (colocated: reserved), held replica blocks (colocated: prompt tokens
# prefilled so far), flags, queue links, prompt and output lengths, colocated chunk size
(
    R_PRIV,
    R_NHIT,
    R_FLAGS,
    R_PQN,
    R_PBN,
    R_JQN,
    R_RQN,
    R_WQN,
    R_WQP,
    R_PROMPT,
    R_OUTPUT,
    R_CHUNK,
) = range(12)
# --- stream: a recompute job (recompute.py): prefix tokens done, the job it
# waits on for its shared leading tokens (-1: none), those shared tokens, its total tokens,
# its chunk in the step being built
R_RDONE, R_RDEP, R_RSH, R_RTOT, R_RCH = 12, 13, 14, 15, 16
F_RC, F_XD, F_PERS = 1, 2, 4  # recompute pending, KV landed, has persisted blocks
F_STREAM = 8  # stream: layer-wise transfer deferred to the step's joint pass
# --- paged: iteration at which generated token 0 would have run (the sequence's
# g-th token is iteration R_J0 + g), own prompt tokens (prompt - replica hit), tokens
# generated when preempted, admission sequence number, resume queue link, its persisted
# tokens it holds as replicas
R_J0, R_OWN0, R_GEN, R_ASEQ, R_PGN, R_PTH = range(17, 23)
NR = 23
F_PRE, F_REPF = 16, 32  # --- paged: preempted (until it rejoins), its re-prefill is queued
F_CED = 64  # --- ced: its replay job is queued or done (engine/ced.py)
F_SOLO = 128  # --- paged: preempted while running alone: it resumes without shared blocks
F_LOCAL = 256  # --- conditional: prefilled on its decode instance (engine/conditional.py)
F_SWAPD = 512  # --- admit: preempted by swap (its KV in host memory), not by recompute
F_HELD = 1024  # --- admit: its prompt KV is held on its prefill instance until pulled

# ---------------------------------------------------------------- F (float64)
FP_LINK_BPS, FP_LINK_LAT, FP_WAIT_TO, FP_TWARM = range(4)
C_FRP, C_FRD, C_BR, C_POV, C_DOV, C_LF, C_LMH, C_ATT, C_KV, C_W, C_EW, C_EF = range(12)
C_CPT, C_CFX = 12, 13  # TP/PP/EP fabric time: per step token, per step (docs/model.md §2.8)
COST_FIELDS = (
    "flops_rate_prefill",
    "flops_rate_decode",
    "byte_rate",
    "prefill_overhead",
    "decode_overhead",
    "linear_flops",
    "lm_head_flops",
    "attn_coef",
    "kv_bpt",
    "weights",
    "expert_weights",
    "expert_frac",
    "comm_per_token",
    "comm_fixed",
    # --- power: appended
    "clock",
    "j_per_flop",
    "j_per_byte",
    "idle_w",
    "dvfs",
    "volt_floor",
    # --- speculative decoding: appended
    "spec_tokens",
    "spec_tau",
    "draft_weights",
    "draft_kv_bpt",
    "draft_flops",
    "draft_attn",
    # --- ced: appended
    "ced_window",
    "ced_lin",
    "ced_attn",
    "ced_comm",
    "ced_prompt_lin",
    "ced_prompt_attn",
    "ced_prompt_kv",
    # --- per-operator roofline: appended
    "attn_rate",
    "kv_rate",
    "gemm_half",
)
C_CLK, C_JF, C_JB, C_IDLE, C_DVFS, C_VF = range(14, 20)  # --- power
C_SG, C_STAU, C_SDW, C_SDKV, C_SDF, C_SDA = range(20, 26)  # --- speculative
C_CEDW, C_CEDL, C_CEDA, C_CEDC = range(26, 30)  # --- ced: engine/ced.py
C_CEDPL, C_CEDPA, C_CEDPK = range(30, 33)  # --- ced: a recomputed prefix's prompt pass
C_AR, C_KR, C_GH = range(33, 36)  # attention FLOP/s, KV bytes/s, GEMM half tokens
NCF = len(COST_FIELDS)
FP_PC = 4  # prefill InstanceCost fields
FP_DC = FP_PC + NCF  # decode InstanceCost fields (colocated: the instance's cost)
NFP = FP_DC + NCF
G_NOW, G_LINK, G_REP_AREA, G_USED_AREA, G_BATCH_AREA = range(NFP, NFP + 5)
# pooled inter-token gaps of measured requests (request index >= G_ITL_NW): exact sum,
# count, min and max, and a histogram of ITL_NB log-spaced bins, ITL_BPD per decade from
# 10**ITL_LOG10_LO s (bin i: [10**(lo + i/BPD), 10**(lo + (i+1)/BPD)); the end bins also
# hold what falls outside)
G_ITL_NW, G_ITL_SUM, G_ITL_CNT, G_ITL_MIN, G_ITL_MAX = range(NFP + 5, NFP + 10)
ITL_LOG10_LO, ITL_BPD, ITL_NB = -7.0, 400, 4800
G_ITL_H = NFP + 10
# --- paged: the end of the steady window (the last arrival; inf: measure to the
# end of the drain): busy times, work and memory integrals count steps started in
# [FP_TWARM, FP_TSTEADY), clipped (the host path is tiered's, per instance: DF_HP_*)
FP_TSTEADY = G_ITL_H + ITL_NB
# --- conditional: the decode hit share above which conditional_disagg prefills locally;
# --- kv routing: the KV-aware routers' overlap weight (routing.py)
FP_LOCHIT, FP_KVW = FP_TSTEADY + 1, FP_TSTEADY + 2
# --- l3: the shared L3 store's FCFS queue (l3store.py): free time, busy time in the
# steady window, bytes moved after warm-up, its rate (bytes/s)
FP_L3_FREE, FP_L3_BUSY, FP_L3_BYTES, FP_L3_BPS = range(FP_TSTEADY + 3, FP_TSTEADY + 7)
# the decode series coefficients last computed (series.coeffs): their batch and context,
# then (a1, s1, a2, s2, overhead); a pure function of those two and the cost constants,
# so a repeated call returns the same bits without the divisions (batch -1: none yet)
G_CO_B, G_CO_C, G_CO_A1, G_CO_S1, G_CO_A2, G_CO_S2, G_CO_O = range(FP_TSTEADY + 7, FP_TSTEADY + 14)
DF0 = G_ITL_H + ITL_NB + 14
DF_TSEG, DF_STALL_END, DF_NEXT_T, DF_BUSY, DF_MEM_T = range(5)
DF_FLOPS, DF_BYTES = 5, 6  # FLOPs and bytes of the steps started in the measured window
# --- tiered: the host<->GPU path's FCFS queue (hostpath.py): free time, busy
# time and bytes moved in the window, its rate (bytes/s) and latency; host KV token-seconds
DF_HP_FREE, DF_HP_BUSY, DF_HP_BYTES, DF_HP_BPS, DF_HP_LAT, DF_HAREA = range(7, 13)
NDF = 13
# after the link channels' free times: FLOPs and bytes of each prefill instance's steps
# started in the measured window, at F[IS[H_FCH] + P·D·C + 2·p] and the next one
# --- power: NPW floats per instance at the very end of F (engine/power.py):
# dynamic joules, seconds the cap slowed, highest step-average power
PW_J, PW_CAPPED, PW_PEAK = range(3)
NPW = 3
# per-request time rows: the 10 result columns, arrival, then (with gaps) gap and last token
T_PS, T_PE, T_AD, T_XS, T_XE, T_RS, T_RE, T_DS, T_FT, T_DN, T_ARR, T_GAP, T_LAST = range(13)
# replicate_tiered only: when the request's promoted host blocks land (-inf: none), so that
# a layer-wise stream lands no earlier (streaming._land)
T_PROMO = 13

# ---------------------------------------------------------------- B32 / B8, per block id
# Replica store of decode d at 4·U·d + 4·h: tokens, refs, LRU prev, LRU next.
# Prefix cache of prefill p at IS[H_PC] + 4·U·p + 4·h: tokens, LRU prev, LRU next, present.
RS_TOK, RS_REF, RS_PREV, RS_NEXT = range(4)
PC_TOK, PC_PREV, PC_NEXT, PC_IN = range(4)
ST_IN, ST_READY, ST_INACT = 1, 2, 4  # replica state bits of decode d at B8[U·d + h]
ST_BACKED = 8  # tiered: its host copy was written (write-through): a trim needs no copy
ST_ACTIVE_MASK = 0xFF ^ ST_INACT  # clears ST_INACT in a uint8 (~ST_INACT is negative)
# --- tiered: host tier of decode d at 4·U·(D + P) + 4·U·d + 4·h: tokens, LRU
# prev, LRU next, present
HT_TOK, HT_PREV, HT_NEXT, HT_IN = range(4)
# --- l3: the shared L3 store at IS[H_L3] + 4·h (after the host tiers): tokens, LRU prev,
# LRU next, present (the host tier's record layout)


def allocate(
    prompt: np.ndarray,
    output: np.ndarray,
    arrival: np.ndarray,
    blk_ptr: np.ndarray,
    ans_ptr: np.ndarray,
    n_refs: int,
    n_ids: int,
    ip: np.ndarray,
    fp: np.ndarray,
    hot_ids: np.ndarray,
):
    """Allocate and initialise the flat state for ``len(prompt)`` requests. ``ans_ptr``
    (n + 1 offsets into the block ids, after the chains) bounds each request's answer
    blocks; it sits right after ``blk_ptr`` (``ans_base``)."""
    n, nb = prompt.shape[0], n_refs
    P, D, C = int(ip[IP_NP]), int(ip[IP_ND]), int(ip[IP_NC])
    U = n_ids
    capb = min(int(ip[IP_MAXB]), n) + 1
    o_pi = DI0 + D * NDI
    o_dh = o_pi + P * NPI
    o_jn = o_dh + 2 * capb * D
    o_ptr = o_jn + capb
    o_out = o_ptr + 2 * (n + 1)  # chains' then answers' offsets
    IS = np.zeros(o_out + NIC * n, dtype=np.int64)
    IS[:NIP] = ip
    IS[IP_N], IS[IP_U] = n, U
    IS[H_PI], IS[H_DH], IS[H_CAPB] = o_pi, o_dh, capb
    IS[H_JN], IS[H_PTR], IS[H_O] = o_jn, o_ptr, o_out
    dI = IS[DI0:o_pi].reshape(D, NDI)
    dI[:, [D_JQH, D_JQT, D_RQH, D_RQT, D_WQH, D_WQT, D_LRUH, D_LRUT]] = -1
    dI[:, [D_HLRUH, D_HLRUT]] = -1
    dI[:, [D_PQH, D_PQT, D_FQH, D_FQT]] = -1
    IS[GI_L3LRUH], IS[GI_L3LRUT] = -1, -1
    IS[o_pi:o_dh].reshape(P, NPI)[:, [P_QH, P_QT, P_BH, P_LRUH, P_LRUT]] = -1
    IS[o_ptr : o_ptr + n + 1] = blk_ptr
    IS[o_ptr + n + 1 : o_out] = ans_ptr

    R = np.zeros(n * NR, dtype=np.int32)
    R[R_PROMPT::NR] = prompt
    R[R_OUTPUT::NR] = output

    f_pb = DF0 + D * NDF
    f_ch = f_pb + P
    # + FLOPs and bytes per prefill instance (prefill_work), then the NIC groups' clocks
    f_nic = f_ch + P * D * C + 2 * P
    f_t = f_nic + 2 * (P + D)
    rows = T_LAST + 1 if ip[IP_GAPS] else T_ARR + 1
    if has_host_tier(ip[IP_POLICY]):
        rows = T_PROMO + 1
    f_pg = f_t + rows * n  # paged: per-request preemption delay (s), then preempted-at time
    # (costaware.tail right after these, then the power records last: power.py)
    F = np.zeros(f_pg + 2 * n + NPW * (P + D))
    F[:NFP] = fp
    F[G_ITL_MIN], F[G_ITL_MAX] = INF, -INF
    F[G_CO_B] = -1.0
    dF = F[DF0:f_pb].reshape(D, NDF)
    dF[:, DF_STALL_END] = -INF
    dF[:, DF_NEXT_T] = INF
    F[f_t : f_t + T_ARR * n] = np.nan
    F[f_t + T_ARR * n : f_t + (T_ARR + 1) * n] = arrival
    if ip[IP_GAPS]:
        F[f_t + T_LAST * n : f_t + (T_LAST + 1) * n] = np.nan
    if has_host_tier(ip[IP_POLICY]):
        F[f_t + T_PROMO * n : f_t + (T_PROMO + 1) * n] = -INF
    IS[H_FPB], IS[H_FCH], IS[H_FT] = f_pb, f_ch, f_t
    IS[H_FNIC] = f_nic
    IS[H_PGF] = f_pg

    host = D if has_host_tier(ip[IP_POLICY]) else 0  # + the host tiers
    B32 = np.zeros(4 * (D + P + host) * U, dtype=np.int32)
    B8 = np.zeros(D * U + nb + U, dtype=np.uint8)
    IS[H_PC], IS[H_PFLAG], IS[H_HOT] = 4 * D * U, D * U, D * U + nb
    B8[D * U + nb + hot_ids] = 1
    return IS, F, R, B32, B8
