"""Building blocks for engine tests: cached instance costs and Requests from plain lists."""

from __future__ import annotations

import numpy as np

from prefixbench import catalog
from prefixbench.physics.costmodel import Efficiency, InstanceCost
from prefixbench.workload.requests import Requests

_COSTS: dict[tuple, InstanceCost] = {}


def instance_cost(model: str, acc: str, devices: int, eff: tuple[float, ...]) -> InstanceCost:
    key = (model, acc, devices, eff)
    if key not in _COSTS:
        e = Efficiency(
            mfu_prefill=eff[0],
            mfu_decode=eff[1],
            mbu=eff[2],
            prefill_overhead_ms=eff[3],
            decode_overhead_ms=eff[4],
        )
        _COSTS[key] = InstanceCost.build(
            catalog.get_model(model), catalog.get_accelerator(acc), devices, e
        )
    return _COSTS[key]


def make_requests(arrival, prompt, output, chains, answers=None) -> Requests:
    """Requests from per-request lists; ``chains[i]`` is a list of (hash, tokens), root first;
    ``answers[i]`` (optional) the full blocks its output fills, likewise."""
    ptr = np.concatenate(([0], np.cumsum([len(c) for c in chains]))).astype(np.int64)
    flat = [b for c in chains for b in c]
    ans = {}
    if answers is not None:
        aflat = [b for a in answers for b in a]
        ans = {
            "ans_ptr": np.concatenate(([0], np.cumsum([len(a) for a in answers]))).astype(
                np.int64
            ),
            "ans_hash": np.asarray([h for h, _ in aflat], dtype=np.int64),
            "ans_tokens": np.asarray([t for _, t in aflat], dtype=np.int64),
        }
    req = Requests(
        arrival=np.asarray(arrival, dtype=np.float64),
        prompt_len=np.asarray(prompt, dtype=np.int64),
        output_len=np.asarray(output, dtype=np.int64),
        blk_ptr=ptr,
        blk_hash=np.asarray([h for h, _ in flat], dtype=np.int64),
        blk_tokens=np.asarray([t for _, t in flat], dtype=np.int64),
        prefix_id=np.asarray([c[-1][0] if c else -1 for c in chains], dtype=np.int64),
        **ans,
    )
    req.validate()
    return req
