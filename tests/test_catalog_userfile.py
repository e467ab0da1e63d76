"""Hardware from a user's YAML file: validated like the catalog, accepted wherever a name is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prefixbench.catalog import AcceleratorSpec, LinkSpec, get_accelerator, get_link
from prefixbench.catalog.userfile import load_hardware
from prefixbench.cli import app
from prefixbench.errors import CatalogError
from prefixbench.scenario.loader import load_scenario

cli = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
OPTICAL = SCENARIOS / "hardware" / "optical_mac.yaml"

ACCEL = """hardware: accelerator
name: my-gpu
vendor: me
peak_tflops: 500     # TFLOP/s
hbm_gbps: 2000       # GB/s
memory_gb: 64        # GB
source: user
"""
LINK = """hardware: link
name: my-link
kind: ethernet
bandwidth_gbps: 50
latency_us: 10
source: https://example.org/datasheet
"""


def _write(tmp_path: Path, text: str, name: str = "hw.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path, expect: str | None = None) -> str:
    with pytest.raises(CatalogError) as e:
        load_hardware(path, expect)
    line = str(e.value)
    assert "\n" not in line and str(path) in line
    return line


# ------------------------------------------------------------------ loading


def test_accelerator_file_loads_with_its_numbers(tmp_path):
    spec = get_accelerator(str(_write(tmp_path, ACCEL)))
    assert spec == AcceleratorSpec(
        name="my-gpu", vendor="me", peak_tflops=500, hbm_gbps=2000, memory_gb=64, source="user"
    )


def test_accelerator_file_carries_its_own_gemm_curve(tmp_path):
    text = ACCEL + "gemm_mfu: 0.9\ngemm_half_tokens: 40\ngemm_source: my kernel bench\n"
    spec = load_hardware(_write(tmp_path, text))
    assert (spec.gemm_mfu, spec.gemm_half_tokens, spec.gemm_source) == (
        0.9,
        40.0,
        "my kernel bench",
    )
    line = _error(_write(tmp_path, ACCEL + "gemm_mfu: 1.5\n", "bad.yaml"))
    assert "field 'gemm_mfu'" in line and "must be > 0 and <= 1" in line


def test_link_file_loads_with_its_numbers(tmp_path):
    spec = get_link(str(_write(tmp_path, LINK)))
    assert spec == LinkSpec(
        name="my-link",
        kind="ethernet",
        bandwidth_gbps=50,
        latency_us=10,
        source="https://example.org/datasheet",
    )


def test_name_defaults_to_the_file_stem(tmp_path):
    text = ACCEL.replace("name: my-gpu\n", "")
    assert load_hardware(_write(tmp_path, text, "wafer.yaml")).name == "wafer"


def test_optical_preset_is_ten_h100s_of_compute_at_h100_bandwidth():
    spec = load_hardware(OPTICAL, "accelerator")
    # H100 SXM datasheet: 1,979 TFLOPS BF16 with sparsity -> 989.5 dense; 3.35 TB/s; 80 GB
    assert (spec.peak_tflops, spec.hbm_gbps, spec.memory_gb) == (9895.0, 3350.0, 80.0)
    assert spec.vendor == "hypothetical" and "hypothetical" in spec.source
    assert "seed 003" in spec.source


def test_every_shipped_hardware_file_loads_and_is_cited():
    files = sorted((SCENARIOS / "hardware").glob("*.yaml"))
    assert len(files) >= 2
    for path in files:
        spec = load_hardware(path)
        assert "http" in spec.source or spec.source.startswith("hypothetical")


# ------------------------------------------------------------------ bad files


def test_misspelt_field_suggests_the_right_one(tmp_path):
    line = _error(_write(tmp_path, ACCEL.replace("peak_tflops", "peak_tflop")))
    assert "unknown field 'peak_tflop'" in line and "did you mean 'peak_tflops'?" in line


def test_out_of_bounds_names_field_bounds_and_unit(tmp_path):
    line = _error(_write(tmp_path, ACCEL.replace("peak_tflops: 500", "peak_tflops: 5.0e12")))
    assert "field 'peak_tflops'" in line
    assert "must be > 0 and <= 1,000,000 TFLOP/s" in line


def test_zero_bandwidth_refused_with_bounds(tmp_path):
    line = _error(_write(tmp_path, LINK.replace("bandwidth_gbps: 50", "bandwidth_gbps: 0")))
    assert "field 'bandwidth_gbps'" in line and "must be > 0 and <= 100,000 GB/s" in line


def test_non_number_says_write_a_number_with_unit(tmp_path):
    line = _error(_write(tmp_path, ACCEL.replace("hbm_gbps: 2000", "hbm_gbps: 2 TB/s")))
    assert "field 'hbm_gbps'" in line and "write a number in GB/s" in line


def test_infinity_refused(tmp_path):
    line = _error(_write(tmp_path, ACCEL.replace("peak_tflops: 500", "peak_tflops: .inf")))
    assert "field 'peak_tflops'" in line


def test_source_is_required(tmp_path):
    line = _error(_write(tmp_path, ACCEL.replace("source: user\n", "")))
    assert "source" in line and "source: user" in line


def test_blank_source_is_refused(tmp_path):
    line = _error(_write(tmp_path, ACCEL.replace("source: user", "source: '  '")))
    assert "source" in line


def test_catalog_name_cannot_be_redefined(tmp_path):
    line = _error(_write(tmp_path, ACCEL.replace("name: my-gpu", "name: H100-SXM")))
    assert "catalog accelerator" in line and "own name" in line


def test_missing_or_misspelt_tag(tmp_path):
    assert "hardware: accelerator" in _error(_write(tmp_path, ACCEL.replace("hardware: ", "x: ")))
    line = _error(_write(tmp_path, ACCEL.replace("accelerator", "accelerater")))
    assert "did you mean 'accelerator'?" in line


def test_wrong_kind_for_the_place(tmp_path):
    line = _error(_write(tmp_path, LINK), "accelerator")
    assert "describes a link, but an accelerator is needed" in line


def test_yaml_is_data_not_code(tmp_path):
    text = ACCEL + "extra: !!python/object/apply:os.system ['echo pwned']\n"
    line = _error(_write(tmp_path, text))
    assert "YAML" in line


def test_not_a_mapping_and_missing_file(tmp_path):
    assert "mapping" in _error(_write(tmp_path, "- 1\n- 2\n"))
    assert "not found" in _error(tmp_path / "nope.yaml")
    assert "not found" in _error(tmp_path)  # a folder is not a hardware file


def test_oversized_file_refused(tmp_path):
    assert "larger than" in _error(_write(tmp_path, ACCEL + "#" * 100_000 + "\n"))


# ------------------------------------------------------------------ from a scenario


def _scenario(tmp_path: Path, cluster: str) -> Path:
    text = f"""name: mine
model: qwen2-0.5b
cluster:
{cluster}
workload:
  kind: synthetic
  arrivals: {{rate: 1.0}}
  prefixes: {{count: 2, zipf_s: 0, length: {{kind: fixed, value: 64}}}}
  share_fraction: 0.5
  suffix_length: {{kind: fixed, value: 32}}
  output_length: {{kind: fixed, value: 8}}
"""
    return _write(tmp_path, text, "scenario.yaml")


def test_scenario_paths_are_relative_to_the_scenario_file(tmp_path, monkeypatch):
    (tmp_path / "hw").mkdir()
    _write(tmp_path / "hw", ACCEL, "gpu.yaml")
    _write(tmp_path / "hw", LINK, "net.yaml")
    path = _scenario(
        tmp_path,
        "  prefill: {accelerator: hw/gpu.yaml}\n"
        "  decode: {accelerator: ./hw/gpu.yaml}\n"
        "  link: {name: hw/net.yaml}",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = load_scenario(str(path))
    assert get_accelerator(s.cluster.prefill.accelerator).name == "my-gpu"
    assert get_accelerator(s.cluster.decode.accelerator).peak_tflops == 500
    assert get_link(s.cluster.link.name).bandwidth_gbps == 50


def test_set_paths_are_relative_to_the_working_directory(tmp_path, monkeypatch):
    _write(tmp_path, ACCEL, "gpu.yaml")
    monkeypatch.chdir(tmp_path)
    s = load_scenario("tool_call", ["cluster.decode.accelerator=./gpu.yaml"])
    assert get_accelerator(s.cluster.decode.accelerator).name == "my-gpu"
    assert s.cluster.prefill.accelerator != s.cluster.decode.accelerator


def test_bad_file_named_by_a_scenario_is_one_line_with_both_places(tmp_path):
    _write(tmp_path, ACCEL.replace("memory_gb: 64", "memory_gbs: 64"), "gpu.yaml")
    path = _scenario(tmp_path, "  decode: {accelerator: gpu.yaml}")
    with pytest.raises(CatalogError) as e:
        load_scenario(str(path))
    line = str(e.value)
    assert "gpu.yaml" in line and "did you mean 'memory_gb'?" in line
    assert "cluster.decode.accelerator" in line and "scenario.yaml" in line


def test_missing_file_named_by_a_scenario_is_the_scenario_s_mistake(tmp_path):
    path = _scenario(tmp_path, "  prefill: {accelerator: hw/nope.yaml}")
    with pytest.raises(CatalogError) as e:
        load_scenario(str(path))
    assert e.value.where == str(path)
    assert "cluster.prefill.accelerator" in str(e.value)
    assert str(tmp_path / "hw" / "nope.yaml") in str(e.value)
    assert "relative to the scenario file" in str(e.value)


def test_unreadable_names_are_one_line_errors(tmp_path):
    for ref in ("a\x00b.yaml", "x/" + "y" * 5000 + ".yaml"):
        with pytest.raises(CatalogError):
            get_accelerator(ref)


def test_preset_hardware_resolves_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = load_scenario("optical_mac")
    assert get_accelerator(s.cluster.prefill.accelerator).name == "optical-mac"
    # one HDR NIC, 8 per instance
    assert get_link(load_scenario("splitwise_hetero").cluster.link.name).bandwidth_gbps == 25.0


# ------------------------------------------------------------------ command line


def _cli(*args: str):
    return cli.invoke(app, list(args))


def test_catalog_show_reads_a_file():
    r = _cli("catalog", "show", str(OPTICAL), "--json")
    assert r.exit_code == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["kind"] == "accelerator" and info["name"] == "optical-mac"
    # ridge point by hand: 9,895e12 FLOP/s / 3,350e9 B/s
    assert info["ridge_flops_per_byte"] == pytest.approx(9895e12 / 3350e9, rel=1e-12)


def test_catalog_show_model_on_a_file_accelerator():
    r = _cli("catalog", "show", "llama-3.1-8b", "-a", str(OPTICAL), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["accelerator"] == "optical-mac"


def test_cost_accepts_a_file_accelerator():
    r = _cli("cost", "llama-3.1-8b", "--accelerator", str(OPTICAL), "--json")
    assert r.exit_code == 0, r.stderr
    assert "optical-mac" in r.stdout


def test_cli_bad_file_is_one_line_with_suggestion(tmp_path):
    path = _write(tmp_path, ACCEL.replace("hbm_gbps", "hbm_gpbs"))
    for args in (
        ("catalog", "show", str(path)),
        ("cost", "qwen2-0.5b", "--accelerator", str(path)),
        ("run", "tool_call", "--set", f"cluster.prefill.accelerator={path}"),
    ):
        r = _cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "did you mean 'hbm_gbps'?" in r.stderr, args
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_catalog_show_file_table_fits_80_columns():
    narrow = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
    r = narrow.invoke(app, ["catalog", "show", str(OPTICAL)])
    assert r.exit_code == 0, r.stderr
    assert "accelerator: optical-mac" in r.stdout and "9,895" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


def test_run_title_names_file_hardware_by_its_name(tmp_path):
    sets = ["--set", "run.requests=300", "--set", "run.warmup_requests=30"]
    r = _cli(
        "run", "splitwise_hetero", *sets, "--policy", "transfer_per_request", "--out", str(tmp_path)
    )
    assert r.exit_code == 0, r.stderr
    system = " ".join(r.stdout.split()).split(" · SLO")[0]  # the system line (docs/study.md)
    for name in ("prefill 8× h100-sxm", "decode 8× a100-80gb", "link dgx-a100-8x-hdr200"):
        assert name in system, (name, system)
