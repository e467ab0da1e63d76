"""The fuzzer: at least 20,000 generated inputs per run, across every way data
gets into prefixbench, each of which must end in ONE of

- a ``PrefixbenchError`` whose message is one printable line naming what, where and a fix
  (through the CLI: exit 2, one stderr line, no traceback), or
- a valid result whose numbers are finite and bounded (latencies >= 0, rates in [0, 1],
  throughput no more than the offered load).

Targets (each is one entry; a new trace format is one more line in ``TRACE_FORMATS``):
scenario YAML documents and text, ``--set`` paths and values, the fields added since the
last pass (host write policies, conditional_disagg's thresholds, the kv_aware routers and
kv_overlap_weight, memory.cache_generated, the host tier; then the fields merged after
that list: the L3 store, reserved decode tokens, prefill hold, cost_aware's local prefill,
swap into a small host memory, a link's NIC ceiling, the per-prompt-token cost),
``config.json`` (string booleans,
recent keys), Mooncake, Mooncake ``.jsonl.gz``, Azure 2023 and 2024 (UTC offsets),
BurstGPT and Qwen-Bailian trace lines, Parquet results with schema-valid hostile content,
special file types (directory, FIFO, device, symlink loop, huge file, empty, binary),
hardware and efficiency YAML, calibrate profiles (CSV with BOMs, duplicates and odd
headers; vLLM JSON), launch commands (``prefixbench import``: vLLM, SGLang, bench), the CLI
in-process (``CliRunner``), and valid scenarios actually simulated (tiny runs, the recent
fields under the policies that read them, the Parquet fixture's sweep): every row any of
them makes is checked against every output invariant (metrics/invariants.py).

``COUNTS`` records how many inputs each target ran; ``tests/conftest.py`` prints the total
and the time at the end of the session (docs/reliability.md quotes it).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from robustness_util import assert_clear, assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.errors import PrefixbenchError

COUNTS: Counter[str] = Counter()
SECONDS: Counter[str] = Counter()
MIN_TOTAL = 20_000
FUZZ = {
    "deadline": None,
    "database": None,  # a fresh search every run, not replays of old finds
    "suppress_health_check": list(HealthCheck),
}
runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"})

# ------------------------------------------------------------------ hostile values

HUGE_DIGITS = "9" * 5000  # past Python's int-str conversion limit
HOSTILE = [
    0, -1, 1, 2, True, False, None, "", "x", 0.5, -0.5, 2**31, 2**63 - 1, 2**63, 2**64,
    -(2**63), 10**30, 1e-300, 1e300, -1e300, 5e-324, 1e-9, 1e9, 1e7, 1024, 1025, 100000000,
    float("nan"), float("inf"), float("-inf"), "1e5", "nan", "true", [], {}, [1, 2], [True],
    [[1]], {"kind": "fixed"}, {"kind": "fixed", "value": 0}, {"kind": "nope"},
    {"kind": "lognormal", "mean": 10, "cv": 1, "min": 9, "max": 3},
    {"kind": "empirical", "values": [1, 2], "weights": [1e308, 1e308]},
    "\x1b]0;title\x07", "\x1b[2J", "a" * 300, "../../etc/passwd", "/dev/zero", "é\u2028",
]  # fmt: skip
hostile_value = st.one_of(
    st.sampled_from(HOSTILE).map(copy.deepcopy),  # a fresh copy: inputs get mutated
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.booleans(),
)
HOSTILE_TEXT = [
    HUGE_DIGITS, "-" + HUGE_DIGITS, "1" + "0" * 400, "1e99999", ".inf", ".nan", "-.inf",
    "0x7fffffffffffffff", "0o777", "1_000", "&a [*a, *a]", "*undefined", "!!python/object:os.system",
    "!!binary AAAA", "{a: 1", "[1, 2", "'unterminated", "\t", "true", "~", "null", "", "0",
    "-0", "1e-400", "00012", "1:30", "2026-12-01", "{kind: fixed, value: 1}", "[]",
]  # fmt: skip
hostile_text = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=16),
    hostile_value.map(lambda v: json.dumps(v, allow_nan=True)),
)


def _timed(name: str):
    """Count one input of target ``name`` and add its wall time."""

    class _T:
        def __enter__(self):
            self.t = time.perf_counter()

        def __exit__(self, *exc):
            COUNTS[name] += 1
            SECONDS[name] += time.perf_counter() - self.t
            return False

    return _T()


def _clear(err: BaseException, where: str | None = None) -> str:
    """The error contract (tests/robustness_util.py), and no escape sequence raw."""
    line = assert_clear(err, where=where)
    assert "\x1b" not in line
    return line


# ------------------------------------------------------------------ scenario YAML and --set


def _preset(name: str) -> dict:
    from prefixbench.scenario.loader import scenario_source

    return scenario_source(name)[0]


PRESETS = ["enterprise_hotset", "long_context_support", "medium_chat", "tool_call"]
PRESET_DATA = {p: _preset(p) for p in PRESETS}


def _field_paths() -> list[str]:
    """Every field path of the scenario models (through unions), e.g. cluster.link.channels."""
    from typing import get_args

    from pydantic import BaseModel

    from prefixbench.scenario.models import Scenario

    def members(tp) -> list:
        args = [a for a in get_args(tp) if a is not type(None)]
        return [m for a in args for m in members(a)] if args else [tp]

    out: set[str] = set()

    def visit(model, prefix: str, depth: int) -> None:
        for name, f in model.model_fields.items():
            path = f"{prefix}{name}"
            out.add(path)
            for m in members(f.annotation):
                if isinstance(m, type) and issubclass(m, BaseModel) and depth < 4:
                    visit(m, f"{path}.", depth + 1)

    visit(Scenario, "", 0)
    return sorted(out)


FIELD_PATHS = _field_paths()
JUNK_PATHS = ["", ".", "a..b", "workload.arrivals.rate.x", "nope", "cluster.link.name.x",
              "run", "workload", "x" * 300, "cluster.\u2028", "seed.0"]  # fmt: skip


def _leaves(data: Any, path: tuple = ()) -> list[tuple]:
    out = [path] if path else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _leaves(v, (*path, k))
    return out


@st.composite
def mutated_scenario(draw) -> dict:
    data = copy.deepcopy(PRESET_DATA[draw(st.sampled_from(PRESETS))])
    for _ in range(draw(st.integers(1, 3))):
        paths = _leaves(data)
        path = draw(st.sampled_from(paths))
        node = data
        for k in path[:-1]:
            node = node[k]
        op = draw(st.sampled_from(["set", "set", "set", "delete", "extra"]))
        if op == "set":
            node[path[-1]] = draw(hostile_value)
        elif op == "delete":
            node.pop(path[-1], None)
        elif isinstance(node, dict):
            node[draw(st.text(max_size=8))] = draw(hostile_value)
    return data


def _check_scenario(s) -> None:
    """A scenario that validated holds only finite numbers within int64."""

    def walk(v):
        if isinstance(v, float):
            assert math.isfinite(v), v
        elif isinstance(v, int) and not isinstance(v, bool):
            assert -(2**63) < v < 2**63, v
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(s.model_dump())


def _validate_or_refuse(data, where: str = "fuzz.yaml"):
    from prefixbench.scenario.loader import validate

    try:
        s = validate(data, where)
    except PrefixbenchError as e:
        _clear(e, where=where)
        return None
    _check_scenario(s)
    return s


@settings(max_examples=1800, **FUZZ)
@given(data=mutated_scenario())
def test_fuzz_scenario_documents(data: dict) -> None:
    from prefixbench.scenario.loader import _parse

    with _timed("scenario YAML documents"):
        try:
            text = yaml.safe_dump(data, allow_unicode=True)
        except yaml.YAMLError:
            return
        try:
            parsed = _parse(text, "fuzz.yaml")
        except PrefixbenchError as e:
            _clear(e, where="fuzz.yaml")
            return
        if not isinstance(parsed, dict):
            return
        _validate_or_refuse(parsed)


@st.composite
def mutated_scenario_text(draw) -> str:
    from importlib import resources

    name = draw(st.sampled_from(PRESETS))
    text = (resources.files("prefixbench.scenarios") / f"{name}.yaml").read_text()
    lines = text.splitlines()
    k = draw(st.integers(0, len(lines) - 1))
    key, sep, _ = lines[k].partition(":")
    token = draw(hostile_text)
    lines[k] = f"{key}: {token}" if sep and draw(st.booleans()) else draw(st.text(max_size=30))
    return "\n".join(lines) + "\n"


@settings(max_examples=1400, **FUZZ)
@given(text=mutated_scenario_text())
def test_fuzz_scenario_text(text: str) -> None:
    from prefixbench.scenario.loader import _parse

    with _timed("scenario YAML text"):
        try:
            parsed = _parse(text, "fuzz.yaml")
        except PrefixbenchError as e:
            _clear(e, where="fuzz.yaml")
            return
        if isinstance(parsed, dict):
            _validate_or_refuse(parsed)


override = st.tuples(
    st.one_of(
        st.sampled_from(FIELD_PATHS), st.sampled_from(FIELD_PATHS), st.sampled_from(JUNK_PATHS)
    ),
    hostile_text,
).map(lambda kv: f"{kv[0]}={kv[1]}")


def _set_then_validate(preset: str, sets: list[str]):
    """``sets`` over a preset: one clear ``--set`` line, or the validated scenario (or None
    when validation refused it clearly)."""
    from prefixbench.scenario.loader import apply_overrides

    try:
        data = apply_overrides(PRESET_DATA[preset], sets)
    except PrefixbenchError as e:
        _clear(e, where="--set")
        return None
    return _validate_or_refuse(data, "preset (with --set)")


@settings(max_examples=4000, **FUZZ)
@given(preset=st.sampled_from(PRESETS), sets=st.lists(override, min_size=1, max_size=3))
def test_fuzz_set_overrides(preset: str, sets: list[str]) -> None:
    with _timed("--set paths and values"):
        _set_then_validate(preset, sets)


# ------------------------------------------------------------------ config.json

QWEN_05B = {  # Qwen/Qwen2-0.5B config.json (the fields prefixbench reads)
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "vocab_size": 151936, "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
}  # fmt: skip


HF_EXTRA = ["attention_bias", "sliding_window", "use_sliding_window", "layer_types",
            "quantization_config", "num_experts", "num_experts_per_tok", "head_dim",
            "rope_scaling", "text_config", "model_type", "kv_lora_rank"]  # fmt: skip


@st.composite
def mutated_config(draw) -> str:
    cfg = dict(QWEN_05B)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.one_of(st.sampled_from(sorted(QWEN_05B)), st.sampled_from(HF_EXTRA),
                             st.text(max_size=10)))  # fmt: skip
        if draw(st.integers(0, 5)) == 0:
            cfg.pop(key, None)
        elif draw(st.integers(0, 4)) == 0:  # a string boolean where a boolean belongs
            cfg[key] = draw(st.sampled_from(["false", "true", "False", "0"]))
        else:
            cfg[key] = draw(hostile_value)
    text = json.dumps(cfg, allow_nan=True)
    if draw(st.integers(0, 9)) == 0:  # raw text only a file can hold: a 5000-digit integer
        text = text.replace("896", HUGE_DIGITS, 1)
    return text


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=1300, **FUZZ)
@given(text=mutated_config())
def test_fuzz_config_json(fuzz_dir: Path, text: str) -> None:
    from prefixbench.catalog.hfconfig import load_hf_config

    path = fuzz_dir / "config.json"
    with _timed("config.json"):
        path.write_text(text)
        try:
            spec = load_hf_config(path)
        except PrefixbenchError as e:
            _clear(e)
            return
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "max_context"):
            v = getattr(spec, name, None)
            if isinstance(v, int | float) and not isinstance(v, bool):
                assert math.isfinite(v) and v > 0, (name, v)


# ------------------------------------------------------------------ hardware, efficiency, calibrate

ACCELERATOR = {"hardware": "accelerator", "name": "fuzz-acc", "peak_tflops": 100,
               "hbm_gbps": 1000, "memory_gb": 80, "source": "user"}  # fmt: skip
LINK = {"hardware": "link", "name": "fuzz-link", "bandwidth_gbps": 3, "latency_us": 5,
        "efficiency": 0.87, "setup_us": 450, "ceiling_gbps": 190, "source": "user"}  # fmt: skip
EFFICIENCY = {"mfu_prefill": 0.5, "mfu_decode": 0.4, "mbu": 0.7, "prefill_overhead_ms": 1.0,
              "decode_overhead_ms": 0.5, "request_overhead_ms": 3.0,
              "prompt_overhead_us": 9.5}  # fmt: skip
KEYS = sorted({*ACCELERATOR, *LINK, *EFFICIENCY, "mfu_prefil", "peak_tflop", "efficiency"})


@st.composite
def mutated_mapping(draw, base: dict) -> str:
    """``base`` with a few fields replaced, added or dropped, as YAML (or broken text)."""
    doc = dict(base)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 3))
        key = draw(st.sampled_from(KEYS))
        if op == 0:
            doc.pop(key, None)
        else:
            doc[key] = draw(hostile_value)
    if draw(st.integers(0, 9)) == 0:
        return draw(hostile_text)
    return yaml.safe_dump(doc, allow_unicode=True) if draw(st.booleans()) else json.dumps(doc)


@settings(max_examples=1000, **FUZZ)
@given(text=st.one_of(mutated_mapping(ACCELERATOR), mutated_mapping(LINK)))
def test_fuzz_hardware_files(fuzz_dir: Path, text: str) -> None:
    from prefixbench.catalog.userfile import load_hardware

    path = fuzz_dir / "hw.yaml"
    with _timed("hardware files"):
        path.write_text(text)
        try:
            spec = load_hardware(path)
        except PrefixbenchError as e:
            _clear(e)
            return
        for k, v in spec.model_dump().items():
            if isinstance(v, float):  # strict: no bool read as a number, floors held
                assert math.isfinite(v) and v >= 0, (k, v)
        floors = (("peak_tflops", 1e-3), ("hbm_gbps", 1e-3), ("bandwidth_gbps", 1e-6),
                  ("ceiling_gbps", 1e-6))  # fmt: skip
        for k, floor in floors:
            v = getattr(spec, k, floor)
            assert v is None or v >= floor, (k, v)


@settings(max_examples=1000, **FUZZ)
@given(text=mutated_mapping(EFFICIENCY))
def test_fuzz_efficiency_files(fuzz_dir: Path, text: str) -> None:
    from prefixbench.scenario.loader import load_efficiency

    path = fuzz_dir / "eff.yaml"
    with _timed("efficiency files"):
        path.write_text(text)
        try:
            eff = load_efficiency(path)
        except PrefixbenchError as e:
            _clear(e)
            return
        assert 0 < eff.mfu_prefill <= 1 and 0 < eff.mfu_decode <= 1 and 0 < eff.mbu <= 1
        assert 0 <= eff.prompt_overhead_us <= 1e4 and 0 <= eff.request_overhead_ms <= 1e4
        raw = yaml.safe_load(text)
        raw = raw.get("efficiency", raw) if isinstance(raw, dict) else raw
        assert not any(isinstance(v, bool) for v in raw.values()), raw  # true is not 1.0


CSV_ROWS = ["prefill,512,,0,1,40.0", "prefill,4096,,0,1,300.0", "decode,,8,1024,1,12.0",
            "decode,,64,2048,1,20.0"]  # fmt: skip


@st.composite
def calibrate_profile(draw) -> tuple[str, str]:
    if draw(st.booleans()):
        rows = list(CSV_ROWS)
        for _ in range(draw(st.integers(0, 3))):
            i = draw(st.integers(0, len(rows) - 1))
            cells = rows[i].split(",")
            cells[draw(st.integers(0, 5))] = str(draw(hostile_value))
            rows[i] = ",".join(cells)
        if draw(st.integers(0, 4)) == 0:  # duplicates are one point, not several
            rows += [draw(st.sampled_from(rows))] * draw(st.integers(1, 20))
        header = draw(
            st.sampled_from(
                ["phase,tokens,batch,context,devices,ms"] * 6
                + [
                    "phase,tokens,batch,context,devices",
                    "phase,tokens,batch,context,devices,ms,extra",
                    "Phase,Tokens,Batch,Context,Devices,MS",
                    "ms,phase,tokens,batch,context,devices",
                ]
            )
        )
        bom = "\ufeff" if draw(st.booleans()) else ""
        return "p.csv", bom + header + "\n" + "\n".join(rows) + "\n"
    doc = {"avg_latency": 1.5, "input_len": 512, "output_len": 128, "batch_size": 1}
    for _ in range(draw(st.integers(1, 3))):
        doc[draw(st.sampled_from(["avg_latency", "input_len", "output_len", "batch_size",
                                  "model_id", "max_concurrency"]))] = draw(hostile_value)  # fmt: skip
    return "r.json", json.dumps(doc, allow_nan=True)


@settings(max_examples=900, **FUZZ)
@given(case=calibrate_profile(), devices=st.sampled_from([1, 2, 0, -3, 5000]))
def test_fuzz_calibrate_profiles(fuzz_dir: Path, case, devices: int) -> None:
    from prefixbench.physics.calibrate import calibrate

    name, text = case
    path = fuzz_dir / name
    with _timed("calibrate profiles"):
        path.write_text(text, encoding="utf-8")
        try:
            res = calibrate([str(path)], model="qwen2-0.5b", devices=devices)
        except PrefixbenchError as e:
            _clear(e)
            return
        for k, v in res["efficiency"].items():
            assert math.isfinite(v) and v >= 0, (k, v)


# ------------------------------------------------------------------ trace lines


def _mooncake_line(draw) -> str:
    rec: dict[str, Any] = {
        "timestamp": draw(st.integers(0, 10_000)),
        "input_length": draw(st.integers(1, 2000)),
        "output_length": draw(st.integers(1, 500)),
    }
    rec["hash_ids"] = list(range(-(-rec["input_length"] // 512)))
    if draw(st.integers(0, 3)) == 0:
        rec[draw(st.sampled_from([*rec, "extra"]))] = draw(hostile_value)
    text = json.dumps(rec, allow_nan=True)
    if draw(st.integers(0, 15)) == 0:
        text = text.replace(str(rec.get("input_length", 1)), HUGE_DIGITS, 1)
    return text


def _azure_line(draw) -> str:
    cells = [
        f"2023-11-16 18:{draw(st.integers(10, 59)):02d}:{draw(st.integers(10, 59)):02d}.1234567",
        str(draw(st.integers(1, 4000))),
        str(draw(st.integers(1, 500))),
    ]
    if draw(st.integers(0, 3)) == 0:
        cells[draw(st.integers(0, 2))] = draw(hostile_text).replace("\n", " ")
    return ",".join(cells)


def _azure2024_line(draw) -> str:
    off = draw(st.sampled_from(["+00:00", "-07:00", "+14:00", "+25:00", "+00:99", "Z", ""]))
    cells = [f"2024-05-10 00:{draw(st.integers(10, 59)):02d}:00.009930{off}",
             str(draw(st.integers(1, 4000))), str(draw(st.integers(1, 500)))]  # fmt: skip
    if draw(st.integers(0, 3)) == 0:
        cells[draw(st.integers(0, 2))] = draw(hostile_text).replace("\n", " ")
    return ",".join(cells)


def _burstgpt_line(draw) -> str:
    req, resp = draw(st.integers(0, 4000)), draw(st.integers(0, 500))
    cells = [str(draw(st.integers(0, 10_000))), draw(st.sampled_from(["ChatGPT", "GPT-4"])),
             str(req), str(resp), str(req + resp),
             draw(st.sampled_from(["Conversation log", "API log"]))]  # fmt: skip
    if draw(st.integers(0, 3)) == 0:
        cells[draw(st.integers(0, 5))] = draw(hostile_text).replace("\n", " ")
    return ",".join(cells)


def _bailian_line(draw) -> str:
    n = draw(st.integers(1, 600))
    rec: dict[str, Any] = {
        "chat_id": draw(st.integers(0, 50)), "parent_chat_id": draw(st.integers(-1, 50)),
        "timestamp": draw(st.floats(0, 1e4, allow_nan=False)), "input_length": n,
        "output_length": draw(st.integers(1, 300)), "type": "text",
        "turn": draw(st.integers(1, 5)), "hash_ids": list(range(-(-n // 16))),
    }  # fmt: skip
    if draw(st.integers(0, 3)) == 0:
        rec[draw(st.sampled_from([*rec, "extra"]))] = draw(hostile_value)
    return json.dumps(rec, allow_nan=True)


TRACE_FORMATS = {  # format -> (file name, header line or None, one-line generator)
    "mooncake": ("t.jsonl", None, _mooncake_line),
    "azure": ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", _azure_line),
    "azure-2024": ("t24.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", _azure2024_line),
    "burstgpt": ("b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
                 _burstgpt_line),
    "bailian": ("qwen_blksz_16.jsonl", None, _bailian_line),
    "mooncake-gz": ("t.jsonl.gz", None, _mooncake_line),
}  # fmt: skip
READ_AS = {"azure-2024": "azure", "mooncake-gz": None}  # None: sniffed from the name


@st.composite
def trace_file(draw) -> tuple[str, bytes, bool]:
    fmt = draw(st.sampled_from(sorted(TRACE_FORMATS)))
    _, header, line = TRACE_FORMATS[fmt]
    lines = [line(draw) for _ in range(draw(st.integers(1, 6)))]
    if draw(st.integers(0, 5)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.text(max_size=20)))
    if header is not None:
        lines.insert(0, header)
    raw = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    import gzip

    if fmt.endswith("-gz"):
        raw = gzip.compress(raw, mtime=0)
    elif draw(st.integers(0, 5)) == 0:  # gzip under the plain name, sometimes cut short
        raw = gzip.compress(raw, mtime=0)
        raw = raw[: draw(st.integers(2, len(raw)))]
    return fmt, raw, draw(st.booleans())


@settings(max_examples=2400, **FUZZ)
@given(case=trace_file())
def test_fuzz_trace_lines(fuzz_dir: Path, case) -> None:
    import numpy as np

    from prefixbench.workload.traces import read_trace

    fmt, raw, skip_bad = case
    path = fuzz_dir / TRACE_FORMATS[fmt][0]
    with _timed(f"{fmt} trace lines"):
        path.write_bytes(raw)
        try:
            load = read_trace(path, READ_AS.get(fmt, fmt), skip_bad=skip_bad)
        except PrefixbenchError as e:
            _clear(e, where=str(path))
            return
        req = load.requests
        req.validate()
        assert np.all(np.isfinite(req.arrival)) and np.all(np.diff(req.arrival) >= 0)
        assert np.all(req.prompt_len >= 1) and np.all(req.output_len >= 1)


# ------------------------------------------------------------------ Parquet results


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, pl.DataFrame]:
    from prefixbench.io.artifacts import read_artifact
    from prefixbench.study.backends import SerialBackend
    from prefixbench.study.grid import build_spec
    from prefixbench.study.sweep import run_sweep

    out = tmp_path_factory.mktemp("fuzz_results")
    spec = build_spec(
        {"models": ["qwen2-0.5b"], "workloads": ["tool_call"], "budgets": [0.5, 1.0],
         "seeds": [0, 1], "set": ["run.requests=300", "run.warmup_requests=30"]}
    )  # fmt: skip
    run_sweep(spec, out, backend=SerialBackend())
    frames = {k: read_artifact(out / f"{k}.parquet", k) for k in ("runs", "agg")}
    from prefixbench.metrics.invariants import violations

    for row in frames["runs"].to_dicts():  # the runs the fixture made obey every invariant
        COUNTS["simulated (sweep fixture rows)"] += 1
        assert violations(row) == [], violations(row)
    return frames


@st.composite
def hostile_frame(draw, frames: dict[str, pl.DataFrame]) -> tuple[str, pl.DataFrame, Any]:
    kind = draw(st.sampled_from(["runs", "agg"]))
    df = frames[kind]
    op = draw(st.sampled_from(["value", "value", "value", "empty", "dup", "string", "meta"]))
    meta: Any = {"points": 4, "of": 4}
    if op == "empty":
        df = df.head(0)
    elif op == "dup":
        df = pl.concat([df, df.slice(draw(st.integers(0, df.height - 1)), 1)])
    elif op == "string":
        col = draw(st.sampled_from([c for c, t in df.schema.items() if t == pl.Utf8]))
        df = df.with_columns(pl.lit(draw(st.sampled_from(HOSTILE[-6:]))).alias(col))
    elif op == "meta":
        meta = draw(st.sampled_from([[1], "x", 3, {"points": "x", "of": 4}, {"of": None},
                                     {"points": True}, {"scenario": []}]))  # fmt: skip
    else:
        col = draw(st.sampled_from([c for c, t in df.schema.items() if t == pl.Float64]))
        v = draw(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 1e300, 0.0, 2.0]))
        row = draw(st.integers(0, df.height - 1))
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) == row).then(v).otherwise(pl.col(col)).alias(col)
        )
    return kind, df, meta


@settings(max_examples=250, **FUZZ)
@given(data=st.data())
def test_fuzz_parquet_results(fuzz_dir: Path, results, data) -> None:
    from prefixbench.io.artifacts import artifact_meta, read_artifact, write_atomic
    from prefixbench.study.crossover import crossover_table
    from prefixbench.study.recommend import recommend

    kind, df, meta = data.draw(hostile_frame(results))
    path = fuzz_dir / f"{kind}.parquet"
    with _timed("Parquet results (schema-valid, hostile content)"):
        if isinstance(meta, dict):
            write_atomic(df, path, kind, meta)
        else:  # metadata of the wrong JSON type: written by hand, as another tool might
            write_atomic(df, path, kind)
            raw = pl.read_parquet(path)
            raw.write_parquet(path, metadata={"prefixbench.kind": kind,
                                              "prefixbench.schema_version": "1",
                                              "prefixbench.meta": json.dumps(meta)})  # fmt: skip
        try:
            got = read_artifact(path, kind)
            artifact_meta(path)
        except PrefixbenchError as e:
            _clear(e, where=str(path))
            return
        # accepted: the consumers must cope (a clear error, or a table)
        agg = got if kind == "agg" else results["agg"]
        runs = got if kind == "runs" else results["runs"]
        try:
            recommend(agg, runs, "balanced")
            crossover_table(["qwen2-0.5b"], ["l4"], ["eth-25g"], agg)
        except PrefixbenchError as e:
            _clear(e)


# ------------------------------------------------------------------ file types


def _special(kind: str, d: Path, name: str) -> Path:
    p = d / f"{kind}-{name}"
    if kind == "directory":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "symlink-loop":
        other = d / f"loop-{name}"
        p.symlink_to(other)
        other.symlink_to(p)
    elif kind == "huge":  # sparse: no disk used; 200 MB where a small text file belongs
        big = name.endswith((".yaml", ".json"))
        with open(p, "wb") as fh:
            fh.truncate((200 if big else 20) * 1024 * 1024)
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "binary":
        p.write_bytes(bytes(range(256)) * 8)
    elif kind == "device":
        return Path("/dev/zero")
    elif kind == "urandom":
        return Path("/dev/urandom")
    elif kind == "missing":
        pass
    elif kind == "long-name":
        return d / ("n" * 5000 + name)
    return p


FILE_KINDS = ["directory", "fifo", "symlink-loop", "huge", "empty", "binary", "device",
              "urandom", "missing", "long-name"]  # fmt: skip


def _roles():
    from prefixbench.catalog.hfconfig import load_hf_config
    from prefixbench.io.artifacts import read_artifact
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.grid import load_sweep_file
    from prefixbench.workload.traces import read_trace

    return {
        "scenario.yaml": lambda p: load_scenario(str(p)),
        "grid.yaml": lambda p: load_sweep_file(p),
        "trace.jsonl": lambda p: read_trace(p, "mooncake"),
        "trace.csv": lambda p: read_trace(p, "azure"),
        "config.json": lambda p: load_hf_config(p),
        "agg.parquet": lambda p: read_artifact(p, "agg"),
    }


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_fuzz_file_types(tmp_path: Path, kind: str) -> None:
    for role, read in _roles().items():
        path = _special(kind, tmp_path, role)
        t0 = time.perf_counter()
        with _timed("file types (directory, FIFO, device, loop, huge...)"):
            try:
                read(path)
            except PrefixbenchError as e:
                _clear(e)
            else:
                assert kind == "empty" and role == "grid.yaml", (kind, role)  # not reached
        assert time.perf_counter() - t0 < 5, f"{kind} as {role} took too long"


# ------------------------------------------------------------------ the CLI, in-process


class _Valid(Exception):
    """Raised instead of simulating: the CLI accepted the input."""


@pytest.fixture
def no_runs(monkeypatch):
    import prefixbench.study.runs as runs

    def accepted(*_a, **_k):
        raise _Valid

    monkeypatch.setattr(runs, "run_scenario", accepted)
    monkeypatch.setattr("prefixbench.cli.simulate.run_scenario", accepted, raising=False)
    monkeypatch.setattr("prefixbench.study.sweep.run_sweep", accepted)


def _encodable(args: list[str]) -> bool:
    """Command-line arguments are text a terminal can pass (no lone surrogates)."""
    try:
        "".join(args).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


cli_args = st.one_of(
    st.lists(override, min_size=1, max_size=2).map(
        lambda sets: ["run", *[a for s in sets for a in ("--set", s)]]
    ),
    st.tuples(
        st.sampled_from(["--seeds", "--budgets", "--models", "--policies"]), hostile_text
    ).map(lambda kv: ["sweep", kv[0], kv[1], "--out", "/nonexistent-fuzz/out"]),
    st.sampled_from(["h100", "nope", "", "l4\x1b[2J"]).map(
        lambda a: ["crossover", "/nonexistent-fuzz", "--accelerator", a]
    ),
)


@settings(max_examples=110, **FUZZ)
@given(args=cli_args)
def test_fuzz_cli(no_runs, args: list[str]) -> None:
    from prefixbench.cli import app

    assume(_encodable(args))
    with _timed("CLI (CliRunner, in-process)"):
        r = runner.invoke(app, args)
        if isinstance(r.exception, _Valid):
            return
        if r.exit_code == 0:
            return
        line = assert_one_stderr_line(r)
        assert "\x1b" not in line


# ------------------------------------------------------------------ a few real simulations


def _check_summary(row: dict, prep) -> None:
    from prefixbench.metrics.invariants import violations

    assert violations(row) == [], violations(row)  # every output invariant, in one place
    for k, v in row.items():
        if isinstance(v, float) and not math.isnan(v):
            assert math.isfinite(v), (k, v)
        # a latency is never negative; a growth (last third minus first third) may be
        if k.endswith("_ms") and "growth" not in k and isinstance(v, float) and not math.isnan(v):
            assert v >= 0, (k, v)
    for k in ("reject_rate", "slo_attainment", "replica_hit_rate", "shared_request_fraction"):
        assert 0 <= row[k] <= 1, (k, row[k])
    for k in ("link_util", "decode_util", "prefill_util"):
        assert 0 <= row[k] <= 1 + 1e-9, (k, row[k])
    arr = prep.requests.arrival[prep.scenario.run.warmup_requests :]
    span = float(arr[-1] - arr[0])
    if span > 0:
        offered = (len(arr) - 1) / span
        assert row["throughput_rps"] <= 1.5 * offered + 1e-9, (row["throughput_rps"], offered)


@settings(max_examples=30, **FUZZ)
@given(preset=st.sampled_from(PRESETS), sets=st.lists(override, min_size=1, max_size=2))
def test_fuzz_simulate_valid_scenarios(preset: str, sets: list[str]) -> None:
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.runs import run_scenario

    with _timed("--set paths and values (sampled for simulation)"):
        try:
            s = load_scenario(preset, [*sets, "run.requests=300", "run.warmup_requests=30"])
        except PrefixbenchError as e:
            _clear(e)
            s = None
    assume(s is not None)
    with _timed("simulated (valid scenarios, 300 requests)"):
        try:
            t = run_scenario(s, ["transfer_per_request", "replicate_all_lru"], keep_requests=False)
        except PrefixbenchError as e:
            _clear(e)
            return
        for row in t.summary.to_dicts():
            _check_summary(row, t.prepared)


# ------------------------------------------------------------------ recent scenario fields

# fields added since the last pass: host write policies, conditional_disagg's thresholds,
# the kv_aware routers and their overlap weight, generated-answer caching, the host tier
RECENT_FIELDS = {
    "memory.host_write_policy": ["write_back", "write_through", "write_through_selective"],
    "memory.cache_generated": [True, False],
    "memory.host_memory_gb": [0.001, 0.5, 6.6, 64.0],
    "memory.preemption": ["recompute", "swap"],
    "memory.admission": ["paged", "reserve"],
    "cluster.max_local_prefill_tokens": [0, 1, 512, 1000, 100000],
    "cluster.local_prefill_hit_ratio": [0.0, 0.5, 0.99, 1.0],
    "cluster.kv_overlap_weight": [0.0, 0.5, 1.0, 4.0],
    "cluster.prefill_router": ["least_tokens", "round_robin", "kv_aware"],
    "cluster.decode_router": ["least_load", "prefix_affinity", "round_robin", "kv_aware"],
    "memory.hotset_refresh_s": [0.001, 0.5, 30.0],
    "cluster.chunk_token_budget": [65, 1024, 65536],
}  # fmt: skip
RECENT_POLICIES = ["conditional_disagg", "replicate_tiered", "cost_aware", "replicate_all_lru"]


def _yaml_value(v) -> str:
    return json.dumps(v) if not isinstance(v, str) else v


def _override(fields: dict) -> st.SearchStrategy:
    """``path=value`` for one of ``fields``: hostile text, a hostile value, or one of the
    listed values (of a path drawn on its own, as before)."""
    paths = sorted(fields)
    return st.tuples(
        st.sampled_from(paths),
        st.one_of(
            hostile_text,
            hostile_value.map(lambda v: json.dumps(v, allow_nan=True)),
            st.sampled_from(paths).flatmap(lambda k: st.sampled_from(fields[k]).map(_yaml_value)),
        ),
    ).map(lambda kv: f"{kv[0]}={kv[1]}")


def _legal_sets(fields: dict, max_size: int) -> st.SearchStrategy:
    """1 to ``max_size`` overrides, each a listed value of its own path."""
    return st.lists(
        st.sampled_from(sorted(fields)).flatmap(
            lambda k: st.sampled_from(fields[k]).map(lambda v: f"{k}={_yaml_value(v)}")
        ),
        min_size=1,
        max_size=max_size,
    )


recent_override = _override(RECENT_FIELDS)


@settings(max_examples=3000, **FUZZ)
@given(preset=st.sampled_from(PRESETS), sets=st.lists(recent_override, min_size=1, max_size=4))
def test_fuzz_recent_fields(preset: str, sets: list[str]) -> None:
    """Hostile and legal values of every field added since the last pass (validation)."""
    with _timed("recent fields (host write policy, conditional, kv_aware, cache_generated)"):
        _set_then_validate(preset, sets)


legal_recent = _legal_sets(RECENT_FIELDS, max_size=4)


def _simulate_checked(spec: list[str], policies: list[str], label: str, check=None) -> None:
    """Load ``spec`` (a preset, then overrides) at 40 requests and simulate ``policies``:
    a refusal is one clear line, and every summary row obeys every output invariant (and
    ``check(row, scenario)``)."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.runs import run_scenario

    tiny = ["run.requests=40", "run.warmup_requests=4"]
    try:
        s = load_scenario(spec[0], [*tiny, *spec[1:]])
    except PrefixbenchError as e:
        _clear(e)
        s = None
    assume(s is not None)
    with _timed(f"simulated ({label})"):
        try:
            t = run_scenario(s, policies, keep_requests=False)
        except PrefixbenchError as e:
            _clear(e)
            return
        for row in t.summary.to_dicts():
            _check_summary(row, t.prepared)
            if check is not None:
                check(row, s)


@settings(max_examples=60, **FUZZ)
@given(
    preset=st.sampled_from(["tool_call", "multi_turn_chat", "enterprise_hotset"]),
    sets=legal_recent,
    shape=st.sampled_from([[], ["cluster.decode_instances=2"], ["cluster.prefill_instances=2"],
                           ["workload.arrivals.rate=100"], ["run.warmup_requests=0"]]),
)  # fmt: skip
def test_fuzz_recent_fields_simulated(preset: str, sets: list[str], shape: list[str]) -> None:
    """Legal values of the recent fields, simulated (40 requests) under the policies that
    read them: every summary row obeys every output invariant."""
    _simulate_checked(
        [preset, *sets, *shape], RECENT_POLICIES, "recent fields, 40 requests, 4 policies"
    )


# ------------------------------------------------------------------ fields merged since

# fields merged after the lists above: the shared L3 store (replicate_tiered), SGLang's
# reserved decode tokens and prefill-side KV hold (paged admission), cost_aware's local
# prefill, swap into a small host memory, the NICs' ceiling and the per-prompt-token cost
MERGED_FIELDS = {
    "memory.l3_store_gb": [0.0, 1e-6, 0.05, 1.0, 50.0],
    "memory.l3_store_gbps": [0.008, 0.2, 200.0, 1e6],
    "memory.reserved_decode_tokens": [0, 1, 16, 512, 100000, 2**31 - 1],
    "memory.prefill_hold": [True, False],
    "cluster.cost_aware_local_prefill": [True, False],
    "memory.preemption": ["swap", "swap", "recompute"],
    "cluster.decode.host_memory_gb": [1e-6, 0.001, 0.01, 0.1, 2.0],
    "memory.budget_factor": [0.35, 0.5, 1.0],  # tight budgets preempt: swap and reserve act
    "cluster.link.ceiling_gbps": [0.001, 0.5, 3.0, 190.0, 1e5],
    "cluster.link.nics_per_instance": [1, 2, 8],
    "efficiency.prompt_overhead_us": [0.0, 9.5, 40.0, 10000.0],
}  # fmt: skip
MERGED_POLICIES = ["replicate_tiered", "cost_aware", "transfer_per_request"]

merged_override = _override(MERGED_FIELDS)


@settings(max_examples=1500, **FUZZ)
@given(preset=st.sampled_from(PRESETS), sets=st.lists(merged_override, min_size=1, max_size=4))
def test_fuzz_merged_fields(preset: str, sets: list[str]) -> None:
    """Hostile and legal values of the fields merged since (L3 store, reserved decode
    tokens, prefill hold, cost_aware's local prefill, swap's host memory, the NICs'
    ceiling, the per-prompt-token cost): one clear line, or a scenario within bounds."""
    with _timed("merged fields (L3 store, reserved tokens, hold, swap, ceiling, prompt cost)"):
        s = _set_then_validate(preset, sets)
        if s is None:
            return
        c, m = s.cluster, s.memory  # the physical floors hold (docs/reliability.md)
        assert c.link.ceiling_gbps is None or c.link.ceiling_gbps >= 1e-3, c.link.ceiling_gbps
        assert m.l3_store_gbps >= 0.008 and m.l3_store_gb >= 0, m
        assert 0 <= m.reserved_decode_tokens < 2**31 and isinstance(m.prefill_hold, bool)
        assert 0 <= s.efficiency.prompt_overhead_us <= 1e4


legal_merged = _legal_sets(MERGED_FIELDS, max_size=5)


def _check_merged(row: dict, s) -> None:
    """What the merged fields promise beyond the output invariants: no store, no L3 hits
    (and only replicate_tiered reads one)."""
    if s.memory.l3_store_gb == 0 or row["policy"] != "replicate_tiered":
        assert row.get("l3_hit_rate", 0) == 0, (row["policy"], row.get("l3_hit_rate"))


@settings(max_examples=60, **FUZZ)
@given(
    preset=st.sampled_from(["tool_call", "multi_turn_chat", "medium_chat"]),
    sets=legal_merged,
    shape=st.sampled_from([[], ["memory.preemption=swap", "memory.budget_factor=0.35",
                                "run.requests=120"], ["cluster.decode_instances=2"],
                           ["workload.arrivals.rate=100"], ["run.warmup_requests=0"]]),
)  # fmt: skip
def test_fuzz_merged_fields_simulated(preset: str, sets: list[str], shape: list[str]) -> None:
    """Legal values of the merged fields, simulated (40 requests; 120 with a tight budget
    and swap) under replicate_tiered, cost_aware and transfer_per_request: every summary
    row obeys every output invariant."""
    _simulate_checked(
        [preset, *sets, *shape],
        MERGED_POLICIES,
        "merged fields, 40-120 requests, 3 policies",
        _check_merged,
    )


# ------------------------------------------------------------------ launch commands (import)

LLAMA = "meta-llama/Llama-3.1-8B"
VLLM_FLAGS = ["--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "--data-parallel-size",
              "--gpu-memory-utilization", "--kv-cache-dtype", "--block-size", "--max-num-seqs",
              "--max-num-batched-tokens", "--enable-prefix-caching", "--enable-chunked-prefill",
              "--kv-transfer-config", "--speculative-config", "--quantization", "--swap-space",
              "--max-model-len", "--no-such-flag"]  # fmt: skip
SGLANG_FLAGS = ["--tp-size", "--dp-size", "--mem-fraction-static", "--page-size",
                "--max-running-requests", "--chunked-prefill-size",
                "--disaggregation-transfer-backend", "--enable-hierarchical-cache",
                "--hicache-ratio", "--hicache-size", "--hicache-write-policy",
                "--speculative-algorithm", "--speculative-num-steps", "--disable-radix-cache",
                "--quantization", "--bogus"]  # fmt: skip
BENCH_FLAGS = ["--request-rate", "--num-prompts", "--random-input-len", "--random-output-len",
               "--random-range-ratio", "--random-prefix-len", "--dataset-name", "--burstiness",
               "--max-concurrency", "--prefix-repetition-num-prefixes", "--seed"]  # fmt: skip
KV_CONFIGS = ['{"kv_connector":"NixlConnector","kv_role":"kv_producer"}',
              '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}',
              '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}', '{"kv_role": 5}',
              '{', '[]', '{"kv_connector": "' + "x" * 300 + '"}']  # fmt: skip
FLAG_VALUES = ["1", "2", "8", "0", "-1", "0.9", "1.5", "nan", "inf", "fp8", "auto", "16",
               "write_through", "write_back", "EAGLE", "99999999999999999999", "", "'a b'",
               "\x1b[2J", *KV_CONFIGS]  # fmt: skip


def _flag_words(draw, flags: list[str], n: int) -> str:
    words = []
    for _ in range(n):
        words.append(draw(st.sampled_from(flags)))
        if draw(st.integers(0, 4)):
            v = draw(st.one_of(st.sampled_from(FLAG_VALUES), hostile_text))
            words.append("'" + v.replace("'", "") + "'")
    return " ".join(words)


@st.composite
def launch_commands(draw) -> dict:
    stack = draw(st.sampled_from(["vllm", "sglang", "colocated"]))
    flags = SGLANG_FLAGS if stack == "sglang" else VLLM_FLAGS
    head = "python -m sglang.launch_server --model-path " if stack == "sglang" else "vllm serve "
    model = draw(st.sampled_from([LLAMA, "Qwen/Qwen2-0.5B", "nope/none", ""]))
    bench = "vllm bench serve " + _flag_words(draw, BENCH_FLAGS, draw(st.integers(0, 4)))
    cmds: dict = {"bench": bench if draw(st.integers(0, 15)) else draw(hostile_text)}
    if stack == "colocated":
        cmds["serve"] = head + model + " " + _flag_words(draw, flags, draw(st.integers(0, 4)))
    else:
        extra = {"sglang": (" --disaggregation-mode prefill", " --disaggregation-mode decode"),
                 "vllm": (" --kv-transfer-config '" + KV_CONFIGS[0] + "'",
                          " --kv-transfer-config '" + KV_CONFIGS[1] + "'")}[stack]  # fmt: skip
        for role, tail in zip(("prefill", "decode"), extra, strict=True):
            words = _flag_words(draw, flags, draw(st.integers(0, 4)))
            cmds[role] = head + model + tail + " " + words
    cmds["hardware"] = draw(st.sampled_from([None, "h100-sxm", "l4", "nope"]))
    return cmds


@settings(max_examples=1500, **FUZZ)
@given(cmds=launch_commands())
def test_fuzz_launch_import(cmds: dict) -> None:
    """Launch and bench commands (prefixbench import): one clear line, or a scenario that
    validates as `run` reads it."""
    from prefixbench.scenario.launch.importer import import_deployment

    with _timed("launch commands (import: vLLM, SGLang, bench)"):
        try:
            result = import_deployment(**cmds)
        except PrefixbenchError as e:
            _clear(e)
            return
        json.dumps(result.scenario, allow_nan=False)  # the scenario is strict data
        assert _validate_or_refuse(result.scenario, "import") is not None


# ------------------------------------------------------------------ the count


def test_fuzz_ran_at_least_twenty_thousand_inputs(request) -> None:
    """Last in the file: every target above ran, and together they made >= 20,000 inputs."""
    names = [i.name for i in request.session.items if i.module is request.module]
    if len(names) < 10:  # a subset was selected (-k): nothing to count
        pytest.skip("only part of the fuzzer ran")
    total = sum(COUNTS.values())
    assert total >= MIN_TOTAL, dict(COUNTS)
    assert len(COUNTS) >= 24 and min(COUNTS.values()) > 0, dict(COUNTS)  # every target ran
