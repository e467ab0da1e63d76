"""Inputs that used to give silently wrong numbers or unclear behaviour: each is now refused
with one line or honoured (docs/reliability.md, "Third pass")."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from robustness_util import assert_clear, assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import CatalogError, PrefixbenchError, ScenarioError, TraceFormatError
from prefixbench.workload.traces import read_trace, sniff_format

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})


def _mooncake(path: Path, stamps) -> Path:
    lines = [json.dumps({"timestamp": t, "input_length": 600, "output_length": 4,
                         "hash_ids": [1, 2]}) for t in stamps]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_timestamps_spanning_1e14_s_are_refused(tmp_path):
    """Mooncake timestamps are ms: 0 and 1e17 ms span 1e14 s, where a TTFT rounded to 0."""
    p = _mooncake(tmp_path / "t.jsonl", [0, 1e17])
    with pytest.raises(TraceFormatError, match="timestamps span 1e\\+14 s") as e:
        read_trace(p)
    assert_clear(e.value)
    assert len(read_trace(_mooncake(tmp_path / "ok.jsonl", [0, 1e12])).requests.arrival) == 2


@pytest.mark.parametrize("offset", ["+25:00", "+00:99", "-15:00"])
def test_azure_2024_offsets_outside_utc_range_are_refused(tmp_path, offset):
    p = tmp_path / "a.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        f"2024-05-10 00:00:00.000000{offset},100,5\n2024-05-10 00:00:01.000000+00:00,100,5\n"
    )
    with pytest.raises(TraceFormatError, match="UTC offset") as e:
        read_trace(p, "azure")
    assert_clear(e.value)


def test_jsonl_gz_is_auto_detected(tmp_path):
    plain = _mooncake(tmp_path / "t.jsonl", [0, 10, 20])
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert sniff_format(gz) == "mooncake"
    assert len(read_trace(gz).requests.arrival) == 3


@pytest.mark.parametrize(
    "override", ["memory.kv_budget_gb=4", "seed=3", "memory.budget_factor=0.5",
                 "policy=replicate_hotset", "memory.admission=paged", "model=qwen2-1.5b"],
)  # fmt: skip
def test_sweep_set_of_a_grid_field_is_refused(override):
    from prefixbench.study.grid import build_spec

    key = override.split("=")[0]
    with pytest.raises(ScenarioError, match=rf"--set {key} is a grid field") as e:
        build_spec({}, set=[override])
    assert_clear(e.value)


def test_hardware_files_are_strict(tmp_path):
    from prefixbench.catalog.userfile import load_hardware

    def acc(**kw):
        doc = {"hardware": "accelerator", "name": "mine", "peak_tflops": 100, "hbm_gbps": 1000,
               "memory_gb": 80, "source": "user", **kw}  # fmt: skip
        p = tmp_path / "a.yaml"
        p.write_text(json.dumps(doc))
        return p

    assert load_hardware(acc()).peak_tflops == 100
    for kw, match in (({"peak_tflops": 1e-300}, "below 0.001 TFLOP/s"),
                      ({"hbm_gbps": True}, "'hbm_gbps' is True, not a number"),
                      ({"memory_gb": "yes"}, "'memory_gb' is 'yes', not a number"),
                      ({"peak_tflop": 5}, "did you mean 'peak_tflops'")):  # fmt: skip
        with pytest.raises(CatalogError, match=match) as e:
            load_hardware(acc(**kw))
        assert_clear(e.value)


def test_link_ceiling_and_l3_store_bandwidth_have_physical_floors(tmp_path):
    """A NIC ceiling or an L3 store of 1e-300 GB/s was accepted: TTFT 9e302 ms and the
    stability check's squares overflowing. The ceiling's floor is its link bandwidth's (a
    scenario override 0.001 GB/s, a hardware file 1 KB/s); the store's is 1 MB/s
    (0.008 Gbit/s). Each floor itself is accepted."""
    from prefixbench.catalog.userfile import load_hardware
    from prefixbench.scenario.loader import load_scenario

    for field, low, floor in (("cluster.link.ceiling_gbps", "1e-300", "0.001"),
                              ("memory.l3_store_gbps", "1e-9", "0.008")):  # fmt: skip
        with pytest.raises(ScenarioError, match=field.split(".")[-1]) as e:
            load_scenario("tool_call", [f"{field}={low}"])
        assert_clear(e.value)
        assert floor in str(e.value)
        load_scenario("tool_call", [f"{field}={floor}"])
    link = {"hardware": "link", "name": "mine", "bandwidth_gbps": 3, "latency_us": 5,
            "source": "user"}  # fmt: skip
    p = tmp_path / "l.yaml"
    p.write_text(json.dumps({**link, "ceiling_gbps": 1e-300}))
    with pytest.raises(CatalogError, match="'ceiling_gbps' is 1e-300 GB/s, below 1e-06") as e:
        load_hardware(p)
    assert_clear(e.value)
    p.write_text(json.dumps({**link, "ceiling_gbps": 1e-6}))
    assert load_hardware(p).ceiling_gbps == 1e-6


def test_efficiency_files_are_strict(tmp_path):
    from prefixbench.scenario.loader import load_efficiency

    p = tmp_path / "e.yaml"
    for text, match in (("mfu_prefil: 0.4\n", "mfu_prefil"), ("mbu: true\n", "not a number"),
                        ("efficiency: {mfu_decode: 'yes'}\n", "not a number")):  # fmt: skip
        p.write_text(text)
        with pytest.raises(PrefixbenchError, match=match) as e:
            load_efficiency(p)
        assert_clear(e.value)


@pytest.mark.parametrize("key", ["tie_word_embeddings", "attention_bias"])
def test_hf_config_string_booleans_are_refused(tmp_path, key):
    from prefixbench.catalog.hfconfig import load_hf_config

    cfg = (
        json.loads((Path(__file__).parent / "data" / "hf" / "qwen2-0.5b.json").read_text())
        if (Path(__file__).parent / "data" / "hf" / "qwen2-0.5b.json").exists()
        else None
    )
    if cfg is None:
        cfg = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2,
               "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1024,
               "vocab_size": 1000, "max_position_embeddings": 4096}  # fmt: skip
    cfg[key] = "false"
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError, match=rf"{key}.*not true or false") as e:
        load_hf_config(p)
    assert_clear(e.value)


@pytest.mark.parametrize("field,words", [("memory.admission", "one of paged, reserve"),
                                         ("policy", "one of transfer_per_request")])  # fmt: skip
def test_true_for_an_enum_field_names_its_choices(field, words):
    from prefixbench.scenario.loader import load_scenario

    with pytest.raises(ScenarioError, match=words):
        load_scenario("tool_call", [f"{field}=true"])


@pytest.mark.parametrize(
    "args,where",
    [(["--budgets", ","], "lists no values"), (["--address", "auto"], "--address"),
     (["--quick", "GRID"], "--quick"), (["-j", "-5"], "--jobs")],
)  # fmt: skip
def test_silently_ignored_sweep_inputs_are_refused(tmp_path, args, where):
    grid = tmp_path / "g.yaml"
    grid.write_text("seeds: [0]\n")
    args = [str(grid) if a == "GRID" else a for a in args]
    r = runner.invoke(app, ["sweep", *args, "--out", str(tmp_path / "o")])
    line = assert_one_stderr_line(r)
    assert where in line, line


def test_sweep_links_accepts_a_hardware_yaml(tmp_path, monkeypatch):
    """A link file passes the --links check (it was 'unknown link'); the run itself is
    stubbed: the check is what was wrong."""
    from prefixbench.study import decision

    link = tmp_path / "mylink.yaml"
    link.write_text(
        "hardware: link\nname: my-link\nbandwidth_gbps: 3\nlatency_us: 5\nsource: user\n"
    )
    seen = []
    monkeypatch.setattr(
        decision,
        "link_spec",
        lambda spec, ln: seen.append(ln) or (_ for _ in ()).throw(KeyboardInterrupt),
    )
    from prefixbench.study.grid import build_spec

    with pytest.raises(KeyboardInterrupt):
        decision.run_link_sweep(build_spec({}), [str(link)], tmp_path / "o")
    assert seen == [str(link)]
    with pytest.raises(CatalogError, match="unknown link"):
        decision.run_link_sweep(build_spec({}), ["no-such-link"], tmp_path / "o")


def test_cost_escapes_control_bytes_in_names(tmp_path):
    acc = tmp_path / "evil.yaml"
    acc.write_text('hardware: accelerator\nname: "evil\\x1b[31mred"\npeak_tflops: 100\n'
                   "hbm_gbps: 1000\nmemory_gb: 80\nsource: user\n")  # fmt: skip
    r = runner.invoke(app, ["cost", "qwen2-0.5b", "-a", str(acc)])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stdout and "evil\\x1b[31mred" in r.stdout.replace("\n", "")


def _results(tmp_path: Path) -> Path:
    from studyutil import make_tiny_study

    return make_tiny_study(tmp_path / "results")


def test_plot_and_report_leave_the_results_folder_alone(tmp_path):
    import os
    import time

    results = _results(tmp_path)
    before = sorted(p.name for p in results.iterdir())
    plots = tmp_path / "plots"
    plots.mkdir()
    stale = plots / ".01_mean_ttft_by_policy.png.abc123.png"  # a SIGKILLed plot's temp
    stale.write_bytes(b"x")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    r = runner.invoke(app, ["plot", str(results), "--out", str(plots)])
    assert r.exit_code == 0, r.output
    assert not stale.exists() and not list(plots.glob(".*.png"))
    r = runner.invoke(app, ["report", str(results), "--out", str(tmp_path / "rep" / "r.md")])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in results.iterdir()) == before  # nothing written there
    assert (tmp_path / "rep" / "plots").is_dir()


def test_a_killed_plots_temp_png_is_removed_at_once_when_its_writer_is_gone(tmp_path):
    """A SIGKILLed plot leaves ``.NAME.png.PID.XXXX.png``: the next plot removes it at once
    when that pid no longer runs (before, only after 5 minutes); a live writer's temp (this
    process's, or one without a pid that is fresh) stays."""
    import os
    import subprocess
    import sys

    from prefixbench.study.plots import _remove_stale_temps

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid now names no process
    dead = tmp_path / f".01_mean_ttft_by_policy.png.{child.pid}.abc123.png"
    live = tmp_path / f".02_x.png.{os.getpid()}.def456.png"
    fresh = tmp_path / ".03_x.png.ghi789.png"
    for p in (dead, live, fresh):
        p.write_bytes(b"x")
    _remove_stale_temps(tmp_path)
    assert not dead.exists() and live.exists() and fresh.exists()
