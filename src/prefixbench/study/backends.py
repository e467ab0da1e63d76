"""Where sweep points run: in-process, a local process pool, or a Ray cluster.

A backend maps a picklable function over items and yields ``(item, result)`` as results
arrive, in any order; the sweep saves each result as it comes and sorts at the end, so the
output is identical whatever the backend and worker count.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol


class Backend(Protocol):
    name: str

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Iterable[Any]
    ) -> Iterator[tuple[Any, Any]]: ...


class SerialBackend:
    name = "serial"

    def map_unordered(self, fn, items):
        for item in items:
            yield item, fn(item)


PRELOAD = ["prefixbench.system.preload"]


def pool_context():
    """Workers forked from a fork server that imported ``PRELOAD`` (the engine and its
    machine code loaded once, not once per worker), where the platform has one; spawned
    workers elsewhere. Never forked from this process: forking a process whose polars
    thread pool is running can deadlock, and the fork server never imports polars."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the server starts (once per process)
    return ctx


def _start_server(ctx) -> bool:
    """Start the fork server now, with Ctrl-C ignored only while it is spawned: it and the
    workers it forks inherit the ignoring (multiprocessing/forkserver.py restores the
    server's own SIGINT disposition in each child), so the parent need not ignore Ctrl-C
    while the server imports ``PRELOAD`` (seconds on a loaded machine; a Ctrl-C then was
    lost). True for a fork server; a spawn context's workers are the parent's children and
    inherit its disposition when submitted instead."""
    if ctx.get_start_method() != "forkserver":
        return False
    from multiprocessing import forkserver

    with _sigint_ignored():
        forkserver.ensure_running()
    return True


class LocalPoolBackend:
    """A process pool on this machine (workers from ``pool_context``)."""

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = check_jobs(jobs)

    def map_unordered(self, fn, items):
        items = list(items)
        if self.jobs == 1 or len(items) <= 1:
            yield from SerialBackend().map_unordered(fn, items)
            return
        ctx = pool_context()
        ex = ProcessPoolExecutor(
            max_workers=min(self.jobs, len(items)),  # never a worker per point
            mp_context=ctx,
            initializer=_worker_init,
            initargs=(os.getpid(),),
        )
        try:
            served = _start_server(ctx)
            yield from _windowed(ex, fn, items, 2 * self.jobs, ignore=not served)
        except BaseException:
            _stop(ex)
            raise
        ex.shutdown(wait=True)


def _windowed(ex, fn, items: list, window: int, ignore: bool = True):
    """Submit at most ``window`` points at a time, topping up as results arrive: an
    interrupt then cancels a handful of futures, never a 100,000-point set (waiting on one
    that large left the parent blocked after a signal). While the first workers start,
    Ctrl-C is ignored (``ignore``: spawned workers inherit that) or held until they have."""
    todo = iter(items)
    futures: dict = {}

    def top_up() -> None:
        for it in itertools.islice(todo, window - len(futures)):
            futures[ex.submit(fn, it)] = it

    with _sigint_ignored() if ignore else _sigint_deferred():  # Ctrl-C is the parent's
        top_up()
    while futures:
        done, _ = wait(futures, return_when=FIRST_COMPLETED)
        for f in done:
            yield futures.pop(f), f.result()
        top_up()


MAX_JOBS_PER_CORE = 4


def check_jobs(jobs: int | None, where: str = "--jobs") -> int:
    """Worker processes: default all cores; 1 to 4 per core, else one clear line."""
    from ..errors import ScenarioError

    cores = os.cpu_count() or 1
    if jobs is None:
        return cores
    top = cores * MAX_JOBS_PER_CORE
    if isinstance(jobs, bool) or not 1 <= jobs <= top:
        raise ScenarioError(
            f"{jobs!r} workers is out of range",
            where=where,
            fix=f"give 1 to {top} ({MAX_JOBS_PER_CORE} per core on this machine's {cores}), "
            "or leave it out for one per core",
        )
    return int(jobs)


def _worker_init(sweep: int) -> None:
    """Run in each worker as it starts: the parent alone handles Ctrl-C and SIGTERM, and the
    worker dies with the sweep's process ``sweep`` (a SIGKILLed sweep must not leave workers
    behind). A spawned worker is the sweep's child; a forked one is the fork server's, which
    lives as long as its workers do (they hold its pipe), so it watches the sweep itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent ends us with SIGKILL
    if os.getppid() == sweep:
        die_with_parent(sweep)
    else:
        die_with_process(sweep)


def die_with_process(pid: int, poll_s: float = 0.5) -> None:
    """Make this process exit when process ``pid`` (not its parent) does: a daemon thread
    waits on a pidfd (Linux), or polls for the process elsewhere."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None and not _alive(pid):
        os._exit(1)

    def watch() -> None:
        import select
        import time

        if fd is not None:
            select.select([fd], [], [])  # readable once the process has exited
        else:
            while _alive(pid):
                time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="prefixbench-sweep-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """Make this process exit when ``parent`` does.

    On Linux the kernel does it (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); everywhere a daemon
    thread also watches the parent id (a process whose parent died is re-parented)."""
    import sys

    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the call above took effect
        os._exit(1)

    def watch() -> None:
        import time

        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="prefixbench-parent-watch", daemon=True).start()


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM behaves like Ctrl-C in the main thread: KeyboardInterrupt, so the sweep keeps
    every finished point, stops its workers and says how to resume."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_sig, _frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _sigint_ignored():
    """Ignore SIGINT while worker processes are spawned, so they inherit it from the start.

    Ctrl-C reaches the whole foreground process group; a worker interrupted mid-import or
    mid-point would print a traceback. The parent alone handles it (stops the pool, keeps
    finished points, prints where they are)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)


@contextlib.contextmanager
def _sigint_deferred():
    """Hold a Ctrl-C that arrives while workers are forked from the fork server, and raise
    it once they are: stopped while a worker was still being handed its start-up data, the
    pool left that worker to print a traceback (it is not yet one ``_stop`` kills). A
    Ctrl-C this process ignored stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hit: list[int] = []
    old = signal.signal(signal.SIGINT, lambda _sig, _frame: hit.append(1))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)
    if hit and old is not signal.SIG_IGN:
        raise KeyboardInterrupt


def _stop(ex: ProcessPoolExecutor) -> None:
    """Cancel queued points and end running workers now instead of letting them finish."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    manager = getattr(ex, "_executor_manager_thread", None)  # shutdown() forgets it
    calls = getattr(ex, "_call_queue", None)
    if calls is not None:
        # points queued for killed workers may never be read: do not let the queue's
        # feeder thread hold up the interpreter's exit flushing them (multiprocessing docs,
        # "Joining processes that use queues"; seen once as a hang after Ctrl-C to the parent)
        calls.cancel_join_thread()
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.kill()  # workers ignore SIGTERM (it is the parent's to handle)
    for proc in procs:
        proc.join(timeout=5)
    # Let the executor's manager thread finish closing its wake-up pipe now: otherwise the
    # interpreter's exit hook can write to that pipe as it closes and print "Exception
    # ignored ... Bad file descriptor" after our one-line message (Python 3.11's race).
    if manager is not None and manager is not threading.current_thread():
        manager.join(timeout=5)


def make_backend(
    name: str = "local", *, jobs: int | None = None, address: str | None = None
) -> Backend:
    """The backend users name with ``--backend`` (local or ray)."""
    from prefixbench.support.suggest import did_you_mean

    from ..errors import ScenarioError

    if address and name != "ray":
        raise ScenarioError(
            f"--address names a Ray cluster, but the backend is {name}",
            where="--address",
            fix="add --backend ray, or drop --address",
        )
    if name == "local":
        return LocalPoolBackend(jobs)
    if name == "serial":
        return SerialBackend()
    if name == "ray":
        from .ray_backend import RayBackend

        return RayBackend(
            address=address, jobs=jobs if address or jobs is None else check_jobs(jobs)
        )
    raise ScenarioError(
        f"unknown backend '{name}'", where="--backend", fix=did_you_mean(name, ["local", "ray"])
    )
