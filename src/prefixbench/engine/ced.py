"""A causal encoder-decoder's bounded replay (docs/model.md §2.12).

A CED model's prefill runs only the encoder layers and projects every decoder layer's KV;
the last ``w = min(W, prompt)`` prompt tokens still go through the decoder layers (the
"bounded replay", seed 003 after arXiv:2609.19969 §2.2). Where it runs is a cost field:

* on the prefill instance (``ced_window`` of the prefill cost > 0): the prefill step prices
  the window per prompt (``replay_flops``, ``replay_tokens``);
* on the decode instance (``ced_window`` of the decode cost > 0): a request whose KV is all
  there (transfer landed, its prefix recompute done) first runs a replay job of the last
  ``w`` prompt tokens through the whole model, attending to the whole prompt (``w`` tokens
  after ``s − w`` counted as done), as a chunk in the decode iterations (recompute.py's
  mixed steps); it joins the batch when the job is done. A preempted and resumed sequence
  does not replay again. Replay jobs share no work with other jobs (the window is the
  prompt's own last tokens).
"""

from __future__ import annotations

from . import layout as L
from .jit import jit, sig
from .queues import job_enqueue


@sig("float64(float64[::1], int64, int64)")
def replay_tokens(F, c0, prompt):
    """Tokens of a ``prompt``-token prompt the instance at ``c0`` replays in its prefill."""
    w = F[c0 + L.C_CEDW]
    if w > prompt:
        w = float(prompt)
    return w


@sig("float64(float64[::1], int64, int64)")
def replay_flops(F, c0, prompt):
    """FLOPs of the prefill step's replay window of one prompt: w tokens through the decoder
    layers, attending to the whole prompt (w·(s − w) + w(w + 1)/2 pairs)."""
    w = replay_tokens(F, c0, prompt)
    if w == 0.0:
        return 0.0
    s = float(prompt)
    return w * F[c0 + L.C_CEDL] + F[c0 + L.C_CEDA] * (w * (s - w) + w * (w + 1.0) / 2.0)


@jit
def ready(IS, F, R, rid, d):
    """``rid``'s KV is all on decode ``d``: True if it may join the batch now; else (CED,
    replay on decode, not replayed yet) its replay job is queued and it joins when done."""
    rr = rid * L.NR
    W = F[L.FP_DC + L.C_CEDW]
    if W == 0.0 or R[rr + L.R_FLAGS] & L.F_CED:
        return True
    s = R[rr + L.R_PROMPT]
    w = s
    if W < s:
        w = int(W)
    R[rr + L.R_FLAGS] |= L.F_CED
    R[rr + L.R_RCH] = 0  # (queued during a mixed step's bookkeeping: no chunk in it)
    job_enqueue(IS, R, d, rid, s - w, -1, 0, s)  # shares nothing: the prompt's own tokens
    return False


@jit
def is_replay(R, a):
    """Job ``a`` is a CED replay (other jobs do not deduplicate against it)."""
    return (R[a * L.NR + L.R_FLAGS] & L.F_CED) != 0
