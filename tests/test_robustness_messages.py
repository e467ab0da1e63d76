"""Messages that misled: recommend's "pass --force" with no such option, a
config.json path called an unknown model, a crossover filter silently dropped, and the
"Exception ignored ... Bad file descriptor" after an interrupted pool."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from robustness_util import assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.cli import app

runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
TINY = ["run.requests=300", "run.warmup_requests=30"]
QWEN_05B = {  # Qwen/Qwen2-0.5B config.json (the fields prefixbench reads)
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
}


@pytest.fixture
def tiny_recommend(monkeypatch, tmp_path: Path):
    """recommend's own sweeps, shortened to 300 requests a run."""
    import prefixbench.study.grid as grid

    real = grid.build_spec

    def short(base=None, **flags):
        return real({**(base or {}), "set": TINY, "seeds": [0, 1]}, **flags)

    monkeypatch.setattr(grid, "build_spec", short)
    monkeypatch.chdir(tmp_path)


def _recommend(*args: str):
    return runner.invoke(app, ["recommend", "-b", "0.5", "--jobs", "1", "--json", *args])


def test_recommend_another_workload_after_a_first_one(tiny_recommend):
    first = _recommend("-m", "qwen2-0.5b", "-w", "tool_call")
    assert first.exit_code == 0, first.stderr
    second = _recommend("-m", "qwen2-0.5b", "-w", "medium_chat")
    assert second.exit_code == 0, second.stderr  # used to say "pass --force" (no such option)
    (row,) = json.loads(second.stdout)
    assert row["workload"] == "medium_chat"


def test_recommend_accepts_a_config_json_path(tiny_recommend, tmp_path: Path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN_05B))
    r = _recommend("-m", str(cfg), "-w", "tool_call")
    assert r.exit_code == 0, r.stderr  # used to say "unknown model 'config'"
    (row,) = json.loads(r.stdout)
    assert row["model"] == str(cfg)


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--accelerator", "h100"], "did you mean 'h100-sxm'"),
        (["--link", "eth"], "--link"),
        (["--accelerator", "l4", "--accelerators", "a10g"], "not in the crossover table"),
    ],
)
def test_crossover_refuses_a_verdict_filter_that_matches_nothing(tmp_path, args, expect):
    r = runner.invoke(app, ["crossover", str(tmp_path), "--models", "qwen2-0.5b", *args])
    line = assert_one_stderr_line(r, code=2)
    assert expect in line, line


def test_crossover_accelerator_name_is_case_insensitive(tmp_path):
    r = runner.invoke(app, ["crossover", str(tmp_path), "--models", "qwen2-0.5b",
                            "--accelerator", "L4"])  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "on l4 over" in r.stdout


def _slow(x):
    time.sleep(30)
    return x


def test_stopping_the_pool_leaves_no_thread_to_race_the_exit():
    """The executor's manager thread is gone when _stop returns: at exit, Python 3.11's hook
    would otherwise write to the pipe it is closing (the 'Bad file descriptor' message)."""
    from concurrent.futures import ProcessPoolExecutor

    from prefixbench.study.backends import _stop

    ex = ProcessPoolExecutor(max_workers=1)
    ex.submit(_slow, 1)
    time.sleep(0.5)
    manager = ex._executor_manager_thread
    _stop(ex)
    assert not manager.is_alive()


def test_numpy_warnings_do_not_reach_stderr():
    """A RuntimeWarning raised inside a command (numpy's 'Mean of empty slice') is not
    printed as a raw extra stderr line."""
    import warnings

    import numpy as np

    from prefixbench.cli.app import guarded

    def noisy():
        return float(np.mean(np.array([])))  # RuntimeWarning: Mean of empty slice

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        guarded(noisy)()
    assert [str(w.message) for w in seen] == []
