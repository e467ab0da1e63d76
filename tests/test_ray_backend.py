"""The Ray backend: same rows as the local pool, resumable, one-line errors.

Needs the `ray` extra (pip install '.[ray]'); skipped without it. Runs a private local Ray
instance of 2 CPUs (no network, no dashboard)."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time

import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from prefixbench.cli import app  # noqa: E402
from prefixbench.errors import PrefixbenchError, ScenarioError  # noqa: E402
from prefixbench.io.artifacts import read_artifact  # noqa: E402
from prefixbench.scenario.loader import load_scenario  # noqa: E402
from prefixbench.study.backends import SerialBackend, make_backend  # noqa: E402
from prefixbench.study.grid import build_spec  # noqa: E402
from prefixbench.study.ray_backend import RayBackend  # noqa: E402
from prefixbench.study.sweep import run_sweep  # noqa: E402

TINY = {
    "models": ["qwen2-0.5b"],
    "workloads": ["medium_chat", "tool_call"],
    "budgets": [0.35, 1.0],
    "seeds": [0, 1],
    "policies": ["transfer_per_request", "replicate_all_lru"],
    "set": ["run.requests=400", "run.warmup_requests=50"],
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    return out, run_sweep(build_spec(TINY), out, backend=SerialBackend())


@pytest.fixture(scope="module")
def on_ray(tmp_path_factory):
    """The same sweep on a Ray instance the backend starts (2 CPUs) and shuts down itself."""
    assert not ray.is_initialized()
    out = tmp_path_factory.mktemp("ray")
    arrived = []
    paths = run_sweep(build_spec(TINY), out, backend=RayBackend(jobs=2), on_point=arrived.append)
    return out, paths, arrived


def test_ray_sweep_gives_the_local_rows(local, on_ray):
    (_, lp), (_, rp, arrived) = local, on_ray
    for kind in ("runs", "prefixes", "agg"):
        assert_frame_equal(read_artifact(lp[kind], kind), read_artifact(rp[kind], kind))
    assert len(arrived) == 8 and len({p.point_id for p in arrived}) == 8  # progress per point
    assert not ray.is_initialized()  # the instance it started is gone


def test_resumed_ray_sweep_is_identical(local, on_ray, tmp_path):
    (_, lp), (out, _, _) = local, on_ray
    shutil.copytree(out, tmp_path, dirs_exist_ok=True)
    parts = sorted((tmp_path / "parts").glob("*.runs.parquet"))
    for p in parts[::2]:  # lose half the finished points
        p.unlink()
    seen = {}
    again = run_sweep(
        build_spec(TINY),
        tmp_path,
        backend=make_backend("ray", jobs=2),
        on_start=lambda total, done: seen.update(total=total, done=done),
    )
    assert seen == {"total": 8, "done": 4}
    assert_frame_equal(read_artifact(lp["runs"], "runs"), read_artifact(again["runs"], "runs"))


def test_worker_failures_surface_as_one_line(tmp_path, monkeypatch):
    with pytest.raises(ScenarioError) as here:
        load_scenario("no_such_workload")
    # a Ray instance initialised by the caller is used and left running
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(ScenarioError) as there:
            list(RayBackend(jobs=1).map_unordered(load_scenario, ["no_such_workload"]))
        assert type(there.value) is type(here.value)
        assert there.value.line() == here.value.line() and "\n" not in there.value.line()
        # code the workers cannot import (as when prefixbench is missing on a node)
        (tmp_path / "driver_only.py").write_text("def double(x):\n    return 2 * x\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        from driver_only import double

        with pytest.raises(PrefixbenchError, match="cannot import 'driver_only'; install the same"):
            list(RayBackend().map_unordered(double, [1]))
        assert ray.is_initialized()
    finally:
        ray.shutdown()
        sys.modules.pop("driver_only", None)


@pytest.mark.parametrize("form", ["{}", "ray://{}"])
def test_unreachable_address_fails_fast_in_one_line(form):
    address = form.format(f"127.0.0.1:{_closed_port()}")
    t = time.monotonic()
    with pytest.raises(ScenarioError) as e:
        RayBackend(address=address)
    assert time.monotonic() - t < 10
    line = e.value.line()
    assert (
        address in line and "ray start --head" in line and "--address" in line and "\n" not in line
    )


def test_cli_bad_address_is_one_line(tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    r = CliRunner().invoke(
        app, ["sweep", "--quick", "--backend", "ray", "--address", address, "--out", str(tmp_path)]
    )
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and address in r.output


def test_ray_not_installed_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(
        ScenarioError, match=r"^Ray is not installed; pip install 'prefixbench\[ray\]'$"
    ):
        make_backend("ray")
    r = CliRunner().invoke(app, ["sweep", "--quick", "--backend", "ray", "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.strip() == "error: Ray is not installed; pip install 'prefixbench[ray]'"
