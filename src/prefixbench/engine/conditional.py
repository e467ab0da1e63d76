"""``conditional_disagg``: conditional disaggregation as NVIDIA Dynamo decides it
(docs/model.md "Conditional disaggregation").

At arrival the decode router picks the request's decode instance first (in Dynamo the decode
worker receives the request and decides). That instance prefills the request itself when
the part it lacks is short or the part it holds is large:

    local  ⇔  prompt − hit ≤ max_local_prefill_tokens  or  hit > local_hit_ratio · prompt

with ``hit`` the leading run of the request's blocks resident and ready there. Dynamo's
rule is ai-dynamo/dynamo lib/llm/src/disagg_router.rs (``prefill_remote``: remote when
``prefill_length − prefix_hit_length > max_local_prefill_length``); the hit-ratio arm and
both defaults (1000 tokens, 0.5) are its examples/python_rs/llm/vllm_nixl/router/
disagg_router.py (``max_local_prefill_length``, ``max_remote_prefill_cache_hit_ratio``).

A local prefill is a chunked-prefill job in the decode instance's iterations (the
recompute jobs of engine/recompute.py, attending to the ``hit`` resident tokens): nothing
crosses the link and the prefill instances never see the request. A remote request is
``replicate_all_lru``: the prefill instance computes it, the part the decode instance
lacks crosses the link, and every block a request brings stays resident (trimmed LRU).
"""

from __future__ import annotations

from . import layout as L
from .blocks import decode_hit
from .jit import jit


@jit
def prefills_locally(IS, F, R, B8, bid, bt, rid, d):
    """Dynamo's rule: whether ``rid`` prefills on decode instance ``d``."""
    prompt = R[rid * L.NR + L.R_PROMPT]
    _, hit = decode_hit(IS, B8, bid, bt, rid, d)
    if prompt - hit <= IS[L.IP_LOCMAX]:
        return True
    return hit > F[L.FP_LOCHIT] * prompt
