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


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(f"{arg}: infinite-cache hit ratio {infinite_cache_hit_ratio(arg):.6f}")
