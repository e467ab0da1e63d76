"""Statistics computed straight from raw trace files with the standard library only.

Independent of ``prefixbench.workload.traces`` on purpose: validation tests compare the
simulator against these numbers, so they must not share its parsing code.

Import from a test module as ``from tracestats import infinite_cache_hit_ratio`` (``tests``
is not a package; pytest's default import mode puts this directory on ``sys.path``).
"""

from __future__ import annotations

import json
from os import PathLike


def infinite_cache_hit_ratio(path: str | PathLike[str], block_size: int = 512) -> float:
    """Prefix hit ratio of a Mooncake JSONL trace under an unbounded cache.

    Records are processed in file order. A request's hit tokens are the tokens of its
    longest leading run of ``hash_ids`` already seen (full blocks of ``block_size``; the
    last block covers ``input_length - (len - 1) * block_size``); then all its ids are
    added to the cache. Ratio = total hit tokens / total input tokens.
    """
    seen: set[int] = set()
    hit_tokens = 0
    input_tokens = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            ids = rec["hash_ids"]
            length = rec["input_length"]
            run = 0
            while run < len(ids) and ids[run] in seen:
                run += 1
            hit_tokens += length if ids and run == len(ids) else run * block_size
            input_tokens += length
            seen.update(ids)
    return hit_tokens / input_tokens


def session_stats(path: str | PathLike[str], block_size: int = 512) -> dict:
    """Multi-turn structure of a Mooncake JSONL trace (the figures docs/model.md cites).

    Request j *follows up* request i (its previous turn) when i's whole-block prompt
    (``input_length // block_size`` leading ``hash_ids``, at least 2 blocks, since every
    request of the conversation trace starts with the same block) leads j's ``hash_ids``;
    of several such i the one with the longest chain (the latest of equals) is taken. A
    session is a tree of follow-ups; its turns are the longest chain of follow-ups in it.
    """
    import statistics

    recs = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                recs.append(json.loads(line))
    owner: dict[tuple, int] = {}
    parent = [-1] * len(recs)
    for j, rec in enumerate(recs):
        ids = tuple(rec["hash_ids"])
        for k in range(len(ids), 1, -1):
            if ids[:k] in owner:
                parent[j] = owner[ids[:k]]
                break
        owner[ids[: rec["input_length"] // block_size]] = j
    depth = [1] * len(recs)
    root = list(range(len(recs)))
    for j, p in enumerate(parent):
        if p >= 0:
            depth[j], root[j] = depth[p] + 1, root[p]
    turns: dict[int, int] = {}
    for j, r in enumerate(root):
        turns[r] = max(turns.get(r, 0), depth[j])
    follow = [j for j, p in enumerate(parent) if p >= 0]
    gaps = [(recs[j]["timestamp"] - recs[parent[j]]["timestamp"]) / 1000 for j in follow]
    new_msg = [
        recs[j]["input_length"] - recs[parent[j]]["input_length"] - recs[parent[j]]["output_length"]
        for j in follow
    ]
    outs = [r["output_length"] for r in recs]
    hist: dict[int, int] = {}
    for t in turns.values():
        hist[t] = hist.get(t, 0) + 1
    span_s = (recs[-1]["timestamp"] - recs[0]["timestamp"]) / 1000
    return {
        "requests": len(recs),
        "span_s": span_s,
        "sessions": len(turns),
        "session_rate": len(turns) / span_s,
        "follow_up_fraction": len(follow) / len(recs),
        "turns_hist": dict(sorted(hist.items())),
        "turns_mean": statistics.fmean(turns.values()),
        "gap_mean_s": statistics.fmean(gaps),
        "gap_median_s": statistics.median(gaps),
        "gap_cv": statistics.pstdev(gaps) / statistics.fmean(gaps),
        "new_message_median": statistics.median(new_msg),
        "new_message_mean": statistics.fmean(new_msg),
        "output_mean": statistics.fmean(outs),
        "output_cv": statistics.pstdev(outs) / statistics.fmean(outs),
    }


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(f"{arg}: infinite-cache hit ratio {infinite_cache_hit_ratio(arg):.6f}")
        print(session_stats(arg))
