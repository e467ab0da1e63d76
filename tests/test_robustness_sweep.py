"""No finished run is ever lost: SIGKILL and Ctrl-C in the middle of `prefixbench sweep`,
damaged part files, and results folders that must not be touched.

The subprocess tests start the real CLI in its own session (process group) so a kill also
reaches the spawned pool workers, exactly as a terminal's Ctrl-C or an OOM-killer would.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal
from robustness_util import assert_clear, assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import ArtifactError
from prefixbench.io.artifacts import read_artifact
from prefixbench.study.grid import build_spec
from prefixbench.study.sweep import run_sweep

GRID = [
    "--models",
    "qwen2-0.5b",
    "--workloads",
    "medium_chat,tool_call",
    "--budgets",
    "0.35,1.0",
    "--seeds",
    "0,1,2",
    "--set",
    "run.requests=1500",
    "--set",
    "run.warmup_requests=100",
    "--jobs",
    "2",
]
CMD = [sys.executable, "-m", "prefixbench", "sweep", *GRID]
POINTS, RUNS = 12, 84  # 7 policies per point
COMBINED = ("runs", "agg", "prefixes")
ENV = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
KILL_SEED = int(os.environ.get("PREFIXBENCH_KILL_SEED", random.SystemRandom().randrange(10**6)))

runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})


def _start(out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CMD, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        start_new_session=True,  # its own process group: killpg reaches the pool workers too
    )


def _group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def _wait_group_gone(pgid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _group_alive(pgid):
        assert time.monotonic() < deadline, f"processes left behind: {_group_alive(pgid)}"
        time.sleep(0.05)


def _assert_same_results(out: Path, ref: Path) -> None:
    for name in COMBINED:
        got, want = (
            read_artifact(out / f"{name}.parquet", name),
            read_artifact(ref / f"{name}.parquet", name),
        )
        assert_frame_equal(got, want)
        # polars writes deterministic Parquet (checked in test_robustness_artifacts), so the
        # files themselves are identical too
        assert (out / f"{name}.parquet").read_bytes() == (ref / f"{name}.parquet").read_bytes(), (
            name
        )
    runs = read_artifact(out / "runs.parquet", "runs")
    assert runs.height == RUNS and runs["run_id"].n_unique() == RUNS  # nothing lost or doubled
    parts = {p.name for p in (out / "parts").iterdir() if not p.name.startswith(".")}
    assert parts == {p.name for p in (ref / "parts").iterdir()}


@pytest.fixture(scope="module")
def timed_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """The same sweep, never interrupted, and how long it took."""
    ref = tmp_path_factory.mktemp("reference")
    t0 = time.monotonic()
    r = subprocess.run([*CMD, "--out", str(ref)], capture_output=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    return ref, time.monotonic() - t0


@pytest.fixture(scope="module")
def reference(timed_reference: tuple[Path, float]) -> Path:
    return timed_reference[0]


def test_sigkill_at_random_moments_loses_nothing(timed_reference, tmp_path: Path) -> None:
    reference, seconds = timed_reference
    rng = random.Random(KILL_SEED)
    note = f"(PREFIXBENCH_KILL_SEED={KILL_SEED})"
    out = tmp_path / "killed"
    kills, scale = 0, 1.0
    for _ in range(8):
        p = _start(out)
        delay = rng.uniform(0.05, 0.8) * seconds * scale  # from start-up to the last points
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            kills += 1
        else:
            p.communicate()
            if kills:
                break  # finished before the kill, after at least one
            # A quieter minute than the reference's ran the whole sweep before the kill:
            # start over, sooner, so the test always kills at least once.
            shutil.rmtree(out, ignore_errors=True)
            scale /= 2
            continue
        _wait_group_gone(p.pid)
        if kills >= 4:
            break
    final = subprocess.run([*CMD, "--out", str(out)], capture_output=True, env=ENV, timeout=300)
    assert final.returncode == 0, f"{note} {final.stderr.decode()}"
    assert kills >= 1, note
    _assert_same_results(out, reference)


def _wait_for_parts(out: Path, p: subprocess.Popen, n: int = 1, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list((out / "parts").glob("*.runs.parquet"))) < n:
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_ctrl_c_stops_cleanly_and_a_rerun_resumes(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    p = _start(out)
    _wait_for_parts(out, p)
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    stdout, stderr = p.communicate(timeout=60)
    text = stderr.decode()
    assert p.returncode == 130, text
    assert "Traceback" not in text + stdout.decode() and "KeyboardInterrupt" not in text, text
    said = [line for line in text.splitlines() if "interrupted" in line]
    assert said == [
        f"interrupted: every finished grid point is kept in {out}/parts; "
        "run the same command again to resume"
    ], text
    others = [line for line in text.splitlines() if line.strip() and line not in said]
    assert all(line.startswith("sweep ") for line in others), others  # only the progress bar
    _wait_group_gone(p.pid)
    done = len(list((out / "parts").glob("*.runs.parquet")))
    assert 1 <= done <= POINTS

    again = subprocess.run([*CMD, "--out", str(out)], capture_output=True, env=ENV, timeout=300)
    assert again.returncode == 0, again.stderr.decode()
    assert f"resuming: {done} of {POINTS} grid points already finished" in again.stderr.decode()
    _assert_same_results(out, reference)


def test_sigint_to_the_parent_alone(tmp_path: Path) -> None:
    """`kill -INT <pid>`: the workers do not get the signal; the parent still ends them."""
    out = tmp_path / "parent_only"
    p = _start(out)
    _wait_for_parts(out, p)
    p.send_signal(signal.SIGINT)
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert (
        sum("run the same command again to resume" in line for line in stderr.decode().splitlines())
        == 1
    )
    _wait_group_gone(p.pid)


def test_sigkill_to_the_parent_alone_leaves_no_process(reference: Path, tmp_path: Path) -> None:
    """`kill -9 <pid>` of the parent only: the workers and the resource tracker die with it
    (they used to live on, ~236 MB each), and a rerun ends byte-identical."""
    out = tmp_path / "parent_killed"
    p = _start(out)
    _wait_for_parts(out, p)
    p.kill()
    p.communicate(timeout=60)
    _wait_group_gone(p.pid, timeout=15)
    again = subprocess.run([*CMD, "--out", str(out)], capture_output=True, env=ENV, timeout=300)
    assert again.returncode == 0, again.stderr.decode()
    _assert_same_results(out, reference)


@pytest.mark.parametrize("to", ["group", "parent"])
def test_sigterm_behaves_like_ctrl_c(reference: Path, tmp_path: Path, to: str) -> None:
    out = tmp_path / f"terminated_{to}"
    p = _start(out)
    _wait_for_parts(out, p)
    if to == "group":
        os.killpg(p.pid, signal.SIGTERM)
    else:
        p.terminate()
    stdout, stderr = p.communicate(timeout=60)
    text = stderr.decode()
    assert p.returncode == 130, text
    assert "Traceback" not in text + stdout.decode(), text
    assert sum("run the same command again to resume" in line for line in text.splitlines()) == 1
    _wait_group_gone(p.pid, timeout=15)
    done = len(list((out / "parts").glob("*.runs.parquet")))
    assert done >= 1
    if to == "group":
        again = subprocess.run([*CMD, "--out", str(out)], capture_output=True, env=ENV, timeout=300)
        assert again.returncode == 0, again.stderr.decode()
        _assert_same_results(out, reference)


# ------------------------------------------------------------------ damaged parts (in-process)

TINY = {
    "models": ["qwen2-0.5b"],
    "workloads": ["medium_chat", "tool_call"],
    "budgets": [1.0],
    "seeds": [0, 1],
    "policies": ["transfer_per_request", "replicate_all_lru"],
    "set": ["run.requests=300", "run.warmup_requests=30"],
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    run_sweep(build_spec(TINY), out, jobs=1)
    return out


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _copy(src: Path, dst: Path) -> None:
    for p in src.rglob("*"):
        if p.is_file():
            (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / p.relative_to(src)).write_bytes(p.read_bytes())


def _flip_data_byte(raw: bytes) -> bytes:
    b = bytearray(raw)
    b[len(b) // 4] ^= 0x10  # inside the column data, before the footer
    return bytes(b)


DAMAGE = {
    "truncated": lambda raw, other: raw[: len(raw) // 2],
    "empty": lambda raw, other: b"",
    "flipped-byte": lambda raw, other: _flip_data_byte(raw),
    "footer-only": lambda raw, other: raw[-200:],
    "another-kind": lambda raw, other: other,  # a valid prefixes file under a runs name
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_part_is_redone_not_read(tiny: Path, tmp_path: Path, damage: str) -> None:
    _copy(tiny, tmp_path)
    parts = sorted((tmp_path / "parts").glob("*.runs.parquet"))
    victim = parts[1]
    other = victim.with_name(victim.name.replace(".runs.", ".prefixes.")).read_bytes()
    victim.write_bytes(DAMAGE[damage](victim.read_bytes(), other))
    (tmp_path / "parts" / f".{parts[0].name}.abc123.tmp").write_bytes(b"PAR1 torn temp file")
    seen = {}
    run_sweep(
        build_spec(TINY),
        tmp_path,
        jobs=1,
        on_start=lambda total, done: seen.update(total=total, done=done),
    )
    assert seen == {"total": 4, "done": 3}  # exactly the damaged point was redone
    for name in COMBINED:
        assert_frame_equal(
            read_artifact(tmp_path / f"{name}.parquet", name),
            read_artifact(tiny / f"{name}.parquet", name),
        )
    assert victim.read_bytes() == (tiny / "parts" / victim.name).read_bytes()


# ------------------------------------------------------------------ results folders left untouched


def test_other_grid_is_refused_and_nothing_changes(tiny: Path, tmp_path: Path) -> None:
    _copy(tiny, tmp_path)
    before = _snapshot(tmp_path)
    r = runner.invoke(
        app,
        [
            "sweep",
            "--models",
            "qwen2-0.5b",
            "--workloads",
            "medium_chat",
            "--budgets",
            "0.5",
            "--seeds",
            "0",
            "--set",
            "run.requests=300",
            "--set",
            "run.warmup_requests=30",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    line = assert_one_stderr_line(r, code=2)
    assert "different sweep grid" in line and "--force" in line
    assert _snapshot(tmp_path) == before


def test_unreadable_grid_record_is_refused(tiny: Path, tmp_path: Path) -> None:
    _copy(tiny, tmp_path)
    (tmp_path / "sweep.json").write_text("{not json")
    before = _snapshot(tmp_path)
    with pytest.raises(ArtifactError) as e:
        run_sweep(build_spec(TINY), tmp_path, jobs=1)
    assert_clear(e.value, where=str(tmp_path))
    assert _snapshot(tmp_path) == before


def test_a_bad_grid_leaves_no_trace(tmp_path: Path) -> None:
    """A typo in the grid must not record that grid in sweep.json (the corrected rerun would
    then be refused as 'a different grid')."""
    out = tmp_path / "res"
    with pytest.raises(Exception) as e:
        run_sweep(build_spec({**TINY, "workloads": ["medium_chat", "tool_cal"]}), out, jobs=1)
    assert "did you mean 'tool_call'" in assert_clear(e.value, where="grid point")
    assert not out.exists()
    run_sweep(build_spec(TINY), out, jobs=1)


def test_impossible_grid_point_is_refused_before_simulating(tmp_path: Path, monkeypatch) -> None:
    import prefixbench.study.sweep as sweep_mod

    monkeypatch.setattr(
        sweep_mod, "run_point", lambda *a, **k: pytest.fail("simulated an impossible grid")
    )
    with pytest.raises(Exception) as e:
        run_sweep(
            build_spec({**TINY, "models": ["qwen2-0.5b", "llama-2-70b"]}), tmp_path / "res", jobs=1
        )
    line = assert_clear(e.value, where="grid point llama-2-70b/medium_chat")
    assert "do not fit" in line
    assert not (tmp_path / "res").exists()


def _unwritable(tmp_path: Path, how: str) -> Path:
    if how == "under-a-file":
        (tmp_path / "file.txt").write_text("not a folder")
        return tmp_path / "file.txt" / "out"
    if os.geteuid() == 0:
        pytest.skip(
            "running as root: permission bits do not stop root (the under-a-file case covers it)"
        )
    ro = tmp_path / "readonly"
    ro.mkdir()
    ro.chmod(0o500)
    return ro / "out"


@pytest.mark.parametrize("how", ["under-a-file", "chmod-0500"])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_unwritable_output_folder(tmp_path: Path, how: str, command: str) -> None:
    target = _unwritable(tmp_path, how)
    args = ["--set", "run.requests=300", "--set", "run.warmup_requests=30", "--out", str(target)]
    if command == "sweep":
        args = [
            "--models",
            "qwen2-0.5b",
            "--workloads",
            "medium_chat",
            "--budgets",
            "1",
            "--seeds",
            "0",
            "--jobs",
            "1",
            *args,
        ]
    r = runner.invoke(app, [command, *args])
    line = assert_one_stderr_line(r, code=2)
    assert "cannot write" in line and str(target) in line, line


def test_results_of_a_finished_sweep_survive_a_full_disk(
    tiny: Path, tmp_path: Path, monkeypatch
) -> None:
    """The combined files are rebuilt at the end of every sweep; if that write fails the
    previous ones stay as they were."""
    _copy(tiny, tmp_path)
    before = _snapshot(tmp_path)
    import prefixbench.io.artifacts as artifacts

    real = artifacts._write_bytes

    def full(file, raw):
        if "agg" in str(file):
            raise OSError(28, "No space left on device")
        return real(file, raw)

    monkeypatch.setattr(artifacts, "_write_bytes", full)
    with pytest.raises(ArtifactError) as e:
        run_sweep(build_spec(TINY), tmp_path, jobs=1)
    assert "No space left on device" in assert_clear(e.value, where=str(tmp_path / "agg.parquet"))
    after = _snapshot(tmp_path)
    assert after == before  # runs.parquet was rewritten with identical bytes; agg untouched
