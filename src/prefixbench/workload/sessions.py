"""Multi-turn sessions: a growing history under nested shared prefixes (docs/model.md, "Sessions").

A session is one token sequence: its shared levels (system prompt, tool schema, document),
then user message 1, answer 1, user message 2, answer 2, ... Turn k's prompt is the leading
part of that sequence up to the end of user message k, so turn k's chain extends turn k-1's.

Blocks are whole ``block_size``-token pieces of the prompt (a partial last block is computed
and moved with the request but never shared, as in vLLM/SGLang block hashing). Block ``b``
of a prompt covers tokens ``[b·bs, (b+1)·bs)``; its hash names the segment holding its last
token and its end offset. A segment's id names everything before it (a level item's id is
its path through the levels, a message's id is its session and turn), so two prompts get the
same hash for block ``b`` exactly when their first ``(b+1)·bs`` tokens are the same content.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixbench.scenario.models import SessionWorkload

from ..errors import ScenarioError
from .distributions import mean, sample
from .requests import Requests
from .synthetic import arrival_times, zipf_weights

_STREAMS = ("sessions", "turns", "gaps", "first", "message", "output", "levels")
_LEVEL_STREAMS = ("length", "has", "rank")
_OFFSET_BITS = 30  # block end offsets are < 2**30 (MAX_TOKENS = 1e9), so hashes are exact
_PATH_LIMIT = 2**31  # level paths are numbered in mixed radix below this
_SESSION_BASE = _PATH_LIMIT  # ids of user-message and answer segments start here


@dataclass
class Sessions:
    """The generated requests plus, per request, which session and turn it is (for tests)."""

    requests: Requests
    session: np.ndarray  # int64 session index (in session arrival order)
    turn: np.ndarray  # int64 turn index within its session, 0-based
    shared_tokens: np.ndarray  # int64 tokens of the shared levels leading its prompt
    levels: np.ndarray  # int64 (requests, levels): item index at each level, -1 = not carried
    session_start: np.ndarray  # float64 its session's start (the session process's arrival)


def _streams(seed: int, levels: int) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence(seed).spawn(len(_STREAMS))
    out = {name: np.random.default_rng(s) for name, s in zip(_STREAMS, children, strict=True)}
    per_level = children[-1].spawn(levels * len(_LEVEL_STREAMS))
    for i, s in enumerate(per_level):
        out[f"{i // len(_LEVEL_STREAMS)}.{_LEVEL_STREAMS[i % len(_LEVEL_STREAMS)]}"] = (
            np.random.default_rng(s)
        )
    return out


def _levels(w: SessionWorkload, n_sessions: int, rng):
    """Per session and level: item length (0 if absent), path id and item (-1 if absent)."""
    nl = len(w.shared)
    lengths = np.zeros((n_sessions, nl), dtype=np.int64)
    paths = np.zeros((n_sessions, nl), dtype=np.int64)
    carried = np.ones(n_sessions, dtype=bool)
    path = np.zeros(n_sessions, dtype=np.int64)
    radix = 1
    items = np.full((n_sessions, nl), -1, dtype=np.int64)
    for i, lv in enumerate(w.shared):
        radix *= lv.count + 1
        if radix >= _PATH_LIMIT:
            raise ScenarioError(
                "too many nested prefix combinations (product of count + 1 over the levels "
                f"must stay below {_PATH_LIMIT:,})",
                where=f"workload.shared[{i}].count",
                fix="use fewer items per level or fewer levels",
            )
        item_len = sample(lv.length, rng[f"{i}.length"], lv.count)
        carried = carried & (rng[f"{i}.has"].random(n_sessions) < lv.share_fraction)
        rank = rng[f"{i}.rank"].choice(
            lv.count, size=n_sessions, p=zipf_weights(lv.count, lv.zipf_s)
        )
        path = path * (lv.count + 1) + np.where(carried, rank + 1, 0)
        lengths[:, i] = np.where(carried, item_len[rank], 0)
        paths[:, i] = path
        items[:, i] = np.where(carried, rank, -1)
    return lengths, paths, items


# Bytes per generated turn: the ~12 int64/float64 turn tables and their temporaries.
BYTES_PER_TURN = 160.0


def _turn_tables(w: SessionWorkload, n_sessions: int, rng, shared: np.ndarray, n: int):
    """Session starts (one more than sessions: the last bounds the horizon), then session-major
    arrays of the kept turns: session, turn, arrival, message, output, prompt."""
    from prefixbench.support.memcheck import check_bytes

    start = arrival_times(w, n_sessions + 1, rng["sessions"])
    # a session's turns past the run's n-th, or past the context (each turn adds >= 2
    # tokens), are never among the requests: 10⁹ turns per session are not generated
    turns = np.clip(sample(w.turns, rng["turns"], n_sessions), 1, min(n, w.max_context // 2 + 1))
    total = int(turns.sum())
    check_bytes(total * BYTES_PER_TURN, f"{total:,} session turns", "workload.turns",
                "lower workload.turns or run.requests")  # fmt: skip
    first = np.concatenate(([0], np.cumsum(turns)[:-1]))
    sid = np.repeat(np.arange(n_sessions, dtype=np.int64), turns)
    k = np.arange(total, dtype=np.int64) - first[sid]
    gap = sample(w.turn_gap_ms, rng["gaps"], total) / 1000.0  # a turn 0's gap is unused
    cs = np.cumsum(gap)
    arrival = start[:-1][sid] + (cs - cs[first[sid]])
    msg = sample(w.user_message, rng["message"], total)
    if w.first_message is not None:
        msg[k == 0] = sample(w.first_message, rng["first"], n_sessions)
    msg = np.maximum(msg, 1)
    out = np.maximum(sample(w.output_length, rng["output"], total), 1)
    # prompt of turn k = shared + Σ_{j<k} (msg_j + out_j) + msg_k
    grown = np.cumsum(msg + out)
    before = grown - (msg + out) - (grown[first[sid]] - (msg + out)[first[sid]])
    prompt = shared[sid] + before + msg
    keep = prompt + out <= w.max_context  # prompt + out grows with k: a session stops at once
    kept = (sid[keep], k[keep], arrival[keep], msg[keep], out[keep], prompt[keep])
    return start, *kept


def _chains(
    sid: np.ndarray,
    prompt: np.ndarray,
    seg_len: np.ndarray,
    seg_id: np.ndarray,
    seg_session: np.ndarray,
    block_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """CSR block chains of requests (in their final order) over the sessions' segments."""
    seg_end = np.cumsum(seg_len)  # one global token axis, sessions laid end to end
    n_sessions = int(seg_session.max()) + 1 if len(seg_session) else 0
    session_len = np.bincount(seg_session, weights=seg_len, minlength=n_sessions).astype(np.int64)
    origin = np.concatenate(([0], np.cumsum(session_len)[:-1]))
    nb = prompt // block_size
    ptr = np.concatenate(([0], np.cumsum(nb))).astype(np.int64)
    owner = np.repeat(np.arange(len(prompt), dtype=np.int64), nb)
    end = (np.arange(int(ptr[-1]), dtype=np.int64) - ptr[:-1][owner] + 1) * block_size
    seg = np.searchsorted(seg_end, origin[sid[owner]] + end - 1, side="right")
    return ptr, (seg_id[seg] << _OFFSET_BITS) | end


def _answers(sid, prompt, out, seg_len, seg_id, seg_session, block_size):
    """Each turn's answer blocks: the full blocks of ``prompt + output − 1`` tokens (the KV a
    finished sequence holds; its last token has none) past the prompt's whole blocks, hashed
    like prompt blocks, so the next turn's chain names the same blocks."""
    ptr, full = _chains(sid, prompt + out - 1, seg_len, seg_id, seg_session, block_size)
    nb = prompt // block_size
    counts = np.diff(ptr) - nb
    owner = np.repeat(np.arange(len(prompt), dtype=np.int64), counts)
    pos = np.arange(int(counts.sum()), dtype=np.int64)
    pos = pos - np.concatenate(([0], np.cumsum(counts)[:-1]))[owner]
    ans_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return ans_ptr, full[ptr[:-1][owner] + nb[owner] + pos]


def _enough_sessions(w: SessionWorkload, n: int) -> int:
    return int(np.ceil(n / max(mean(w.turns), 1.0) * 1.25)) + 16


def generate_sessions(w: SessionWorkload, n: int, block_size: int, seed: int) -> Sessions:
    """The first ``n`` requests (by arrival) of the session process ``w``."""
    n_sessions = _enough_sessions(w, n)
    while True:
        rng = _streams(seed, len(w.shared))
        lengths, paths, items = _levels(w, n_sessions, rng)
        shared = lengths.sum(axis=1)
        start, sid, k, arrival, msg, out, prompt = _turn_tables(w, n_sessions, rng, shared, n)
        # exact once n turns arrive before the first session not generated could start
        if int((arrival < start[-1]).sum()) >= n or n_sessions > 4 * n + 64:
            break
        n_sessions *= 2

    nl = len(w.shared)
    # segments in session order: its levels, then (message, answer) for each kept turn
    lvl_session = np.repeat(np.arange(n_sessions, dtype=np.int64), nl)
    turn_session = np.repeat(sid, 2)
    t_global = np.arange(len(sid), dtype=np.int64)
    turn_ids = _SESSION_BASE + np.stack((2 * t_global, 2 * t_global + 1), axis=1).ravel()
    seg_session = np.concatenate((lvl_session, turn_session))
    seg_len = np.concatenate((lengths.ravel(), np.stack((msg, out), axis=1).ravel()))
    seg_id = np.concatenate((paths.ravel(), turn_ids))
    order = np.argsort(seg_session, kind="stable")  # levels first within each session
    seg_session, seg_len, seg_id = seg_session[order], seg_len[order], seg_id[order]

    pick = np.argsort(arrival, kind="stable")[:n]  # ties: session, then turn order
    blk_ptr, blk_hash = _chains(sid[pick], prompt[pick], seg_len, seg_id, seg_session, block_size)
    ans_ptr, ans_hash = _answers(
        sid[pick], prompt[pick], out[pick], seg_len, seg_id, seg_session, block_size
    )
    req = Requests(
        arrival=arrival[pick],
        prompt_len=prompt[pick].astype(np.int64),
        output_len=out[pick].astype(np.int64),
        blk_ptr=blk_ptr,
        blk_hash=blk_hash.astype(np.int64),
        blk_tokens=np.full(len(blk_hash), block_size, dtype=np.int64),
        # per-prefix statistics group by the outermost level (the system prompt)
        prefix_id=items[sid[pick], 0] if nl else np.full(len(pick), -1, dtype=np.int64),
        ans_ptr=ans_ptr,
        ans_hash=ans_hash.astype(np.int64),
        ans_tokens=np.full(len(ans_hash), block_size, dtype=np.int64),
    )
    s = sid[pick]
    return Sessions(req, s, k[pick], shared[s], items[s], start[s])


def generate(w: SessionWorkload, n: int, block_size: int, seed: int) -> Requests:
    """``n`` requests of the session workload ``w`` (see ``generate_sessions``)."""
    return generate_sessions(w, n, block_size, seed).requests
