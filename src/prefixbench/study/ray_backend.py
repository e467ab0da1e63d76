"""The Ray backend: run sweep points as Ray tasks, locally or on an existing cluster.

Same contract as the local process pool (``map_unordered`` yields ``(item, result)`` as
results arrive), so the sweep saves, resumes and sorts exactly as it does locally and
``runs.parquet`` is identical whatever the backend. Ray is an optional extra
(``pip install 'prefixbench[ray]'``) and is imported only when this backend is used.

Workers need the same prefixbench version installed (the task function travels by
reference) and must be able to read any scenario YAML path named in the grid.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from ..errors import PrefixbenchError, ScenarioError

INSTALL_HINT = "Ray is not installed; pip install 'prefixbench[ray]'"
CONNECT_FIX = "start a cluster with `ray start --head` or check --address"
AUTH_FIX = (
    "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to the cluster's token "
    "(`ray get-auth-token` on the head node)"
)
WORKER_FIX = (
    "install the same prefixbench version, with the ray extra, on every node (see docs/scaling.md)"
)
PROBE_TIMEOUT_S = 5.0
GCS_PORT = 6379  # `ray start --head` default
CLIENT_PORT = 10001  # Ray Client server default (ray://)


def _import_ray():
    # Quiet and private by default; a user's own settings win.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ScenarioError(INSTALL_HINT) from None
    return ray


def _endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) to probe for a cluster address, or None when Ray resolves it itself
    (``auto``: the cluster started on this machine or RAY_ADDRESS)."""
    if address in ("auto", "local"):
        return None
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    try:
        parts = urlsplit(f"//{rest}")
        host, port, path = parts.hostname, parts.port, parts.path
    except ValueError:
        host, port, path = None, None, ""
    if not host or path not in ("", "/"):
        raise ScenarioError(
            f"not a Ray address: '{address}'",
            where="--address",
            fix="use HOST:6379 (the head node's GCS), ray://HOST:10001 (Ray Client) or auto",
        )
    return host, port or (CLIENT_PORT if client else GCS_PORT)


def _probe(address: str) -> None:
    """Fail in seconds, not minutes: Ray retries an unreachable address for a long time."""
    ep = _endpoint(address)
    if ep is None:
        return
    try:
        with socket.create_connection(ep, timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise ScenarioError(
            f"cannot reach a Ray cluster at {address} ({reason})",
            where="--address",
            fix=CONNECT_FIX,
        ) from None


def _missing_module(err: BaseException) -> str | None:
    """The module a worker could not import to run the task (prefixbench not installed
    there), found through Ray's wrapping of the worker's exception."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ModuleNotFoundError):
            return err.name
        err = getattr(err, "cause", None) or getattr(err, "client_exc", None)
    return None


class _Captured:
    text = ""


@contextlib.contextmanager
def _captured_stderr() -> Iterator[_Captured]:
    """Hold back what Ray's C++ core prints on fd 2 while connecting (a failed connection logs
    a warning a second for tens of seconds), so a failure reads as one line."""
    got = _Captured()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (e.g. embedded): nothing to hold back
        yield got
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield got
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            got.text = tmp.read().decode("utf-8", "replace")


def _run_task(fn: Callable[[Any], Any], item: Any, cwd: str) -> tuple[bool, Any]:
    """Worker side. Relative scenario paths resolve as on the driver when its working
    directory exists here (same machine or a shared filesystem). A prefixbench error comes
    back as data, so the driver re-raises the same one-line error (Ray would otherwise wrap
    it in a traceback)."""
    if os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    try:
        return True, fn(item)
    except PrefixbenchError as e:
        return False, (type(e), e.what, e.where, e.fix)


class RayBackend:
    """Sweep points as Ray tasks (one CPU each).

    ``address`` None starts a private local Ray instance of ``jobs`` CPUs (default: all) and
    shuts it down afterwards; otherwise connects to that cluster (``HOST:6379``,
    ``ray://HOST:10001`` or ``auto``) and only disconnects. If Ray is already initialised in
    this process, that connection is used and left open."""

    name = "ray"

    def __init__(self, address: str | None = None, jobs: int | None = None) -> None:
        self.ray = _import_ray()
        self.address = None if address in (None, "", "local") else address
        self.jobs = max(1, jobs) if jobs else None
        if self.address:
            _probe(self.address)

    # -- connection ------------------------------------------------------------------

    def _connect(self) -> bool:
        """Initialise Ray if needed; True when this call did it (and so must shut it down)."""
        ray = self.ray
        if ray.is_initialized():
            return False
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        if self.address is None:
            ray.init(address="local", num_cpus=self.jobs, include_dashboard=False, **quiet)
            return True
        with _captured_stderr() as log:
            try:
                ray.init(address=self.address, **quiet)
                failure = None
            except ImportError:
                failure = INSTALL_HINT
            except (
                ConnectionError,
                RuntimeError,
                ValueError,
                TimeoutError,
                ray.exceptions.RayError,
            ) as e:
                failure = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if failure is None:
            sys.stderr.write(log.text)  # warnings of a successful connection still show
            return True
        if "ray[client]" in failure or failure == INSTALL_HINT:  # ray:// needs grpcio
            raise ScenarioError(INSTALL_HINT, where="--address")
        if (
            "Unauthenticated" in log.text
            or "AuthToken" in log.text
            or "authentication" in failure.lower()
        ):
            raise ScenarioError(
                f"the Ray cluster at {self.address} requires an authentication token "
                "(missing or incorrect)",
                where="--address",
                fix=AUTH_FIX,
            )
        raise ScenarioError(
            f"cannot connect to the Ray cluster at {self.address} ({failure})",
            where="--address",
            fix=CONNECT_FIX
            if "RAY_AUTH_MODE" in os.environ
            else f"{CONNECT_FIX}; with token authentication, {AUTH_FIX}",
        )

    # -- the Backend protocol ---------------------------------------------------------------

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Iterable[Any]
    ) -> Iterator[tuple[Any, Any]]:
        items = list(items)
        if not items:
            return
        ray = self.ray
        started = self._connect()
        pending: dict[Any, Any] = {}
        try:
            task = ray.remote(num_cpus=1)(_run_task)
            fn_ref = ray.put(fn)
            cwd = os.getcwd()
            pending = {task.remote(fn_ref, it, cwd): it for it in items}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    item = pending.pop(ref)
                    ok, value = self._get(ref)
                    if not ok:
                        cls, what, where, fix = value
                        raise cls(what, where=where, fix=fix)
                    yield item, value
        finally:
            for ref in pending:
                try:
                    ray.cancel(ref, force=False)
                except Exception:  # best effort: the cluster may already be gone
                    pass
            if started:
                ray.shutdown()

    def _get(self, ref: Any) -> Any:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            missing = _missing_module(e)
            if missing:
                raise PrefixbenchError(
                    f"a Ray worker cannot import '{missing}'",
                    fix=WORKER_FIX,
                ) from None
            raise  # a bug in a worker: keep Ray's remote traceback
        except ray.exceptions.RayError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise PrefixbenchError(
                f"a Ray worker was lost ({type(e).__name__}: {first})",
                fix="finished points are kept; run the same command again to resume",
            ) from None
