"""`prefixbench calibrate`: exact round trip, public data, vLLM formats, bad input, scenarios."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prefixbench.catalog import ACCELERATORS, MODELS
from prefixbench.cli import app
from prefixbench.physics import costmodel as cm
from prefixbench.physics.calibrate import PARAMS, ProfileError, calibrate, read_profiles
from prefixbench.scenario.loader import load_efficiency, load_scenario

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
ROOT = Path(__file__).resolve().parents[1]
MEASURED = Path(__file__).parent / "data" / "measured"

# Known constants, all different from the defaults and from each other.
TRUE = cm.Efficiency(
    mfu_prefill=0.62,
    mfu_decode=0.41,
    mbu=0.83,
    prefill_overhead_ms=2.5,
    decode_overhead_ms=0.7,
    request_overhead_ms=4.2,
)
HEADER = ["phase", "tokens", "batch", "context", "devices", "ms"]


def _synthetic_rows(model="llama-3.1-8b", dev="h100-sxm", devices=1, eff=TRUE):
    """Both phases in both regimes, timed by the cost model at ``eff``."""
    cost = cm.InstanceCost.build(MODELS[model], ACCELERATORS[dev], devices, eff)
    rows = []
    for n, c in [(512, 0), (2048, 0), (8192, 0), (32768, 0), (8, 16384), (16, 32768)]:
        rows.append(["prefill", n, "", c, devices, repr(cm.prefill_time(cost, [n], [c]) * 1e3)])
    for n in (128, 4096):  # client-side TTFT: the step plus the request's and its tokens' cost
        t = cm.prefill_time(cost, [n], [0]) * 1e3 + eff.request_overhead_ms
        t += n * eff.prompt_overhead_us / 1e3
        rows.append(["ttft", n, "", 0, devices, repr(t)])
    for b, c in [(1, 1024), (1, 8192), (16, 4096), (64, 2048), (1024, 128), (2048, 64)]:
        t = float(cm.decode_iteration_time(cost, b, b * c)) * 1e3
        rows.append(["decode", "", b, c, devices, repr(t)])
    return rows


def _write_csv(path: Path, rows, header=HEADER) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_round_trip_recovers_known_constants(tmp_path):
    prof = _write_csv(tmp_path / "p.csv", _synthetic_rows())
    res = calibrate([str(prof)], model="llama-3.1-8b", accelerator="h100-sxm")
    for k, v in ((k, getattr(TRUE, k)) for k in PARAMS):
        assert res["efficiency"][k] == pytest.approx(v, rel=1e-9), k
    # the per-prompt-token cost is fitted only when asked for (next test)
    assert res["kept_at_default"] == ["prompt_overhead_us"]
    assert max(res["mape_percent"].values()) < 1e-9


def test_round_trip_recovers_the_prompt_token_cost(tmp_path):
    from prefixbench.physics.calibrate import fit

    true = TRUE.model_copy(update={"prompt_overhead_us": 3.3})
    prof = _write_csv(tmp_path / "p.csv", _synthetic_rows(eff=true))
    ms = read_profiles([str(prof)], "llama-3.1-8b", "h100-sxm", 1, None)
    res = fit(ms, params=PARAMS)
    for k in PARAMS:
        assert getattr(res.efficiency, k) == pytest.approx(getattr(true, k), rel=1e-9), k
    assert res.kept == []


def test_round_trip_moe_on_four_devices(tmp_path):
    prof = _write_csv(tmp_path / "p.csv", _synthetic_rows("deepseek-v2-lite", "a100-80gb", 4))
    res = calibrate([str(prof)], model="deepseek-v2-lite", accelerator="a100-80gb")
    for k, v in ((k, getattr(TRUE, k)) for k in PARAMS):
        assert res["efficiency"][k] == pytest.approx(v, rel=1e-9), k


def _serve_json(path: Path, n_in: int, n_out: int, eff=TRUE) -> Path:
    # The keys `vllm bench serve --save-result` writes that calibration reads.
    cost = cm.InstanceCost.build(MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 1, eff)
    ttft = cm.prefill_time(cost, [n_in], [0]) * 1e3 + eff.request_overhead_ms  # client-side
    ttft += n_in * eff.prompt_overhead_us / 1e3
    tpot = float(cm.decode_iteration_time(cost, 1, n_in + n_out / 2)) * 1e3
    path.write_text(
        json.dumps(
            {
                "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B", "max_concurrency": 1,
                "completed": 10, "total_input_tokens": 10 * n_in,
                "total_output_tokens": 10 * n_out, "mean_ttft_ms": ttft, "median_ttft_ms": ttft,
                "mean_tpot_ms": tpot, "median_tpot_ms": tpot,
            }
        )
    )  # fmt: skip
    return path


def _latency_json(path: Path, n_in: int, n_out: int, bsz: int, eff=TRUE) -> Path:
    # `vllm bench latency --output-json`: avg_latency (s), latencies, percentiles.
    cost = cm.InstanceCost.build(MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 1, eff)
    t = cm.prefill_time(cost, [n_in] * bsz, [0] * bsz)
    t += sum(
        float(cm.decode_iteration_time(cost, bsz, bsz * (n_in + 1 + j))) for j in range(n_out - 1)
    )
    path.write_text(json.dumps({"avg_latency": t, "latencies": [t], "percentiles": {"50": t}}))
    return path


def test_round_trip_from_vllm_results(tmp_path):
    files = [
        _serve_json(tmp_path / "s1.json", 512, 128),
        _serve_json(tmp_path / "s2.json", 8192, 64),
        _serve_json(tmp_path / "s3.json", 32768, 16),
    ]
    lat = [_latency_json(tmp_path / f"l{b}.json", 128, 32, b) for b in (64, 1024, 2048)]
    ms = read_profiles([str(f) for f in files], model="llama-3.1-8b")
    for f, b in zip(lat, (64, 1024, 2048), strict=True):
        ms += read_profiles([str(f)], "llama-3.1-8b", lengths={
            "input_len": 128, "output_len": 32, "batch_size": b})  # fmt: skip
    from prefixbench.physics.calibrate import fit

    res = fit(ms)
    # With the KV stream priced apart from the weights, every decode row here (a dense
    # model) reads the same weights, so MBU and the decode overhead enter only as
    # W / (BW · mbu) + decode_overhead: the data determine that sum, not each. The fit
    # reproduces every row exactly and recovers the separable constants.
    for m in ms:
        assert m.predict(res.efficiency) == pytest.approx(m.ms, rel=1e-6), m.label
    # (client-side TTFT rows alone determine the two overheads' sum, the module says)
    for k in ("mfu_prefill", "mfu_decode"):
        assert getattr(res.efficiency, k) == pytest.approx(getattr(TRUE, k), rel=1e-6), k


def test_public_vllm_measurements_fit():
    # BLIS ground truth, vLLM on one H100 at concurrency 1 (tests/data/measured/README.md):
    # TTFT as prefill steps, TPOT as batch-1 decode iterations, Llama-2-7B and Qwen2.5-7B.
    res = calibrate([str(MEASURED / "blis_vllm_h100_tp1_profile.csv")], accelerator="h100-sxm")
    e = res["efficiency"]
    # MBU is what batch-1 decode measures. Three decode points at one batch size cannot
    # separate MBU from the per-iteration overhead (docs/validation.md): the fit trades one
    # for the other, so only a plausible range is pinned.
    assert 0.55 < e["mbu"] <= 1.0
    assert 3.0 < e["prefill_overhead_ms"] < 12.0  # client-side TTFT: HTTP, tokenizer, scheduler
    assert res["mape_percent"]["decode"] < 10.0
    assert res["mape_percent"]["prefill"] < 10.0
    assert "mfu_decode" in res["kept_at_default"]  # no compute-bound decode in this data


def _one_line_error(args, needle):
    r = runner.invoke(app, ["calibrate", *args])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    assert needle in lines[0], lines[0]
    return lines[0]


def test_missing_column(tmp_path):
    p = _write_csv(tmp_path / "p.csv", [["prefill", 512, "", 0, 1]], HEADER[:-1])
    line = _one_line_error([str(p), "-m", "llama-3.1-8b"], "missing column(s) ms")
    assert str(p) in line


def test_non_positive_time_names_row(tmp_path):
    rows = _synthetic_rows()
    rows[3][-1] = "-4"
    p = _write_csv(tmp_path / "p.csv", rows)
    _one_line_error([str(p), "-m", "llama-3.1-8b"], f"{p}:5: column 'ms' must be > 0")


def test_too_few_points(tmp_path):
    p = _write_csv(tmp_path / "p.csv", _synthetic_rows()[:1])
    _one_line_error([str(p), "-m", "llama-3.1-8b"], "too few points")
    rows = _synthetic_rows()
    p = _write_csv(tmp_path / "q.csv", [rows[0], rows[6]])  # 2 rows, 4 parameters
    _one_line_error([str(p), "-m", "llama-3.1-8b"], "too few points")


def test_model_mismatch_names_row(tmp_path):
    rows = [[*r, "llama-3.1-8b"] for r in _synthetic_rows()]
    rows[2][-1] = "qwen2-7b"
    p = _write_csv(tmp_path / "p.csv", rows, [*HEADER, "model"])
    _one_line_error([str(p), "-m", "llama-3.1-8b"], f"{p}:4: model 'qwen2-7b' does not match")
    rows[2][-1] = "llama-9"
    p = _write_csv(tmp_path / "q.csv", rows, [*HEADER, "model"])
    _one_line_error([str(p)], f"{p}:4: unknown model 'llama-9'")


def test_bad_phase_and_number(tmp_path):
    rows = _synthetic_rows()
    rows[0][0] = "prefil"
    p = _write_csv(tmp_path / "p.csv", rows)
    _one_line_error([str(p), "-m", "llama-3.1-8b"], f"{p}:2: phase must be prefill, ttft or decode")
    rows = _synthetic_rows()
    rows[1][1] = "2k"
    p = _write_csv(tmp_path / "q.csv", rows)
    _one_line_error([str(p), "-m", "llama-3.1-8b"], f"{p}:3: column 'tokens' is not a number")


def test_vllm_json_problems(tmp_path):
    s = _serve_json(tmp_path / "s.json", 512, 128)
    data = json.loads(s.read_text())
    data["max_concurrency"] = 16
    s.write_text(json.dumps(data))
    _one_line_error([str(s)], "max_concurrency is 16")
    data["max_concurrency"] = 1
    s.write_text(json.dumps(data))
    _one_line_error([str(s), "-m", "qwen2-7b"], "not --model qwen2-7b")
    lat = _latency_json(tmp_path / "l.json", 128, 32, 8)
    _one_line_error([str(lat), "-m", "llama-3.1-8b"], "--input-len")
    (tmp_path / "x.json").write_text("{}")
    _one_line_error([str(tmp_path / "x.json")], "neither")


def test_cli_writes_block_atomically_and_json_is_strict(tmp_path):
    prof = _write_csv(tmp_path / "p.csv", _synthetic_rows())
    out = tmp_path / "sub" / "efficiency.yaml"
    r = runner.invoke(app, ["calibrate", str(prof), "-m", "llama-3.1-8b", "--out", str(out),
                            "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert res["efficiency"]["mbu"] == pytest.approx(0.83, rel=1e-9)
    assert [p.name for p in out.parent.iterdir()] == ["efficiency.yaml"]  # no temp file left
    assert load_efficiency(out).mfu_decode == pytest.approx(0.41, rel=1e-6)
    r = runner.invoke(app, ["calibrate", str(prof), "-m", "llama-3.1-8b"])
    assert r.exit_code == 0 and "Fitted efficiency" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80


def test_scenario_reads_efficiency_from_file_next_to_it(tmp_path):
    (tmp_path / "eff").mkdir()
    (tmp_path / "eff" / "h100.yaml").write_text(
        "efficiency:\n  mfu_prefill: 0.61\n  mbu: 0.8\n  decode_overhead_ms: 0.4\n"
    )
    text = (ROOT / "scenarios" / "medium_chat.yaml").read_text(encoding="utf-8")
    scen = tmp_path / "s.yaml"
    scen.write_text(text + "efficiency: {from: eff/h100.yaml, mfu_decode: 0.3}\n")
    s = load_scenario(str(scen))
    assert (s.efficiency.mfu_prefill, s.efficiency.mbu) == (0.61, 0.8)
    assert (s.efficiency.mfu_decode, s.efficiency.decode_overhead_ms) == (0.3, 0.4)
    assert s.efficiency.prefill_overhead_ms == 1.0  # not in the file: the default
    scen.write_text(text + "efficiency: {from: missing.yaml}\n")
    with pytest.raises(Exception, match="missing.yaml: .*file not found"):
        load_scenario(str(scen))


def test_profile_error_is_a_prefixbench_error():
    with pytest.raises(ProfileError, match="file not found"):
        read_profiles(["/nonexistent/profile.csv"], model="llama-3.1-8b")


# --- the per-request fixed costs from a user's CSV, through the command (`--fit`)

# Hand-chosen client-side costs, unlike the defaults (3.8 ms, 9.5 µs) and each other.
HAND_REQUEST_MS = 12.5
HAND_PROMPT_US = 6.0


def _hand_rows() -> list[list]:
    """Server-side prefill steps of llama-3.1-8b on one H100 at the default efficiencies,
    timed by the independent roofline of tests/reference_roofline.py (raw config and
    datasheet numbers, none of the product's cost model), and client-side TTFTs of other
    lengths: that step plus 12.5 ms per request plus 6.0 µs per prompt token."""
    from reference_roofline import Efficiency as RefEff
    from reference_roofline import Roofline

    ref = Roofline(MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 1, RefEff.of(cm.Efficiency()))
    rows = []
    for n in (512, 2048, 8192, 32768):
        rows.append(["prefill", n, "", 0, 1, repr(ref.prefill_step([(n, 0)]) * 1e3)])
    for n in (128, 1024, 4096, 16384):
        ms = ref.prefill_step([(n, 0)]) * 1e3 + HAND_REQUEST_MS + n * HAND_PROMPT_US / 1e3
        rows.append(["ttft", n, "", 0, 1, repr(ms)])
    return rows


def test_cli_fits_the_request_and_prompt_token_costs(tmp_path):
    prof = _write_csv(tmp_path / "p.csv", _hand_rows())
    r = runner.invoke(app, ["calibrate", str(prof), "-m", "llama-3.1-8b", "--json",
                            "--fit", "request_overhead_ms,prompt_overhead_us"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["efficiency"]["request_overhead_ms"] == pytest.approx(HAND_REQUEST_MS, rel=1e-6)
    assert res["efficiency"]["prompt_overhead_us"] == pytest.approx(HAND_PROMPT_US, rel=1e-6)
    assert res["constrained"] == ["request_overhead_ms", "prompt_overhead_us"]
    for k in PARAMS[:5]:  # not asked for: left at the defaults
        assert res["efficiency"][k] == getattr(cm.Efficiency(), k), k


def test_cli_fit_all_recovers_every_parameter_the_rows_pin(tmp_path):
    prof = _write_csv(tmp_path / "p.csv", _hand_rows())
    r = runner.invoke(app, ["calibrate", str(prof), "-m", "llama-3.1-8b", "--json", "--fit", "all"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["efficiency"]["request_overhead_ms"] == pytest.approx(HAND_REQUEST_MS, rel=1e-6)
    assert res["efficiency"]["prompt_overhead_us"] == pytest.approx(HAND_PROMPT_US, rel=1e-6)
    assert res["efficiency"]["mfu_prefill"] == pytest.approx(cm.Efficiency().mfu_prefill, rel=1e-6)
    # without --fit the per-prompt-token cost stays at its default and the same rows are
    # fitted worse (the per-request cost absorbs the mean of the per-token part)
    r = runner.invoke(app, ["calibrate", str(prof), "-m", "llama-3.1-8b", "--json"])
    res = json.loads(r.output)
    assert res["efficiency"]["prompt_overhead_us"] == cm.Efficiency().prompt_overhead_us
    assert "prompt_overhead_us" in res["kept_at_default"]


def test_cli_fit_refuses_an_unknown_parameter_in_one_line(tmp_path):
    prof = _write_csv(tmp_path / "p.csv", _hand_rows())
    r = runner.invoke(app, ["calibrate", str(prof), "-m", "llama-3.1-8b", "--fit", "prompt_cost"])
    assert r.exit_code != 0
    assert "--fit" in r.output and "prompt_overhead_us" in r.output
    assert "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) <= 3


def test_the_readme_ttft_example_reads_off_the_documented_costs():
    """README's `calibrate blis_vllm_h100_tp1_ttft.csv --fit request_overhead_ms,
    prompt_overhead_us`: the two public TTFTs (13.9 ms for 70 new + 284 cached tokens,
    67.1 ms for 2,048) give the per-request and per-prompt-token costs
    docs/model/request-overhead.md reads off them by hand: gaps of 7.202 and 23.284 ms over
    the steps, one line in the 354 and 2,048 prompt tokens (cached ones count),
    (23.284 - 7.202) / (2048 - 354) = 9.4935 µs per token and 7.202 - 354 × 9.4935 µs =
    3.8413 ms."""
    prof = MEASURED / "blis_vllm_h100_tp1_ttft.csv"
    r = runner.invoke(app, ["calibrate", str(prof), "--json",
                            "--fit", "request_overhead_ms,prompt_overhead_us"])  # fmt: skip
    assert r.exit_code == 0, r.output
    eff = json.loads(r.output)["efficiency"]
    assert eff["prompt_overhead_us"] == pytest.approx(16.082 / 1694 * 1e3, abs=2e-3)
    assert eff["request_overhead_ms"] == pytest.approx(7.202 - 354 * 16.082 / 1694, abs=2e-3)
