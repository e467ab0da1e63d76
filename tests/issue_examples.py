"""Every example of the third robustness pass (docs/reliability.md, "Third pass"), run
through the installed CLI in fresh processes: each prints one line ``ok``/``FAIL``, the
time it took and what it saw. An input that should be refused must end in one stderr line
(``error: …``), a non-zero exit and no traceback; a run that should succeed must print
correct numbers (every share in [0, 1]); nothing may take 60 s.

    python tests/issue_examples.py            # all, in a scratch folder
    python tests/issue_examples.py calibrate  # those whose name contains "calibrate"

Not collected by pytest (no ``test_`` prefix): it takes a few minutes of CPU.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT_S = 60.0
ENV = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb", "PREFIXBENCH_STRICT": "1"}
CLI = [sys.executable, "-m", "prefixbench"]
TINY = ["--set", "run.requests=60", "--set", "run.warmup_requests=6"]


def _cli(args, *, preexec=None, timeout=LIMIT_S):
    t0 = time.perf_counter()
    try:
        r = subprocess.run([*CLI, *args], env=ENV, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=preexec)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0
    return r, time.perf_counter() - t0


def refused(args, must=None, **kw):
    """One stderr line starting ``error:``, a non-zero exit, no traceback (``must`` in it)."""
    r, dt = _cli(args, **kw)
    if r is None:
        return False, dt, "timed out"
    lines = r.stderr.strip().splitlines()
    ok = (r.returncode not in (0, -6) and len(lines) == 1 and lines[0].startswith("error: ")
          and "Traceback" not in r.stdout + r.stderr)  # fmt: skip
    if ok and must and must not in lines[0]:
        ok = False
    return ok, dt, (lines[0] if len(lines) == 1 else f"exit {r.returncode}: {r.stderr[-300:]}")


def _shares(obj, path=""):
    """Every share (util, MFU, MBU, rate) in a JSON answer outside [0, 1]."""
    from prefixbench.metrics.invariants import violations

    bad = []
    if isinstance(obj, dict):
        bad += violations({k: v for k, v in obj.items() if isinstance(v, float)})
        for k, v in obj.items():
            bad += _shares(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            bad += _shares(v, path)
    return bad


def numbers(args, check=None):
    """Exit 0, strict JSON, every share in [0, 1] (and ``check(doc)`` true)."""
    r, dt = _cli([*args, "--json"])
    if r is None:
        return False, dt, "timed out"
    if r.returncode != 0:
        return False, dt, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    doc = json.loads(r.stdout)
    bad = _shares(doc)
    if check and not bad:
        msg = check(doc)
        if msg:
            bad = [msg]
    return not bad, dt, "; ".join(bad[:3]) or "numbers in range"


def succeeds(args, check=None):
    r, dt = _cli(args)
    if r is None:
        return False, dt, "timed out"
    msg = check() if (check and r.returncode == 0) else None
    ok = r.returncode == 0 and not msg and "Traceback" not in r.stderr
    return ok, dt, msg or (r.stderr.strip()[-200:] if r.returncode else "done")


# ---------------------------------------------------------------------------- inputs


def _mooncake(p: Path, stamps) -> Path:
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": 600, "output_length": 4,
                                     "hash_ids": [1, 2]}) + "\n" for t in stamps))  # fmt: skip
    return p


def _latency(d: Path, **kw) -> Path:
    p = d / f"lat{len(list(d.glob('lat*')))}.json"
    p.write_text(json.dumps({"avg_latency": 1.5, "latencies": [1.5], **kw}))
    return p


def _acc(d: Path, **kw) -> Path:
    doc = {"hardware": "accelerator", "name": "mine", "peak_tflops": 100, "hbm_gbps": 1000,
           "memory_gb": 80, "source": "user", **kw}  # fmt: skip
    p = d / f"acc{len(list(d.glob('acc*')))}.yaml"
    p.write_text(json.dumps(doc))
    return p


def _csv(d: Path, name: str, scale=1.0, copies=1, bom=False) -> Path:
    rows = []
    for tokens in (512, 1024, 2048, 4096, 8192):
        rows.append(f"prefill,{tokens},,0,1,{(5 + tokens * 0.02) * scale:.6f}")
    for batch, ctx in ((1, 1024), (8, 1024), (32, 2048), (64, 4096), (128, 4096)):
        rows.append(f"decode,,{batch},{ctx},1,{(4 + batch * ctx * 2e-5) * scale:.6f}")
    text = "phase,tokens,batch,context,devices,ms\n" + "\n".join(rows * copies) + "\n"
    p = d / name
    p.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return p


def _limit_as(gb: float):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (int(gb * 1e9), resource.RLIM_INFINITY))

    return set_limit


def _results(d: Path) -> Path:
    """A tiny study folder (a sweep of 2 budgets x 2 seeds, 200 requests), made read-only."""
    out = d / "results"
    if not out.exists():
        r, _ = _cli(["sweep", "--models", "qwen2-0.5b", "--workloads", "tool_call",
                     "--budgets", "0.5,1.0", "--seeds", "0,1", "-j", "1", "--set",
                     "run.requests=200", "--set", "run.warmup_requests=20", "--out", str(out)],
                    timeout=600)  # fmt: skip
        assert r is not None and r.returncode == 0, r and r.stderr
        for p in [out, *out.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
    return out


def _untouched(folder: Path, before: list[str]):
    return lambda: None if sorted(p.name for p in folder.rglob("*")) == before else "changed"


# ---------------------------------------------------------------------------- the cases


def _inputs(d: Path) -> dict:
    """The files the examples read, made in the scratch folder ``d``."""
    gzblank = d / "blank.jsonl.gz"
    if not gzblank.exists():
        with gzip.open(gzblank, "wb", compresslevel=1) as fh:
            for _ in range(512):
                fh.write(b"\n" * (1 << 20))
    hugeline = d / "huge.jsonl"
    if not hugeline.exists():
        hugeline.write_bytes(b'{"timestamp": ' + b"1" * (300 << 20) + b"}\n")
    big_csv = d / "big.csv"
    with open(big_csv, "wb") as f:
        f.write(b"phase,tokens,batch,context,devices,ms\n")
        f.truncate(200 << 20)
    grid = d / "seeds.yaml"
    grid.write_text("seeds: [" + ",".join(map(str, range(100_000))) + "]\n")
    small_grid = d / "g.yaml"
    small_grid.write_text("seeds: [0]\n")
    span = _mooncake(d / "span.jsonl", [0, 1e17])
    plain = _mooncake(d / "ok.jsonl", [0, 100, 200, 300, 400, 500])
    gz = d / "ok.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    az = {}
    for off in ("+25:00", "+00:99"):
        az[off] = d / f"az{off[1:3]}{off[4:]}.csv"
        az[off].write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                           f"2024-05-10 00:00:00.000000{off},100,5\n"
                           "2024-05-10 00:00:01.000000+00:00,100,5\n")  # fmt: skip
    hf = d / "hf"
    hf.mkdir(exist_ok=True)
    (hf / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
         "intermediate_size": 4864, "max_position_embeddings": 32768,
         "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
         "vocab_size": 151936, "torch_dtype": "bfloat16", "tie_word_embeddings": "false"}))  # fmt: skip
    eff_typo = d / "eff_typo.yaml"
    eff_typo.write_text("mfu_prefil: 0.4\n")
    eff_true = d / "eff_true.yaml"
    eff_true.write_text("mbu: true\n")
    link = d / "mylink.yaml"
    link.write_text("hardware: link\nname: my-link\nbandwidth_gbps: 3\nlatency_us: 5\n"
                    "source: user\n")  # fmt: skip
    evil = d / "evil\x1b[31m.yaml"
    evil.write_text('hardware: accelerator\nname: "evil\\x1b[31mred"\npeak_tflops: 100\n'
                    "hbm_gbps: 1000\nmemory_gb: 80\nsource: user\n")  # fmt: skip
    ro = d / "ro"
    ro.mkdir(exist_ok=True)
    ro.chmod(0o555)
    (d / "afile").write_text("x")
    cal = ["-m", "llama-3.1-8b", "--input-len", "512", "--batch-size", "1"]
    run = ["run", "tool_call", "-p", "transfer_per_request", *TINY, "--out", str(d / "run")]
    return {
        "az": az,
        "big_csv": big_csv,
        "cal": cal,
        "eff_true": eff_true,
        "eff_typo": eff_typo,
        "evil": evil,
        "f": f,
        "grid": grid,
        "gz": gz,
        "gzblank": gzblank,
        "hf": hf,
        "hugeline": hugeline,
        "link": link,
        "plain": plain,
        "ro": ro,
        "run": run,
        "small_grid": small_grid,
        "span": span,
    }


def _hang_cases(d: Path, f: dict):
    """Hangs: each refused (or stopped) at once."""
    grid, gzblank, run = (f[k] for k in ("grid", "gzblank", "run"))
    yield (
        "hang: hotset_refresh_s 1e-300",
        lambda: refused(
            ["run", "enterprise_hotset", "--set", "memory.hotset_refresh_s=1e-300"],
            "hotset_refresh_s",
        ),
    )
    yield (
        "hang: hotset_refresh_s 1e-9",
        lambda: refused(
            ["run", "enterprise_hotset", "--set", "memory.hotset_refresh_s=1e-9"],
            "hotset_refresh_s",
        ),
    )
    yield (
        "hang: sweep of a 100,000-seed grid file",
        lambda: refused(["sweep", str(grid), "--out", str(d / "s100k")], "--max-runs"),
    )
    yield "hang: SIGINT during a 100,000-seed sweep (raised cap)", lambda: _interrupted(d, grid)
    yield (
        "hang: map --seeds 1000000",
        lambda: refused(
            ["map", "qwen2-0.5b", "--seeds", "1000000", "--out", str(d / "m")], "seeds"
        ),
    )
    yield (
        "hang: sweep -j -5",
        lambda: refused(["sweep", "-j", "-5", "--out", str(d / "j")], "--jobs"),
    )
    yield (
        "hang: sweep -j 1000",
        lambda: refused(["sweep", "-j", "1000", "--out", str(d / "j")], "--jobs"),
    )
    yield (
        "hang: 512 MiB of blank lines in a gzip",
        lambda: refused(["run", "--trace", str(gzblank), "--out", str(d / "b")], "blank"),
    )


def _calibrate_cases(d: Path, f: dict):
    """calibrate: each bad profile or option one line; good ones fit."""
    big_csv, cal = (f[k] for k in ("big_csv", "cal"))
    yield (
        "crash: calibrate 5,000-digit integer",
        lambda: refused(["calibrate", str(d / "big.json"), *cal, "--output-len", "8"]),
    )
    yield (
        "crash: calibrate deeply nested JSON",
        lambda: refused(["calibrate", str(_nested(d)), *cal, "--output-len", "8"]),
    )
    yield (
        "crash: calibrate model_id 5",
        lambda: refused(["calibrate", str(_latency(d, model_id=5)), *cal, "--output-len", "8"]),
    )
    yield (
        "crash: calibrate input_len abc",
        lambda: refused(
            [
                "calibrate",
                str(_latency(d, input_len="abc", output_len=8, batch_size=1)),
                "-m",
                "llama-3.1-8b",
            ]
        ),
    )
    yield (
        "crash: calibrate input_len [512]",
        lambda: refused(
            [
                "calibrate",
                str(_latency(d, input_len=[512], output_len=8, batch_size=1)),
                "-m",
                "llama-3.1-8b",
            ]
        ),
    )
    yield (
        "crash: calibrate --output-len 2e10",
        lambda: refused(
            ["calibrate", str(_latency(d)), *cal, "--output-len", "20000000000"], "output"
        ),
    )
    yield (
        "crash: calibrate --devices 0",
        lambda: refused(
            ["calibrate", str(_latency(d)), *cal, "--output-len", "8", "--devices", "0"], "devices"
        ),
    )
    yield (
        "numbers: calibrate --devices -3",
        lambda: refused(
            ["calibrate", str(_latency(d)), *cal, "--output-len", "8", "--devices", "-3"], "devices"
        ),
    )
    yield (
        "crash: calibrate fit out of bounds (us)",
        lambda: refused(
            ["calibrate", str(_csv(d, "us.csv", scale=1e3)), "-m", "llama-3.1-8b"], "range"
        ),
    )
    yield (
        "crash: calibrate 200 MB CSV",
        lambda: refused(["calibrate", str(big_csv), "-m", "llama-3.1-8b"], "larger"),
    )
    yield (
        "numbers: calibrate duplicate rows",
        lambda: refused(["calibrate", str(_dup(d)), "-m", "llama-3.1-8b"], "distinct"),
    )
    yield (
        "unclear: calibrate CSV with a UTF-8 BOM",
        lambda: numbers(["calibrate", str(_csv(d, "bom.csv", bom=True)), "-m", "llama-3.1-8b"]),
    )


def _crash_cases(d: Path, f: dict):
    """Crashes: each one line, no traceback."""
    hugeline, ro, run = (f[k] for k in ("hugeline", "ro", "run"))
    yield "crash: --requests-out read-only folder", lambda: (
        refused([*run, "--requests-out", str(ro / "r.jsonl")]) if os.geteuid() else
        (True, 0.0, "skipped: root ignores permission bits (run as a user to check)"))  # fmt: skip
    yield (
        "crash: --requests-out under a regular file",
        lambda: refused([*run, "--requests-out", str(d / "afile" / "r.jsonl")]),
    )
    yield (
        "crash: --requests-out 300-character name",
        lambda: refused([*run, "--requests-out", str(d / ("r" * 300 + ".jsonl"))]),
    )
    yield (
        "crash: session turns 1e9",
        lambda: numbers(
            [
                "run",
                "multi_turn_chat",
                "-p",
                "transfer_per_request",
                "--set",
                'workload.turns={"kind":"fixed","value":1000000000}',
                *TINY,
                "--out",
                str(d / "t"),
            ]
        ),
    )
    yield (
        "crash: cost --tokens 1e23",
        lambda: refused(["cost", "qwen2-0.5b", "--tokens", "99999999999999999999999"], "tokens"),
    )
    yield (
        "crash: ulimit -v 2 GB and 10M requests",
        lambda: refused(
            ["run", "tool_call", "--set", "run.requests=10000000"], "memory", preexec=_limit_as(2.0)
        ),
    )
    yield (
        "crash: a timeline too big for memory",
        lambda: refused(
            ["run", "tool_call", "--set", "run.requests=2000000", "--timeline", str(d / "tl.json")],
            "timeline",
            preexec=_limit_as(6.0),
        ),
    )
    yield (
        "crash: 300 MB trace line",
        lambda: refused(["run", "--trace", str(hugeline), "--out", str(d / "h")], "16 MiB"),
    )


def _numbers_cases(d: Path, f: dict):
    """Silently wrong numbers: refused, or correct."""
    az, f, grid, run, span = (f[k] for k in ("az", "f", "grid", "run", "span"))
    yield "numbers: recompute-only steps on an empty batch", lambda: numbers(
        ["run", "tool_call", "-p", "recompute_on_decode,conditional_disagg", "--set",
         "run.requests=10", "--set", "run.warmup_requests=1", "--set",
         "workload.arrivals.rate=100", "--set", "cluster.chunk_token_budget=65536",
         "--out", str(d / "e")])  # fmt: skip
    yield "numbers: MFU in a 3-request run", lambda: numbers(
        ["run", "tool_call", "--set", "run.requests=3", "--set", "run.warmup_requests=0",
         "--out", str(d / "three")])  # fmt: skip
    yield (
        "numbers: MFU at 1e7 req/s",
        lambda: numbers(
            [
                "run",
                "tool_call",
                "--set",
                "workload.arrivals.rate=1e7",
                *TINY,
                "--out",
                str(d / "r7"),
            ]
        ),
    )
    yield "numbers: decode_util between its min and max", lambda: numbers(
        ["run", "enterprise_hotset", "--set", "cluster.decode_instances=3", *TINY,
         "--out", str(d / "u")], check=_util_between)  # fmt: skip
    yield (
        "numbers: trace timestamps spanning 1e14 s",
        lambda: refused(["run", "--trace", str(span), "--out", str(d / "sp")], "span"),
    )
    for off, p in az.items():
        yield (
            f"numbers: Azure 2024 offset {off}",
            lambda p=p: refused(
                ["run", "--trace", str(p), "--trace-format", "azure", "--out", str(d / "az")], "UTC"
            ),
        )
    for field in ("memory.kv_budget_gb=4", "seed=3", "memory.budget_factor=0.5",
                  "policy=replicate_hotset"):  # fmt: skip
        yield (
            f"numbers: sweep --set {field}",
            lambda f=field: refused(["sweep", "--set", f, "--out", str(d / "sw")], "grid field"),
        )
    yield "numbers: sweep --set memory.admission with --admissions", lambda: refused(
        ["sweep", "--set", "memory.admission=paged", "--admissions", "reserve",
         "--out", str(d / "sw")], "grid field")  # fmt: skip
    yield (
        "numbers: zero lengths in sessions",
        lambda: refused(
            [
                "run",
                "multi_turn_chat",
                "--set",
                'workload.output_length={"kind":"uniform","low":0,"high":4}',
            ],
            "output_length",
        ),
    )


def _files_cases(d: Path, f: dict):
    """Hardware, efficiency and HF files read strictly."""
    eff_true, eff_typo, hf = (f[k] for k in ("eff_true", "eff_typo", "hf"))
    yield (
        "files: peak_tflops 1e-300",
        lambda: refused(["cost", "qwen2-0.5b", "-a", str(_acc(d, peak_tflops=1e-300))], "0.001"),
    )
    yield (
        "files: hbm_gbps true",
        lambda: refused(["cost", "qwen2-0.5b", "-a", str(_acc(d, hbm_gbps=True))], "not a number"),
    )
    yield (
        "files: hardware key typo",
        lambda: refused(["cost", "qwen2-0.5b", "-a", str(_acc(d, peak_tflop=5))], "did you mean"),
    )
    yield (
        "files: efficiency key mfu_prefil",
        lambda: refused(["cost", "qwen2-0.5b", "--efficiency", str(eff_typo)], "mfu_prefil"),
    )
    yield (
        "files: efficiency true as 1.0",
        lambda: refused(["cost", "qwen2-0.5b", "--efficiency", str(eff_true)], "not a number"),
    )
    yield (
        "files: HF config 'false' string",
        lambda: refused(["cost", str(hf / "config.json")], "tie_word_embeddings"),
    )


def _unclear_cases(d: Path, f: dict):
    """Unclear behaviour: each clear now."""
    evil, f, grid, gz, link, run, small_grid = (
        f[k] for k in ("evil", "f", "grid", "gz", "link", "run", "small_grid")
    )
    yield "unclear: plot --out elsewhere, read-only results", lambda: _plot(d)
    yield "unclear: report --out elsewhere, read-only results", lambda: _report(d)
    yield "unclear: a killed plot leaves no hidden PNG", lambda: _killed_plot(d)
    yield "unclear: .jsonl.gz auto-detected", lambda: numbers(
        ["run", "--trace", str(gz), "-p", "transfer_per_request", "--set",
         "run.warmup_requests=1", "--out", str(d / "gz")])  # fmt: skip
    yield (
        "unclear: true for an enum field",
        lambda: refused(["run", "tool_call", "--set", "memory.admission=true"], "one of"),
    )
    yield "unclear: sweep --links with a hardware YAML", lambda: succeeds(
        ["sweep", "--models", "qwen2-0.5b", "--workloads", "tool_call", "--budgets", "1.0",
         "--seeds", "0,1", "-p", "transfer_per_request,replicate_all_lru", "-j", "1",
         "--set", "run.requests=100", "--set", "run.warmup_requests=10",
         "--links", f"eth-25g,{link}", "--out", str(d / "links")])  # fmt: skip
    yield (
        "unclear: --budgets ,",
        lambda: refused(["sweep", "--budgets", ",", "--out", str(d / "x")], "no values"),
    )
    yield (
        "unclear: --address without Ray",
        lambda: refused(["sweep", "--address", "auto", "--out", str(d / "x")], "--address"),
    )
    yield (
        "unclear: --quick with a grid file",
        lambda: refused(["sweep", "--quick", str(small_grid), "--out", str(d / "x")], "--quick"),
    )
    yield "unclear: cost escapes a file name and a name", lambda: _cost_escapes(evil)


def cases(d: Path):
    """(name, thunk) per example; each thunk returns (ok, seconds, what it saw)."""
    f = _inputs(d)
    yield from _hang_cases(d, f)
    yield from _calibrate_cases(d, f)
    yield from _crash_cases(d, f)
    yield from _numbers_cases(d, f)
    yield from _files_cases(d, f)
    yield from _unclear_cases(d, f)


def _nested(d: Path) -> Path:
    p = d / "nested.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    return p


def _dup(d: Path) -> Path:
    p = d / "dup.csv"
    p.write_text("phase,tokens,batch,context,devices,ms\n" + "prefill,512,,0,1,15.0\n" * 10)
    return p


def _util_between(doc) -> str | None:
    rows = doc.get("results") or doc.get("policies") or []
    for row in rows if isinstance(rows, list) else rows.values():
        s = row.get("summary", row)
        lo, mid, hi = s.get("decode_util_min"), s.get("decode_util"), s.get("decode_util_max")
        if None not in (lo, mid, hi) and not lo - 1e-12 <= mid <= hi + 1e-12:
            return f"decode_util {mid} outside [{lo}, {hi}]"
    return None


def _plot(d: Path):
    res = _results(d)
    before = sorted(p.name for p in res.rglob("*"))
    return succeeds(["plot", str(res), "--out", str(d / "plots")], _untouched(res, before))


def _report(d: Path):
    res = _results(d)
    before = sorted(p.name for p in res.rglob("*"))
    return succeeds(["report", str(res), "--out", str(d / "rep" / "r.md")], _untouched(res, before))


def _killed_plot(d: Path):
    """SIGKILL a plot mid-way, then plot again: no hidden temporary PNG is left behind."""
    res = _results(d)
    out = d / "plots-killed"
    t0 = time.perf_counter()
    p = subprocess.Popen([*CLI, "plot", str(res), "--out", str(out)], env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(6)
    p.kill()
    p.wait()
    ok, dt, msg = succeeds(["plot", str(res), "--out", str(out)])
    left = [q.name for q in out.glob(".*")] if out.exists() else []
    return ok and not left, time.perf_counter() - t0, f"hidden files left: {left}" if left else msg


def _interrupted(d: Path, grid: Path):
    """A sweep of 100,000 seeds (one model, workload, budget and policy; the cap raised)
    gets SIGINT once its pool runs: it must exit 130 with one line within 20 s."""
    import signal

    args = [*CLI, "sweep", str(grid), "--models", "qwen2-0.5b", "--workloads", "tool_call",
            "--budgets", "1.0", "-p", "transfer_per_request", "--max-runs", "100000", "-j", "2",
            "--set", "run.requests=100", "--set", "run.warmup_requests=10",
            "--out", str(d / "sigint")]  # fmt: skip
    t0 = time.perf_counter()
    p = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parts = d / "sigint" / "parts"
    while time.perf_counter() < t0 + 30 and not (parts.exists() and any(parts.iterdir())):
        time.sleep(0.5)  # until the pool has finished a point
    p.send_signal(signal.SIGINT)
    t_sig = time.perf_counter()
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return False, time.perf_counter() - t0, "still running 20 s after SIGINT"
    lines = err.strip().splitlines()
    ok = p.returncode == 130 and len(lines) >= 1 and "Traceback" not in err
    stop, last = time.perf_counter() - t_sig, lines[-1] if lines else ""
    return ok, time.perf_counter() - t0, f"exit {p.returncode} {stop:.1f} s after SIGINT: {last}"


def _cost_escapes(evil: Path):
    r, dt = _cli(["cost", "qwen2-0.5b", "-a", str(evil)])
    if r is None:
        return False, dt, "timed out"
    ok = r.returncode == 0 and "\x1b" not in r.stdout + r.stderr
    return ok, dt, "no raw escape byte" if ok else f"exit {r.returncode} or raw escape printed"


def main(argv: list[str]) -> int:
    want = argv[1] if len(argv) > 1 else ""
    failed = 0
    with tempfile.TemporaryDirectory(prefix="pb-examples-") as tmp:
        d = Path(tmp)
        (d / "big.json").write_text('{"avg_latency": ' + "9" * 5000 + "}")
        for name, thunk in cases(d):
            if want not in name:
                continue
            try:
                ok, dt, msg = thunk()
            except Exception as e:  # the script's own failure is a failure too
                ok, dt, msg = False, 0.0, f"{type(e).__name__}: {e}"
            ok = ok and dt < LIMIT_S
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {dt:5.1f} s  {name}: {msg[:150]}", flush=True)
        for p in d.rglob("*"):  # read-only test folders: let the cleanup remove them
            if p.is_dir():
                p.chmod(0o755)
        d.chmod(0o755)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
