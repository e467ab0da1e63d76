"""The server half of the opt-in warm server (docs/design.md "The warm server").

The server imports what every simulating command needs (``preload``: numpy, numba,
pydantic, the engine's machine code, the CLI), then keeps one forked *spare* waiting on the
socket. The spare first runs ``spare_setup`` (polars, whose import starts a thread pool, so
it is imported after the fork, never in the server that forks), then accepts one client,
tells the server (which forks the next spare), takes the client's working directory,
environment, umask, argv and terminal descriptors (SCM_RIGHTS), and runs ``run`` as the
console script would; it sends back the exit status and exits. Nothing in the server runs a
command, so every child starts from the same state. The server stops when it has been idle
``idle_s`` seconds, on SIGTERM (`prefixbench server stop`), or when its sources change.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

from prefixbench.errors import PrefixbenchError

from .files import write_atomic
from .warm import current_key, recv_message, runtime_dir, send_message, server_key, socket_path

_SIGNALS_RESET = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD)


def _rebuild_streams(specs: list[dict]) -> None:
    """stdin, stdout and stderr over descriptors 0-2, as the client's interpreter made them."""
    import io

    for i, (name, spec) in enumerate(zip(("stdin", "stdout", "stderr"), specs, strict=True)):
        old = getattr(sys, name)
        if old is not None and i:
            try:
                old.flush()
            except (OSError, ValueError):
                pass
        raw = spec.get("raw") and i > 0
        binary = io.open(i, "rb" if i == 0 else "wb", buffering=0 if raw else -1, closefd=False)  # noqa: UP020
        stream = io.TextIOWrapper(binary, encoding=spec["encoding"], errors=spec["errors"],
                                  line_buffering=spec["line_buffering"],
                                  write_through=spec.get("write_through", False))  # fmt: skip
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _become(req: dict, fds: list[int], import_env: dict[str, str]) -> None:
    """Turn this spare into the client's command: its descriptors, folder, environment (plus
    what the server's imports added, as they would have in the client), argv, streams."""
    from . import warm

    warm._this_key[:] = [req["key"]]
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    os.environ.clear()
    os.environ.update(req["env"])
    for k, v in import_env.items():
        os.environ.setdefault(k, v)
    sys.argv = list(req["argv"])
    if sys.path:  # the script's folder, or the working directory (python -m)
        sys.path[0] = req.get("path0", sys.path[0])
    main = sys.modules.get("__main__")
    if main is not None:  # click names the program from it ("python -m prefixbench")
        main.__package__ = req["main_package"]
    _rebuild_streams(req["streams"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it


_done = threading.Event()


def _watch(conn: socket.socket) -> None:
    """If the client goes away (killed), end the command as its own death would."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    if not _done.is_set():
        os.killpg(0, signal.SIGTERM)


def _exit_code(code) -> int:
    """The status the interpreter exits with for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flushed(code: int) -> int:
    """Run the atexit handlers and flush the streams, as interpreter shutdown does (a flush
    that fails makes the status 120, as there)."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = 120 if code == 0 else code
    return code


def _cpu_s() -> float:
    """CPU seconds of this process and of its waited-for children (a sweep's workers)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _execute(run: Callable[[], None]) -> dict:
    """Run the command; its exit as the client must reproduce it, and its CPU seconds."""
    cpu0, t0 = _cpu_s(), time.perf_counter()
    outcome = _outcome(run)
    return {**outcome, "cpu_s": _cpu_s() - cpu0, "wall_s": time.perf_counter() - t0}


def _outcome(run: Callable[[], None]) -> dict:
    import traceback

    try:
        run()
        code = 0
    except SystemExit as e:
        code = _exit_code(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _flushed(0)
        return {"signal": int(signal.SIGINT)}
    except BaseException:  # noqa: BLE001 - an uncaught error ends the process as it would
        sys.excepthook(*sys.exc_info())
        code = 1
    return {"exit": _flushed(code)}


def _peer_is_us(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1] == os.getuid()


def _serve_one(conn: socket.socket, key: str, run, import_env, setup_cpu_s: float) -> None:
    """The accepted client's command, in this process; never returns. The exit message
    carries the CPU seconds the spare spent on its imports before the client came."""
    try:
        if not _peer_is_us(conn):  # (the folder is private too)
            os._exit(0)
        req, fds = recv_message(conn, maxfds=3)
        ok = isinstance(req, dict) and len(fds) == 3
        if not ok or req.get("key") != key:
            send_message(conn, {"refused": "stale key" if ok else "bad request"})
            os._exit(0)
        os.setpgid(0, 0)  # the client forwards its signals to this group
        send_message(conn, {"pid": os.getpid()})
        _become(req, fds, import_env)
    except BaseException:  # noqa: BLE001 - nothing ran: the client falls back
        os._exit(1)
    threading.Thread(target=_watch, args=(conn,), daemon=True).start()
    outcome = {**_execute(run), "setup_cpu_s": setup_cpu_s}
    _done.set()
    try:
        send_message(conn, outcome)
    finally:
        os._exit(outcome.get("exit", 1))


def _spare(listener: socket.socket, notify: int, key: str, run, spare_setup, import_env):
    """A forked spare: finish its imports, wait for one client, serve it; never returns."""
    try:
        for sig in _SIGNALS_RESET:
            signal.signal(sig, signal.SIG_DFL)
        spare_setup()
        setup_cpu_s = _cpu_s()  # (a forked process's counts start at zero)
        conn, _ = listener.accept()
        os.write(notify, b"t")
        os.close(notify)
        listener.close()
    except BaseException:  # noqa: BLE001 - the server sees the spare die and forks another
        os._exit(1)
    _serve_one(conn, key, run, import_env, setup_cpu_s)


SPARES = 2  # spares kept waiting: back-to-back commands never wait for a spare's imports


class _Server:
    """The listening socket, the waiting spares and the children still running commands."""

    def __init__(self, key: str, directory: str, idle_s: float, run, spare_setup) -> None:
        self.key, self.directory, self.idle_s = key, directory, idle_s
        self.run, self.spare_setup = run, spare_setup
        self.path = socket_path(key, directory)
        self.status_path = os.path.join(directory, f"{key}.json")
        self.import_env: dict[str, str] = {}
        self.running: set[int] = set()
        self.spares: dict[int, int] = {}  # the read end of each spare's pipe -> its pid
        self.served, self.failures = 0, 0
        self.stopping = False
        self.last = self.checked = time.monotonic()

    def listen(self) -> None:
        """Bind a fresh socket and move it onto the key's name in one step."""
        tmp = f"{self.path}.{os.getpid()}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(tmp)
        os.chmod(tmp, 0o600)
        self.listener.listen(16)
        os.replace(tmp, self.path)
        self.inode = os.stat(self.path).st_ino

    def write_status(self) -> None:
        status = {"pid": os.getpid(), "key": self.key, "socket": self.path,
                  "idle_s": self.idle_s, "served": self.served, "python": sys.executable,
                  "started": self.started}  # fmt: skip
        write_atomic(self.status_path, json.dumps(status), PrefixbenchError)

    def top_up(self) -> None:
        """Fork spares until SPARES wait (unless they keep dying before taking a client)."""
        while len(self.spares) < SPARES and self.failures < 5:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                os.close(self.lock_fd)
                for fd in self.spares:
                    os.close(fd)
                _spare(self.listener, w, self.key, self.run, self.spare_setup, self.import_env)
            os.close(w)
            self.spares[r] = pid

    def on_notify(self, fd: int) -> None:
        """A spare took a client (or died before): fork the next one."""
        took = os.read(fd, 1) == b"t"
        os.close(fd)
        pid = self.spares.pop(fd)
        if took:
            self.running.add(pid)
            self.served, self.failures, self.last = self.served + 1, 0, time.monotonic()
        else:
            self.failures += 1
            time.sleep(min(5.0, 0.2 * 2**self.failures))
        self.top_up()
        self.write_status()

    def reap(self) -> None:
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.running.discard(pid)

    def should_stop(self) -> bool:
        now = time.monotonic()
        if self.stopping or not self.spares:
            return True
        if not self.running and now - self.last > self.idle_s:
            return True
        if now - self.checked > 5.0:  # an edited source or an upgrade: this server is stale
            self.checked = now
            return server_key(self.env_at_start) != self.key
        return False

    def loop(self) -> None:
        while not self.should_stop():
            ready, _, _ = select.select(list(self.spares), [], [], 1.0)
            self.reap()
            for fd in ready:
                self.on_notify(fd)

    def close(self) -> None:
        for pid in self.spares.values():
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        try:
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except OSError:
            pass
        log = os.path.join(self.directory, f"{self.key}.log")
        for path, only_if_empty in ((self.status_path, False), (log, True)):
            try:
                if not only_if_empty or os.path.getsize(path) == 0:
                    os.unlink(path)
            except OSError:
                pass
        self.listener.close()


def _lock(directory: str, key: str) -> int | None:
    """This key's lock, held while its server lives; None if another server holds it."""
    fd = os.open(os.path.join(directory, f"{key}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def serve(run: Callable[[], None], preload: Callable[[], None],
          spare_setup: Callable[[], None], idle_s: float) -> int:  # fmt: skip
    """Run a server for this process's key until it is idle, stopped or stale; 0 also when
    one is already running for the key."""
    env_at_start = dict(os.environ)
    key, directory = server_key(), runtime_dir(create=True)
    if directory is None:
        print("prefixbench server: no private folder for the socket", file=sys.stderr)
        return 1
    lock_fd = _lock(directory, key)
    if lock_fd is None:
        print(f"prefixbench server: already running for key {key}", file=sys.stderr)
        return 0
    srv = _Server(key, directory, idle_s, run, spare_setup)
    srv.lock_fd, srv.env_at_start, srv.started = lock_fd, env_at_start, time.time()
    preload()
    srv.import_env = {k: v for k, v in os.environ.items() if k not in env_at_start}

    def stop(_signum, _frame):
        srv.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    import gc

    gc.collect()
    gc.freeze()  # forked children share the imported objects' pages and skip walking them
    srv.listen()
    srv.last = srv.checked = time.monotonic()  # idle from now, not from before the imports
    try:
        srv.top_up()
        srv.write_status()
        srv.loop()
    finally:
        srv.close()
    return 0


def status(directory: str | None = None, key: str | None = None) -> dict | None:
    """The live server's status for this key (pid, socket, commands served), or None."""
    key = key or current_key()
    directory = directory or runtime_dir()
    if directory is None:
        return None
    try:
        fd = os.open(os.path.join(directory, f"{key}.lock"), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None  # nobody holds the lock: no server
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    try:
        with open(os.path.join(directory, f"{key}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"key": key, "starting": True}
