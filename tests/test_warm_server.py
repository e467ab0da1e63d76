"""The opt-in warm server (docs/design.md "The warm server"): a command run through it
prints the same bytes, writes the same files and exits with the same status as the same
command run in its own process; a client whose key differs, or that finds a dead socket,
runs in its own process; a server refuses a request made under another key."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from prefixbench.support import warm, warmserve

_RUN = ["run", "--set", "run.requests=200", "--set", "run.warmup_requests=10",
        "-p", "transfer_per_request,replicate_hotset", "--out", "out"]  # fmt: skip


def _pb(env: dict, *argv: str, cwd: Path, server: bool = True, **extra):
    """``python -m prefixbench argv`` in ``cwd``: through a live server, or (server=False)
    with PREFIXBENCH_SERVER=0, in its own process."""
    env = {k: v for k, v in env.items() if k != "PREFIXBENCH_SERVER"}
    env.update(extra)
    if not server:
        env["PREFIXBENCH_SERVER"] = "0"
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "prefixbench", *argv], env=env, cwd=cwd,
                          capture_output=True, timeout=300)  # fmt: skip


def _served(env: dict, expect: int | None = None) -> int:
    """Commands the server has handed to a spare (waiting a little for ``expect``: the
    server counts a command when its spare reports taking it)."""
    folder = Path(env["XDG_RUNTIME_DIR"]) / "prefixbench"
    for _ in range(100):
        (status,) = folder.glob("*.json")
        served = json.loads(status.read_text())["served"]
        if expect is None or served == expect:
            break
        time.sleep(0.05)
    return served


@pytest.fixture(scope="module")
def server_env():
    """A server started in a private runtime folder (a short path: a unix socket's name
    holds at most 107 bytes), stopped at the end."""
    runtime = tempfile.mkdtemp(prefix="pbw", dir="/tmp")
    os.chmod(runtime, 0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "COLUMNS": "80"}
    env.pop("PREFIXBENCH_SERVER", None)
    home = Path(runtime) / "work"
    p = _pb(env, "server", "start", "--idle", "120", cwd=home, server=False)
    assert p.returncode == 0, p.stderr.decode()
    yield env
    _pb(env, "server", "stop", cwd=home, server=False)
    shutil.rmtree(runtime, ignore_errors=True)


def test_a_run_through_the_server_prints_writes_and_exits_as_in_its_own_process(
    server_env, tmp_path
):
    before = _served(server_env)
    warm_run = _pb(server_env, *_RUN, cwd=tmp_path / "warm")
    assert _served(server_env, before + 1) == before + 1  # it did go through the server
    own = _pb(server_env, *_RUN, cwd=tmp_path / "own", server=False)
    assert _served(server_env, before + 1) == before + 1
    assert own.returncode == warm_run.returncode == 0, own.stderr.decode()
    assert warm_run.stdout == own.stdout and warm_run.stderr == own.stderr
    assert b"transfer_per_request" in own.stdout
    names = sorted(p.name for p in (tmp_path / "own" / "out").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "warm" / "out").iterdir())
    for name in names:
        own_bytes = (tmp_path / "own" / "out" / name).read_bytes()
        assert (tmp_path / "warm" / "out" / name).read_bytes() == own_bytes, name


def test_stdout_and_stderr_interleave_as_in_its_own_process(server_env, tmp_path):
    """Both streams into one pipe: the same bytes in the same order, so the child's text
    streams buffer as the client's interpreter's do (PYTHONUNBUFFERED included)."""
    argv = [sys.executable, "-m", "prefixbench", *_RUN]
    runs = {}
    for side, extra in (("warm", {}), ("own", {"PREFIXBENCH_SERVER": "0"})):
        env = {k: v for k, v in server_env.items() if k != "PREFIXBENCH_SERVER"}
        (tmp_path / side).mkdir()
        runs[side] = subprocess.run(argv, env={**env, **extra}, cwd=tmp_path / side,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    assert runs["warm"].returncode == runs["own"].returncode == 0
    assert runs["warm"].stdout == runs["own"].stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--bogus"],  # a usage error: exit 2, one line
        ["run", "missing.yaml"],  # bad input: one line, non-zero
        ["cost", "qwen2-0.5b", "--json"],
        ["--help"],
    ],
)
def test_errors_help_and_json_are_the_same_bytes_and_status(server_env, tmp_path, argv):
    before = _served(server_env)
    warm_run = _pb(server_env, *argv, cwd=tmp_path)
    own = _pb(server_env, *argv, cwd=tmp_path, server=False)
    assert _served(server_env, before + 1) == before + 1
    assert (warm_run.returncode, warm_run.stdout, warm_run.stderr) == (
        own.returncode, own.stdout, own.stderr,
    )  # fmt: skip
    if argv[0] == "run":
        assert own.returncode != 0 and b"Traceback" not in own.stderr


def test_another_import_time_setting_runs_in_its_own_process(server_env, tmp_path):
    before = _served(server_env)
    p = _pb(server_env, "cost", "qwen2-0.5b", cwd=tmp_path, PREFIXBENCH_ANY_SETTING="1")
    assert p.returncode == 0 and b"qwen2-0.5b" in p.stdout
    assert _served(server_env) == before  # another key: no server of that name


def test_the_server_refuses_a_request_made_under_another_key(server_env):
    folder = Path(server_env["XDG_RUNTIME_DIR"]) / "prefixbench"
    (path,) = folder.glob("*.sock")
    before = _served(server_env)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(path))
        warm.send_message(s, {"key": "0" * 20, "argv": ["prefixbench", "--help"]}, [0, 1, 2])
        reply, _ = warm.recv_message(s)
    assert reply == {"refused": "stale key"}
    assert _served(server_env, before + 1) == before + 1  # a spare took it, and ran nothing


def test_ctrl_c_reaches_the_command_as_in_its_own_process(server_env, tmp_path):
    import signal

    before = _served(server_env)
    env = {k: v for k, v in server_env.items() if k != "PREFIXBENCH_SERVER"}
    argv = ["run", "--set", "run.requests=400000", "-p", "transfer_per_request", "--out", "o"]
    p = subprocess.Popen([sys.executable, "-m", "prefixbench", *argv], env=env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    _served(server_env, before + 1)
    time.sleep(0.5)  # well inside the run (seconds), past its start
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.endswith(b"interrupted\n"), err[-500:]
    assert not (tmp_path / "o" / "summary.parquet").exists()


def test_status_and_stop(server_env, tmp_path):
    p = _pb(server_env, "server", "status", "--json", cwd=tmp_path, server=False)
    st = json.loads(p.stdout)
    assert p.returncode == 0 and st["running"] and st["socket"].endswith(".sock")


def test_a_dead_servers_socket_falls_back_silently(tmp_path):
    runtime = tempfile.mkdtemp(prefix="pbd", dir="/tmp")
    try:
        os.chmod(runtime, 0o700)
        env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "COLUMNS": "80"}
        env.pop("PREFIXBENCH_SERVER", None)
        key = subprocess.run(
            [sys.executable, "-c", "from prefixbench.support.warm import server_key as k; print(k())"],
            env=env, capture_output=True, text=True, check=True, cwd=tmp_path,
        ).stdout.strip()  # fmt: skip
        folder = Path(runtime) / "prefixbench"
        folder.mkdir(mode=0o700)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # bound, never served
            s.bind(str(folder / f"{key}.sock"))
        p = _pb(env, "cost", "qwen2-0.5b", cwd=tmp_path)
        own = _pb(env, "cost", "qwen2-0.5b", cwd=tmp_path, server=False)
        assert p.returncode == 0 and p.stderr == b""
        assert p.stdout == own.stdout
        status = _pb(env, "server", "status", cwd=tmp_path, server=False)
        assert status.returncode == 1 and b"not running" in status.stdout
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_server_1_starts_one_for_the_next_command_and_it_stops_when_idle(tmp_path):
    runtime = tempfile.mkdtemp(prefix="pba", dir="/tmp")
    try:
        os.chmod(runtime, 0o700)
        env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "PREFIXBENCH_SERVER_IDLE": "5"}
        p = _pb(env, "cost", "qwen2-0.5b", cwd=tmp_path, PREFIXBENCH_SERVER="1")
        assert p.returncode == 0 and b"qwen2-0.5b" in p.stdout  # ran in its own process

        folder = Path(runtime) / "prefixbench"

        def running() -> bool:
            return _pb(env, "server", "status", cwd=tmp_path, server=False).returncode == 0

        deadline = time.monotonic() + 120  # listening: its status file is written
        while not list(folder.glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.2)
        p = _pb(env, "cost", "qwen2-0.5b", cwd=tmp_path, PREFIXBENCH_SERVER="1")
        assert p.returncode == 0 and _served(env, 1) == 1
        deadline = time.monotonic() + 30  # idle 5 s, checked every second
        while running() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not running()
        assert not list((Path(runtime) / "prefixbench").glob("*.sock"))
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_the_key_follows_import_time_settings_but_not_the_servers_own(monkeypatch):
    base = warm.server_key()
    monkeypatch.setenv("PREFIXBENCH_SERVER", "1")
    monkeypatch.setenv("PREFIXBENCH_SERVER_IDLE", "5")
    monkeypatch.setenv("HOME_OF_SOMETHING_ELSE", "x")
    assert warm.server_key() == base
    monkeypatch.setenv("NUMBA_BOUNDSCHECK", "1")
    assert warm.server_key() != base


def test_a_folder_others_may_enter_holds_no_server(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "prefixbench").mkdir(mode=0o755)
    os.chmod(tmp_path / "prefixbench", 0o755)
    assert warm.runtime_dir() is None
    os.chmod(tmp_path / "prefixbench", 0o700)
    assert warm.runtime_dir() == str(tmp_path / "prefixbench")


_STREAMS = """
import sys
from prefixbench.support import warm, warmserve
def shape(f):
    return (type(f.buffer).__name__, f.encoding, f.errors, f.line_buffering, f.write_through)
before = [shape(f) for f in (sys.stdin, sys.stdout, sys.stderr)]
warmserve._rebuild_streams(warm._streams())
after = [shape(f) for f in (sys.stdin, sys.stdout, sys.stderr)]
print(before == after, before, after)
"""


@pytest.mark.parametrize("unbuffered", ["1", None])
def test_the_childs_streams_buffer_as_the_clients(unbuffered, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    p = subprocess.run([sys.executable, "-c", _STREAMS], env=env, capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, check=True)  # fmt: skip
    assert p.stdout.startswith("True"), p.stdout


@pytest.mark.parametrize("code,status", [(None, 0), (3, 3), (256, 256), ("bye", 1)])
def test_a_system_exit_becomes_the_interpreters_status(code, status, capsys):
    assert warmserve._exit_code(code) == status
