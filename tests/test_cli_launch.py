"""The CLI round trip: `import` writes a scenario `run` runs, `run` answers in launch flags
(`--emit` prints only them), `--save-result` writes vLLM-format files, `--json` is strict."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.scenario.loader import load_scenario

PREFILL = ("vllm serve Qwen/Qwen2-0.5B "
           """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'""")  # fmt: skip
DECODE = ("vllm serve Qwen/Qwen2-0.5B --max-num-seqs 32 --frobnicate 1 "
          """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'""")  # fmt: skip
BENCH = ("vllm bench serve --dataset-name prefix_repetition --prefix-repetition-num-prefixes 4 "
         "--num-prompts 300 --num-warmups 50 --request-rate 4 --ignore-eos")  # fmt: skip


def imported(tmp_path, *extra):
    out = tmp_path / "my.yaml"
    args = ["import", "--prefill", PREFILL, "--decode", DECODE, "--bench", BENCH,
            "--hardware", "l4", "--link", "eth-25g", "--out", str(out), *extra]  # fmt: skip
    return CliRunner().invoke(app, args, env={"COLUMNS": "80"}), out


def test_import_writes_a_runnable_scenario_and_a_table(tmp_path):
    result, out = imported(tmp_path)
    assert result.exit_code == 0, result.output
    s = load_scenario(str(out))
    assert s.model == "Qwen/Qwen2-0.5B" and s.cluster.max_decode_batch == 32
    assert s.policy.value == "replicate_all_lru"
    assert "--frobnicate" in result.output  # warned, and in the table
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    assert out.read_text().startswith("# written by `prefixbench import` from:")


def test_import_json_is_strict(tmp_path):
    result, _ = imported(tmp_path, "--json")
    doc = json.loads(result.stdout)
    assert {"scenario", "flags", "warnings", "path"} <= set(doc)
    assert any("--frobnicate" in w for w in doc["warnings"])


def test_run_emits_the_winners_flags_and_saves_results(tmp_path):
    _, out = imported(tmp_path)
    res = tmp_path / "res"
    result = CliRunner().invoke(app, [
        "run", str(out), "--policy", "replicate_all_lru", "--out", str(tmp_path / "run"),
        "--emit", "vllm", "--save-result", "--result-dir", str(res)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    lines = result.stdout.replace(" \\\n", " ").splitlines()  # join the continuations
    assert lines[0] == "# replicate_all_lru: prefill"
    assert lines[1].startswith("vllm serve Qwen/Qwen2-0.5B ")
    assert lines[2] == "# replicate_all_lru: decode"
    assert "--enable-prefix-caching" in lines[3] and "kv_consumer" in lines[3]
    (saved,) = res.glob("*.json")
    doc = json.loads(saved.read_text())
    assert doc["label"] == "replicate_all_lru" and doc["num_prompts"] == 300
    assert doc["model_id"] == "Qwen/Qwen2-0.5B" and doc["request_rate"] == 4.0
