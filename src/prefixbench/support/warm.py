"""The client half of the opt-in warm server (docs/design.md "The warm server"): the first
thing the console script does, in the standard library only, before Typer, numpy or numba
are imported.

A server (``support/warmserve.py``, started by ``prefixbench server start``) listens on a
unix socket whose name is a digest of everything its imports depended on: the package
version and sources, ``sys.executable``, ``sys.path``, the interpreter's flags and the
environment variables read at import (NUMBA_*, PREFIXBENCH_*, PYTHON*, thread-pool and
locale settings). A client whose digest differs finds no socket of that name and runs in its
own process as before, so an upgrade, an edited source or another NUMBA_* setting never
talks to a stale server. Any failure before the server has started the command falls back
silently; once it has, the command's exit status is the client's.
"""

import os
import sys

from .. import __version__

# Only os and sys at import: the check must cost a command without a server next to nothing.
# The socket module is imported once a socket file exists, messages are marshal'd (the
# server runs this very interpreter: sys.version is in the key), and the key is hashed with
# hashlib's BLAKE2 without loading OpenSSL.

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# environment variables that modules read when they are imported, so a server's must match
# (and the C library's, read when a process starts: malloc tunables)
_IMPORT_ENV_PREFIXES = ("NUMBA_", "PREFIXBENCH_", "PYTHON", "NUMPY_", "OMP_", "OPENBLAS_",
                        "MKL_", "POLARS_", "TYPER_", "_TYPER_", "LC_", "MALLOC_")  # fmt: skip
_IMPORT_ENV_NAMES = {"LANG", "TZ", "FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "TERMINAL_WIDTH",
                     "GLIBC_TUNABLES", "LD_PRELOAD", "LD_LIBRARY_PATH"}  # fmt: skip
# the server's own settings (PREFIXBENCH_SERVER*): a client that asks for the server must
# match one started without them
_NOT_KEYED_PREFIX = "PREFIXBENCH_SERVER"


def _import_env(environ=os.environ) -> list[tuple[str, str]]:
    return sorted(
        (k, v)
        for k, v in environ.items()
        if (k.startswith(_IMPORT_ENV_PREFIXES) or k in _IMPORT_ENV_NAMES)
        and not k.startswith(_NOT_KEYED_PREFIX)
    )


def _source_stamps() -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every source of the package: an edit or reinstall moves one."""
    stamps = []
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))
                stamps.append((os.path.join(root, name), st.st_size, st.st_mtime_ns))
    return stamps


def _path_stamps() -> list[tuple[str, int]]:
    """sys.path after its first entry (the script's folder or the working directory), each
    with its folder's mtime, which installing or removing a distribution moves."""
    out = []
    for entry in sys.path[1:]:
        try:
            out.append((entry, os.stat(entry).st_mtime_ns))
        except OSError:
            out.append((entry, -1))
    return out


def server_key(environ=None) -> str:
    """The digest a server and its clients share (module docstring), for ``environ`` (by
    default this process's environment); 20 hex digits."""
    parts = [
        __version__, PACKAGE, sys.executable, sys.version, tuple(sys.flags),
        sys.warnoptions, sorted(sys._xoptions.items()), _path_stamps(),
        _import_env(os.environ if environ is None else environ),
        _source_stamps(), os.getuid(),
    ]  # fmt: skip
    try:
        from _blake2 import blake2b
    except ImportError:  # another interpreter than CPython
        from hashlib import blake2b
    return blake2b(repr(parts).encode(), digest_size=10).hexdigest()


_this_key: list[str] = []  # the key this process's command was started under


def current_key() -> str:
    """The key this process's command was started with: computed before any import could
    set an environment variable (``NUMBA_CPU_NAME``), and kept; for `server status`."""
    if not _this_key:
        _this_key.append(server_key())
    return _this_key[0]


def runtime_dir(create: bool = False) -> str | None:
    """The folder of servers' sockets: $XDG_RUNTIME_DIR/prefixbench, else a
    prefixbench-UID folder in the temporary folder; None unless it is a real folder owned by
    this user that nobody else may enter (mode 0700)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        path = os.path.join(base, "prefixbench")
    else:
        path = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"prefixbench-{os.getuid()}")
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    private = st.st_uid == os.getuid() and not st.st_mode & 0o077
    return path if private and os.path.isdir(path) and not os.path.islink(path) else None


def socket_path(key: str, directory: str) -> str:
    return os.path.join(directory, f"{key}.sock")


def send_message(sock, obj, fds: list[int] | None = None) -> None:
    """One message (marshal'd plain data), length-prefixed; ``fds`` travel with it
    (SCM_RIGHTS)."""
    import marshal
    import socket

    data = marshal.dumps(obj)
    data = len(data).to_bytes(4, "big") + data
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    sock.sendall(data)


def recv_message(sock, maxfds: int = 0) -> tuple[object, list[int]]:
    """The next message and the descriptors that came with it; EOFError at a clean end,
    ValueError for a message that is not one."""
    import marshal
    import socket

    fds: list[int] = []
    if maxfds:
        buf, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, maxfds)
    else:
        buf = sock.recv(1 << 16)
    if not buf:
        raise EOFError
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        more = sock.recv(1 << 16)
        if not more:
            raise EOFError
        buf += more
    n = int.from_bytes(buf[:4], "big")
    try:
        return marshal.loads(buf[4 : 4 + n]), fds
    except (EOFError, TypeError) as e:
        raise ValueError("not a message") from e


def _streams() -> list[dict] | None:
    """How this interpreter set up stdin, stdout and stderr, for the server's child to
    rebuild the same text streams over the descriptors it receives; None if one is closed."""
    specs = []
    for i, f in enumerate((sys.stdin, sys.stdout, sys.stderr)):
        try:
            os.fstat(i)
        except OSError:
            return None
        if f is None:
            return None
        specs.append({"encoding": getattr(f, "encoding", None) or "utf-8",
                      "errors": getattr(f, "errors", None) or "strict",
                      "line_buffering": bool(getattr(f, "line_buffering", False)),
                      "write_through": bool(getattr(f, "write_through", False)),
                      # python -u, PYTHONUNBUFFERED: no buffer under the text layer
                      "raw": type(getattr(f, "buffer", None)).__name__ == "FileIO"})  # fmt: skip
    return specs


def request(key: str) -> dict | None:
    """What the server's child needs to run this command as this process would."""
    streams = _streams()
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    if streams is None:
        return None
    umask = os.umask(0o022)
    os.umask(umask)
    main = sys.modules.get("__main__")
    return {"key": key, "argv": list(sys.argv), "path0": sys.path[0] if sys.path else "",
            "cwd": cwd, "env": dict(os.environ),
            "umask": umask, "main_package": getattr(main, "__package__", None),
            "streams": streams}  # fmt: skip


def _forward_signals(pid: int) -> None:
    """Ctrl-C, Ctrl-Z and the terminal's other signals go to the command's process group, as
    they would reach a command running in this process."""
    import signal

    def forward(signum, _frame):
        try:
            os.killpg(pid, signum)
        except OSError:
            pass

    def suspend(_signum, _frame):  # Ctrl-Z: stop the command, then this process
        forward(signal.SIGSTOP, None)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)

    def resume(_signum, _frame):  # fg / bg
        signal.signal(signal.SIGTSTP, suspend)
        forward(signal.SIGCONT, None)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    signal.signal(signal.SIGTSTP, suspend)
    signal.signal(signal.SIGCONT, resume)


def _connect(path: str):
    """A connected socket, or None (no socket file there, or nobody listening)."""
    if not os.path.exists(path):
        return None
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10.0)  # a live server's spare answers at once; a hung one must not
        sock.connect(path)
        return sock
    except OSError:
        sock.close()
        return None


def _handed_over(sock, key: str) -> int | None:
    """Send the request; the pid of the server's child running the command, or None when
    the server refused it or went away before starting it (nothing has run)."""
    req = request(key)
    if req is None:
        return None
    try:
        send_message(sock, req, [0, 1, 2])
        reply, _ = recv_message(sock)
    except (OSError, EOFError, ValueError):
        return None
    return reply.get("pid") if isinstance(reply, dict) else None


def _exit_status(sock) -> int:
    """Wait for the command to end; its exit status (a death by signal is re-raised here)."""
    sock.settimeout(None)
    try:
        reply, _ = recv_message(sock)
    except (OSError, EOFError, ValueError):
        reply = None
    if isinstance(reply, dict) and os.environ.get("PREFIXBENCH_SERVER_TIMES"):
        _log_times(reply)
    if isinstance(reply, dict) and isinstance(reply.get("signal"), int):
        import signal

        signal.signal(reply["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), reply["signal"])
    if isinstance(reply, dict) and isinstance(reply.get("exit"), int):
        return reply["exit"]
    sys.stderr.write("prefixbench: the warm server's process for this command ended "
                     "without an exit status; run it again with PREFIXBENCH_SERVER=0\n")  # fmt: skip
    return 1


def _log_times(reply: dict) -> None:
    """One JSON line per command in the file PREFIXBENCH_SERVER_TIMES names: argv, status,
    the CPU and wall seconds the server's process spent on it (the client's own are not in
    them) and the CPU seconds that process spent on its imports before the command came."""
    import json

    keys = ("exit", "cpu_s", "wall_s", "setup_cpu_s")
    line = {"argv": sys.argv[1:], **{k: reply.get(k) for k in keys}}
    try:
        with open(os.environ["PREFIXBENCH_SERVER_TIMES"], "a") as f:
            f.write(json.dumps(line) + "\n")
    except OSError:
        pass


def run_through_server() -> int | None:
    """Run this process's command in a live warm server; its exit status, or None to run it
    here (no server for this key, PREFIXBENCH_SERVER=0, or any failure before it started).
    With PREFIXBENCH_SERVER=1 and no server, one is started in the background for the next
    command."""
    setting = os.environ.get("PREFIXBENCH_SERVER", "")
    if setting == "0":
        return None
    try:
        key = current_key()
        directory = runtime_dir(create=setting == "1")
    except Exception:  # noqa: BLE001 - whatever goes wrong, the normal path still works
        return None
    if directory is None:
        return None
    sock = _connect(socket_path(key, directory))
    if sock is None:
        if setting == "1":
            start_in_background()
        return None
    with sock:
        pid = _handed_over(sock, key)
        if pid is None:
            return None
        _forward_signals(pid)
        return _exit_status(sock)


def start_in_background(idle_s: float | None = None) -> int:
    """Start a server for this key as a detached process; its pid. It does nothing if
    another already holds this key's lock."""
    import subprocess

    code = "from prefixbench.cli.server import serve_main; serve_main()"
    argv = [sys.executable, "-c", code]
    if idle_s is not None:
        argv.append(str(idle_s))
    directory = runtime_dir(create=True)
    if directory is None:
        raise OSError("no private folder for the server's socket (XDG_RUNTIME_DIR or TMPDIR)")
    log = os.path.join(directory, f"{current_key()}.log")
    with open(os.devnull, "rb") as null_in, open(log, "ab") as log_out:
        proc = subprocess.Popen(
            argv, stdin=null_in, stdout=log_out, stderr=log_out, cwd=directory,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    return proc.pid
