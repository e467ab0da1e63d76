"""The session generator (workload/sessions.py): growing histories and nested shared prefixes.

Expected values are written by hand from the scenario's raw numbers (block size 16 unless
said otherwise): e.g. a 40-token system prompt, a 20-token first message, 7-token answers
and 10-token later messages give prompts of 60, 77 and 94 tokens, so 3, 4 and 5 blocks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from prefixbench.errors import ScenarioError
from prefixbench.scenario.models import SessionWorkload
from prefixbench.workload.sessions import generate, generate_sessions

BS = 16


def _workload(**over) -> SessionWorkload:
    spec = {
        "kind": "sessions",
        "arrivals": {"rate": 1.0},
        "turns": {"kind": "fixed", "value": 3},
        "turn_gap_ms": {"kind": "fixed", "value": 5000},
        "shared": [
            {"name": "system", "count": 1, "zipf_s": 0, "length": {"kind": "fixed", "value": 40}}
        ],
        "first_message": {"kind": "fixed", "value": 20},
        "user_message": {"kind": "fixed", "value": 10},
        "output_length": {"kind": "fixed", "value": 7},
    }
    spec.update(over)
    return SessionWorkload.model_validate(spec)


def _chain(req, i) -> list[int]:
    return req.blk_hash[req.blk_ptr[i] : req.blk_ptr[i + 1]].tolist()


def _common(a: list[int], b: list[int]) -> int:
    run = 0
    while run < min(len(a), len(b)) and a[run] == b[run]:
        run += 1
    return run


def _by_session(g) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i in range(len(g.requests)):
        out.setdefault(int(g.session[i]), []).append(i)
    return out


def test_fixed_sessions_by_hand():
    g = generate_sessions(_workload(), 60, BS, seed=1)
    req = g.requests
    req.validate()
    assert len(req) == 60
    for idx in _by_session(g).values():
        if len(idx) < 3:  # the run's last sessions may be cut by the request count
            continue
        assert [int(g.turn[i]) for i in idx] == [0, 1, 2]
        assert req.prompt_len[idx].tolist() == [60, 77, 94]
        assert req.output_len[idx].tolist() == [7, 7, 7]
        assert [req.blk_ptr[i + 1] - req.blk_ptr[i] for i in idx] == [3, 4, 5]
        a0 = req.arrival[idx[0]]
        assert a0 == g.session_start[idx[0]]  # turn 0 arrives when its session starts
        assert req.arrival[idx[1]] == pytest.approx(a0 + 5.0, abs=1e-9)
        assert req.arrival[idx[2]] == pytest.approx(a0 + 10.0, abs=1e-9)
    assert (req.blk_tokens == BS).all()


def test_turn_k_chain_strictly_extends_turn_k_minus_1():
    w = _workload(
        turns={"kind": "uniform", "low": 1, "high": 8},
        user_message={"kind": "lognormal", "mean": 40, "cv": 1.0},
        output_length={"kind": "lognormal", "mean": 30, "cv": 1.0},
    )
    g = generate_sessions(w, 2000, BS, seed=3)
    req = g.requests
    pairs = 0
    for idx in _by_session(g).values():
        for prev, cur in zip(idx, idx[1:], strict=False):
            a, b = _chain(req, prev), _chain(req, cur)
            assert b[: len(a)] == a  # the whole earlier chain leads the later one
            # it grows by >= 1 output + 1 message token: strict once that crosses a block end
            assert req.prompt_len[cur] >= req.prompt_len[prev] + 2
            if req.prompt_len[cur] // BS > req.prompt_len[prev] // BS:
                assert len(b) > len(a)
            pairs += 1
    assert pairs > 1000


def test_chain_length_is_whole_blocks_of_the_prompt():
    w = _workload(
        turns={"kind": "uniform", "low": 1, "high": 5},
        user_message={"kind": "uniform", "low": 1, "high": 100},
        output_length={"kind": "uniform", "low": 1, "high": 100},
    )
    for bs in (1, 7, 16, 64):
        req = generate(w, 500, bs, seed=2)
        assert np.array_equal(np.diff(req.blk_ptr), req.prompt_len // bs)
        assert (req.blk_tokens == bs).all()


def test_a_partial_last_block_is_never_shared():
    """Turn 0's prompt is 60 tokens: blocks 0-2 cover 48, the 12 left are not a block. Turn 1
    (77 tokens) has a block 3 covering tokens 48-63, which nothing earlier has."""
    g = generate_sessions(_workload(), 30, BS, seed=0)
    req = g.requests
    idx = next(v for v in _by_session(g).values() if len(v) == 3)
    t0, t1 = _chain(req, idx[0]), _chain(req, idx[1])
    assert len(t0) == 3 and t1[:3] == t0
    earlier = set(req.blk_hash[: req.blk_ptr[idx[1]]].tolist())
    assert t1[3] not in earlier


@pytest.mark.parametrize("system", [40, 47, 48, 49])
def test_sessions_share_exactly_the_common_system_prompt_blocks(system):
    """One system prompt for all: two sessions share floor(system/16) blocks. At 40 tokens,
    block 2 (tokens 32-47) already holds each session's own first message; at 47 only its
    last token does, and that is enough to make it private; at 48 it is the third shared
    block; at 49 block 3 starts with one system token and is private again."""
    lv = {"name": "system", "count": 1, "zipf_s": 0, "length": {"kind": "fixed", "value": system}}
    g = generate_sessions(_workload(shared=[lv]), 90, BS, seed=4)
    req = g.requests
    firsts = [v[0] for v in _by_session(g).values()]
    for a in firsts[:10]:
        for b in firsts[:10]:
            if a != b:
                assert _common(_chain(req, a), _chain(req, b)) == system // BS


NESTED = [
    {"name": "system", "count": 2, "zipf_s": 0, "length": {"kind": "fixed", "value": 40}},
    {
        "name": "tools",
        "count": 3,
        "zipf_s": 0,
        "length": {"kind": "fixed", "value": 24},
        "share_fraction": 0.5,
    },
    {
        "name": "document",
        "count": 2,
        "zipf_s": 0,
        "length": {"kind": "fixed", "value": 48},
        "share_fraction": 0.5,
    },
]
LEVEL_TOKENS = [40, 24, 48]


def test_nested_levels_share_exactly_the_intended_leading_blocks():
    """Different systems: 0 blocks, even under the same tool set (its KV depends on the
    system prompt before it); same system only: floor(40/16) = 2 blocks; same system and
    tools: floor(64/16) = 4; all three: floor(112/16) = 7 (then each session's own message)."""
    g = generate_sessions(_workload(shared=NESTED, turns={"kind": "fixed", "value": 1}), 400, BS, 5)
    req = g.requests
    seen = {0: 0, 2: 0, 4: 0, 7: 0}
    outer_differs_inner_same = 0
    for a in range(120):
        for b in range(a + 1, 120):
            same = 0  # tokens of the levels both carry with the same item, outermost first
            for lv, tokens in enumerate(LEVEL_TOKENS):
                ia, ib = g.levels[a, lv], g.levels[b, lv]
                if ia < 0 or ia != ib:
                    break
                same += tokens
            want = same // BS
            assert _common(_chain(req, a), _chain(req, b)) == want, (a, b)
            seen[want] += 1
            # not only the leading run: equal hashes at a position <=> equal content so far
            ca, cb = _chain(req, a), _chain(req, b)
            for pos in range(min(len(ca), len(cb))):
                assert (ca[pos] == cb[pos]) == ((pos + 1) * BS <= same), (a, b, pos)
            la, lb = g.levels[a], g.levels[b]
            outer_differs_inner_same += bool(la[0] != lb[0] and la[1] >= 0 and la[1] == lb[1])
    assert all(v > 0 for v in seen.values()), seen
    assert outer_differs_inner_same > 0


def test_a_block_hash_belongs_to_one_position():
    """A hash names a whole token prefix, so it can never appear at two chain positions."""
    w = _workload(shared=NESTED, turns={"kind": "uniform", "low": 1, "high": 4})
    req = generate(w, 1000, BS, seed=12)
    pos = np.arange(len(req.blk_hash)) - np.repeat(req.blk_ptr[:-1], np.diff(req.blk_ptr))
    where: dict[int, int] = {}
    for h, p in zip(req.blk_hash.tolist(), pos.tolist(), strict=True):
        assert where.setdefault(h, p) == p


def test_nested_share_fractions_and_prefix_lengths():
    g = generate_sessions(
        _workload(shared=NESTED, turns={"kind": "fixed", "value": 1}), 4000, BS, 6
    )
    tools = g.levels[:, 1] >= 0
    doc = g.levels[:, 2] >= 0
    assert set(g.levels[:, 0].tolist()) == {0, 1}  # the system level is always carried
    assert tools.mean() == pytest.approx(0.5, abs=0.03)
    assert not (doc & ~tools).any()  # a level is carried only under the outer ones
    assert doc[tools].mean() == pytest.approx(0.5, abs=0.04)
    want = 40 + 24 * tools + 48 * doc
    assert np.array_equal(g.shared_tokens, want)
    assert np.array_equal(g.requests.prompt_len, want + 20)
    assert np.array_equal(g.requests.prefix_id, g.levels[:, 0])  # the outermost level's item


def test_zipf_popularity_of_a_level():
    lv = {"name": "system", "count": 4, "zipf_s": 1.0, "length": {"kind": "fixed", "value": 32}}
    g = generate_sessions(_workload(shared=[lv], turns={"kind": "fixed", "value": 1}), 20000, BS, 7)
    freq = np.bincount(g.requests.prefix_id, minlength=4) / len(g.requests)
    h = 1 + 1 / 2 + 1 / 3 + 1 / 4  # weights 1/(r+1)
    for r in range(4):
        assert freq[r] == pytest.approx(1 / (r + 1) / h, abs=0.012)


def test_rates_session_and_request():
    w = _workload(arrivals={"rate": 2.0}, turn_gap_ms={"kind": "fixed", "value": 1000})
    g = generate_sessions(w, 30000, BS, seed=8)
    req = g.requests
    starts = req.arrival[g.turn == 0]
    assert np.array_equal(starts, g.session_start[g.turn == 0])
    gaps = np.diff(starts)
    assert np.mean(gaps) == pytest.approx(1 / 2.0, rel=0.03)  # Poisson, 2 sessions/s
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.05)  # exponential gaps
    span = req.arrival[-1] - req.arrival[0]
    assert (len(req) - 1) / span == pytest.approx(2.0 * 3, rel=0.03)  # x 3 turns each


def test_the_first_n_requests_are_exact():
    """No request of a session not generated could arrive before the n-th: a longer run
    starts with exactly the shorter one."""
    w = _workload(
        turns={"kind": "uniform", "low": 1, "high": 6},
        turn_gap_ms={"kind": "lognormal", "mean": 20000, "cv": 1.5},
    )
    short, long = generate(w, 300, BS, 9), generate(w, 3000, BS, 9)
    cut = int(short.blk_ptr[-1])
    assert np.array_equal(long.arrival[:300], short.arrival)
    assert np.array_equal(long.prompt_len[:300], short.prompt_len)
    assert np.array_equal(long.blk_hash[:cut], short.blk_hash)


def test_the_first_n_requests_need_more_sessions_when_turns_come_late():
    """Turns 10,000 s apart at one session per second: the first 300 requests are the first
    turns of 300 sessions, although 100 sessions would hold 300 turns."""
    w = _workload(turn_gap_ms={"kind": "fixed", "value": 10_000_000})
    g = generate_sessions(w, 300, BS, seed=10)
    assert (g.turn == 0).all() and g.session.tolist() == list(range(300))
    longer = generate(w, 1000, BS, seed=10)
    assert np.array_equal(longer.arrival[:300], g.requests.arrival)


def test_deterministic_by_seed():
    w = _workload(turns={"kind": "uniform", "low": 1, "high": 6})
    a, b, c = generate(w, 500, BS, 11), generate(w, 500, BS, 11), generate(w, 500, BS, 12)
    for f in ("arrival", "prompt_len", "output_len", "blk_ptr", "blk_hash", "prefix_id"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert not np.array_equal(a.arrival, c.arrival)


def test_arrivals_sorted_and_turns_in_order():
    w = _workload(
        turns={"kind": "uniform", "low": 1, "high": 8},
        turn_gap_ms={"kind": "lognormal", "mean": 3000, "cv": 2.0, "min": 0},
    )
    g = generate_sessions(w, 3000, BS, seed=13)
    assert np.all(np.diff(g.requests.arrival) >= 0)
    for idx in _by_session(g).values():
        assert [int(g.turn[i]) for i in idx] == list(range(len(idx)))


def test_max_context_ends_a_session():
    """Turn 2's prompt (94) fits 100, but with its 7-token answer it needs 101 > 100: every
    session stops after two turns."""
    g = generate_sessions(_workload(max_context=100), 100, BS, seed=14)
    assert g.turn.max() == 1 and (g.turn == 1).sum() >= 45
    assert (g.requests.prompt_len + g.requests.output_len <= 100).all()


def test_too_many_level_combinations_is_refused():
    big = [
        {"name": f"l{i}", "count": 10_000, "zipf_s": 1, "length": {"kind": "fixed", "value": 16}}
        for i in range(3)
    ]
    with pytest.raises(ScenarioError) as e:
        generate(_workload(shared=big), 10, BS, 0)
    assert e.value.where == "workload.shared[2].count"


def test_no_shared_levels():
    g = generate_sessions(_workload(shared=[]), 200, BS, seed=15)
    assert (g.requests.prefix_id == -1).all()
    firsts = [v[0] for v in _by_session(g).values()][:5]
    for a in firsts:
        for b in firsts:
            if a != b:
                assert _common(_chain(g.requests, a), _chain(g.requests, b)) == 0


# ------------------------------------------------------------------ end to end


def _infinite_cache_hit_ratio(req, block_size: int, start: int = 0) -> float:
    """Block hit ratio under an unbounded cache, straight from the generated chains: a
    request hits the longest leading run of its blocks that any earlier request had (whole
    blocks of ``block_size`` tokens), counted over requests ``start..``."""
    seen: set[int] = set()
    hit = total = 0
    for i in range(len(req)):
        chain = req.blk_hash[req.blk_ptr[i] : req.blk_ptr[i + 1]].tolist()
        run = 0
        while run < len(chain) and chain[run] in seen:
            run += 1
        if i >= start:
            hit += run * block_size
            total += int(req.prompt_len[i])
        seen.update(chain)
    return hit / total


def test_unbounded_lru_reproduces_the_generators_infinite_cache_hit_ratio():
    """With unbounded decode memory every block ever moved stays resident, so the replica hit
    rate equals the generator's own infinite-cache ratio (a gap could only come from a turn
    arriving while the KV it shares is still in flight; gaps here are >= 1 s)."""
    import dataclasses

    from prefixbench.engine import simulate
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare

    over = ["run.requests=1500", "run.warmup_requests=0", "memory.cache_generated=false"]
    s = load_scenario("multi_turn_chat", over)  # the generator's ratio: prompt chains only
    prep = prepare(s)
    cfg = dataclasses.replace(
        prep.base, policy="replicate_all_lru", budget_tokens=10**13, max_batch=10**6
    )
    res = simulate(prep.requests, cfg)
    assert (res.columns["outcome"] == 1).all()
    sim = res.columns["replica_hit_tokens"].sum() / prep.requests.prompt_len.sum()
    oracle = _infinite_cache_hit_ratio(prep.requests, s.cluster.block_size)
    assert oracle > 0.5  # the preset's history and system prompts are really reused
    assert sim == pytest.approx(oracle, abs=1e-12)


def test_relaxed_budget_lru_approaches_the_infinite_cache_ratio():
    """At 4x the reference demand (16.3 GB of an L4's 20.9 GB free) LRU evicts only blocks of
    finished conversations: the steady hit rate is within 0.2 points of the unbounded ratio and
    never above it."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.runs import run_scenario

    sets = ["run.requests=1500", "run.warmup_requests=150", "memory.budget_factor=4.0"]
    sets.append("memory.cache_generated=false")  # the generator's ratio: prompt chains only
    s = load_scenario("multi_turn_chat", sets)
    row = run_scenario(s, ["replicate_all_lru"], keep_requests=False).summary.to_dicts()[0]
    from prefixbench.system.runner import build_requests

    req, _ = build_requests(s)
    oracle = _infinite_cache_hit_ratio(req, s.cluster.block_size, start=150)
    assert row["reject_rate"] == 0
    assert row["replica_hit_rate"] <= oracle + 1e-12
    assert row["replica_hit_rate"] == pytest.approx(oracle, abs=0.002)


def test_cli_run_multi_turn_chat_runs_every_policy(tmp_path):
    import json

    from typer.testing import CliRunner

    from prefixbench.cli import app
    from prefixbench.scenario.models import POLICIES

    r = CliRunner(env={"COLUMNS": "80"}).invoke(
        app,
        [
            "run",
            "multi_turn_chat",
            "--set",
            "run.requests=600",
            "--set",
            "run.warmup_requests=60",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    rows = [res["prefixbench"] for res in json.loads(r.stdout)["results"]]
    assert sorted(row["policy"] for row in rows) == sorted(POLICIES)
    hit = {row["policy"]: row["replica_hit_rate"] for row in rows}
    assert hit["transfer_per_request"] == 0 and hit["replicate_all_lru"] > 0.3


def test_bad_session_field_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from prefixbench.cli import app

    r = CliRunner(env={"COLUMNS": "80"}).invoke(
        app, ["run", "multi_turn_chat", "--set", "workload.turns=3", "--out", str(tmp_path)]
    )
    assert r.exit_code != 0
    assert len(r.stderr.strip().splitlines()) == 1
    assert "workload" in r.stderr and "turns" in r.stderr and "Traceback" not in r.stderr


SHARED_CONV = (
    Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "conversation_trace.jsonl"
)


@pytest.mark.skipif(not SHARED_CONV.is_file(), reason="../shared/traces not present")
def test_preset_cites_the_conversation_traces_session_statistics():
    """multi_turn_chat's session shape is the Mooncake conversation trace's, measured by
    tests/tracestats.py (docs/model.md, "Sessions"): the numbers in the YAML must match."""
    from tracestats import session_stats

    from prefixbench.scenario.loader import load_scenario

    st = session_stats(SHARED_CONV)
    w = load_scenario("multi_turn_chat", []).workload
    hist = st["turns_hist"]
    want = [hist.get(t, 0) for t in range(1, 12)] + [sum(v for t, v in hist.items() if t >= 12)]
    assert w.turns.values == list(range(1, 13)) and w.turns.weights == want
    assert w.turn_gap_ms.mean == pytest.approx(st["gap_mean_s"] * 1000, rel=0.005)
    assert w.turn_gap_ms.cv == pytest.approx(st["gap_cv"], abs=0.005)
    assert w.output_length.mean == pytest.approx(st["output_mean"], abs=0.5)
    assert w.output_length.cv == pytest.approx(st["output_cv"], abs=0.005)


def test_capacity_probes_sessions_in_requests_per_second():
    """`capacity` searches a request rate; a sessions workload's arrivals are sessions, so a
    probe at r req/s runs r / E[turns] sessions/s. The preset's turns histogram has
    E[turns] = 11,872 / 8,056 (Σ turns·count / Σ count)."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.capacity import _with_rate

    s = load_scenario("multi_turn_chat", [])
    mean_turns = 11_872 / 8_056
    assert _with_rate(s, 3.0 * mean_turns).workload.arrivals.rate == pytest.approx(3.0)
    syn = load_scenario("medium_chat", [])
    assert _with_rate(syn, 7.0).workload.arrivals.rate == 7.0
