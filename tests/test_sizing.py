"""The "does not fit" fix: a bigger accelerator and the devices needed (catalog memory)."""

from __future__ import annotations

from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.physics.sizing import devices_needed, fit_fix


def test_devices_needed_by_hand():
    # L4: 24 GB per device (datasheet); 27.6 GB needs 2 devices (48 GB), 48.0 GB needs 3
    assert devices_needed(27.6e9, 24) == 2
    assert devices_needed(48.0e9, 24) == 3
    assert devices_needed(1e9, 24) == 1


def test_fix_names_a_bigger_accelerator_and_the_devices():
    fix = fit_fix(27.6e9, "decode", "l4", 1)
    # the smallest catalog device above 24 GB that holds 27.6 GB alone: A100 40 GB
    assert "cluster.decode.accelerator=a100-40gb" in fix
    assert "cluster.decode.devices=2" in fix
    fix = fit_fix(141.1e9, "prefill", "l4", 1)  # Llama-3.1-70B bf16 weights
    assert "cluster.prefill.accelerator=b200" in fix  # 180 GB, the only one-device fit
    assert "cluster.prefill.devices=6" in fix  # 6 × 24 = 144 GB > 141.1 GB


def test_7b_on_the_default_l4_suggests_a_bigger_accelerator(tmp_path):
    r = CliRunner(env={"COLUMNS": "80", "TERM": "dumb"}).invoke(
        app, ["run", "--set", "model=qwen2-7b", "--out", str(tmp_path)]
    )
    assert r.exit_code != 0
    assert "cluster.decode.accelerator=" in r.stderr and "cluster.decode.devices=" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
