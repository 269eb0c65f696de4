"""``LocalCluster``: worker *processes* on this machine, like Dask's ``LocalCluster``."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from datafusion import SessionContext

from datafusion_distributed_py.config import memory_limit_bytes
from datafusion_distributed_py.dashboard import Dashboard
from datafusion_distributed_py.errors import WorkerError
from datafusion_distributed_py.resolvers import ClusterUrls
from datafusion_distributed_py.security import Security

#: Seconds a worker process may take to print its URL.
START_TIMEOUT = 60.0
#: Seconds between checks that every worker process is alive.
RESTART_POLL = 0.2

_log = logging.getLogger("datafusion_distributed_py")


class LocalCluster:
    """Start ``n_workers`` worker processes on free 127.0.0.1 ports.

    Workers exit with their parent, even when the parent is SIGKILLed. Each worker's output
    goes to ``<log_dir>/worker-<i>.log`` (see :attr:`log_dir`).

    Args:
        n_workers: number of worker processes (default: one per CPU, at least 2).
        setup: run in each worker on its ``SessionContext`` (register UDFs, object stores):
            a callable (cloudpickled to the workers through their stdin, never written to
            disk, so a function defined in a script or a notebook works) or a
            ``"module:function"`` string.
        log_dir: where worker logs go (default: a new temporary directory, removed by
            :meth:`close`).
        security: ``True`` (the default): a fresh random token
            (:meth:`Security.temporary`), given to the workers through their environment,
            never on a command line; a :class:`~datafusion_distributed_py.Security` (e.g.
            ``Security.temporary(tls=True)`` for TLS); ``False`` for none. A
            ``DistributedContext`` given this cluster uses it automatically
            (:attr:`security`).
        memory_limit: per worker, bytes (or ``"500MB"``) its queries may hold before they
            spill to disk; ``"auto"`` (the default) shares 80% of the machine's memory between
            the ``n_workers``; ``None`` leaves them unbounded.
        spill_dir: where workers write spill files.
        functions: packages whose functions every worker registers (import names, e.g.
            ``["datafusion_extra_functions"]``): functions of extension packages travel by
            name, so each worker needs its own (see
            :func:`~datafusion_distributed_py.register_functions`).
        restart: restart a worker process that dies (on a new port; :attr:`urls` follows,
            and a ``DistributedContext`` on this cluster uses the new URL from its next
            query), as Dask's nanny does. ``False`` leaves it dead.
        dashboard: serve a live page of the workers and of the queries run on them
            (:class:`~datafusion_distributed_py.dashboard.Dashboard`, on 127.0.0.1, behind
            the cluster's token); its address is :attr:`dashboard_url`.
        metrics: each worker serves Prometheus metrics on a port of its own, on 127.0.0.1
            (``--metrics-port``, see ``metrics_endpoint``); :attr:`metrics_urls` lists them.
        event_log: each worker appends a record of each task it runs to the event log at
            this location (``--event-log``; see ``event_log.WorkerTaskLog``).

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py import DistributedContext, LocalCluster
        >>> with LocalCluster(2) as cluster:
        ...     dctx = DistributedContext(SessionContext(), workers=cluster)
        ...     dctx.sql("SELECT 1 AS one").to_pylist()
        [{'one': 1}]
    """

    def __init__(
        self,
        n_workers: int | None = None,
        setup: str | Callable[[SessionContext], object] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        security: bool | Security = True,
        memory_limit: int | str | None = "auto",
        spill_dir: str | os.PathLike[str] | None = None,
        functions: Iterable[str] = (),
        restart: bool = True,
        dashboard: bool = False,
        metrics: bool = False,
        event_log: str | os.PathLike[str] | None = None,
        _report_versions: list[str | None] | None = None,
    ) -> None:
        from datafusion_distributed_py.cluster_wiring import default_worker_count

        n = default_worker_count() if n_workers is None else n_workers
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n_workers must be a positive integer, got {n_workers!r}")
        pickled: bytes | None = None
        if callable(setup):
            # Imported here: cloudpickle only when needed, and the package must not import the
            # worker module (`python -m` runs it).
            import cloudpickle

            from datafusion_distributed_py.worker import SETUP_FROM_STDIN

            pickled = cloudpickle.dumps(setup)
            setup = SETUP_FROM_STDIN
        elif setup is not None and not isinstance(setup, str):
            raise TypeError(f"setup must be a callable or 'module:function', got {setup!r}")
        if isinstance(security, Security):
            self.security: Security | None = security
        elif security is True:
            self.security = Security.temporary()
        elif security is False or security is None:
            self.security = None
        else:
            raise TypeError(f"security must be a bool or a Security, got {security!r}")
        self._options: list[str] = []
        limit = memory_limit_bytes(memory_limit, n)
        self._options += ["--memory-limit", str(limit) if limit is not None else "none"]
        if spill_dir is not None:
            self._options += ["--spill-dir", os.fspath(spill_dir)]
        if metrics:
            self._options += ["--metrics-port", "0"]
        if event_log is not None:
            self._options += ["--event-log", os.fspath(event_log)]
        if isinstance(functions, str):
            raise TypeError(f"functions must be a list of package names, got {functions!r}")
        for package in functions:
            self._options += ["--functions", package]
        self._owns_log_dir = log_dir is None
        #: Where the workers' logs are (``worker-<i>.log``).
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="dfd-cluster-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        #: The worker processes.
        self.processes: list[subprocess.Popen[bytes]] = []
        #: The workers' URLs, in the order of :attr:`processes`.
        self.urls: list[str] = []
        #: Worker processes restarted after they died.
        self.restarts = 0
        self._setup, self._pickled = setup, pickled
        self._versions = _report_versions or [None] * n
        self._closing = threading.Event()
        self._watcher: threading.Thread | None = None
        try:
            for i in range(n):
                self.processes.append(self._spawn(i, setup, self._versions[i], pickled is not None))
            if pickled is not None:
                for p in self.processes:
                    _send(p, pickled)
            self.urls = [self._wait_ready(i, p) for i, p in enumerate(self.processes)]
        except BaseException:
            self.close()
            raise
        if restart:
            self._watcher = threading.Thread(target=self._watch, name="dfdpy-nanny", daemon=True)
            self._watcher.start()
        #: The live page of this cluster (``dashboard=True``), else None.
        self.dashboard: Dashboard | None = None
        if dashboard:
            self.dashboard = self._serve_dashboard()

    def starting(self) -> int:
        """How many workers are dead and not yet replaced by a restart (``restart=True``).

        A query that lost a worker waits for these (up to 10 s) before it runs again, so the
        run again has the whole cluster, not only the workers left.
        """
        if self._watcher is None or self._closing.is_set():
            return 0
        return sum(_gone(p) for p in self.processes)

    def wait_for_workers(self, timeout: float = 30.0) -> None:
        """Wait until every worker serves, the dead ones restarted (see :meth:`starting`).

        Raises:
            TimeoutError: naming the workers still down after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self.starting():
            if time.monotonic() > deadline:
                down = [i for i, p in enumerate(self.processes) if _gone(p)]
                raise TimeoutError(
                    f"LocalCluster workers {down} were not restarted within {timeout:g} s "
                    f"(their logs: {self.log_dir})"
                )
            time.sleep(0.05)

    @property
    def dashboard_url(self) -> str | None:
        """The dashboard's address, with the cluster's token (``dashboard=True``)."""
        return self.dashboard.url if self.dashboard is not None else None

    @property
    def metrics_urls(self) -> list[str]:
        """Each worker's ``/metrics`` address (``metrics=True``; a restarted worker's new one),
        else an empty list."""
        if "--metrics-port" not in self._options:
            return []
        urls = []
        for i in range(len(self.processes)):
            deadline = time.monotonic() + START_TIMEOUT
            while True:  # printed right after "listening on"
                lines = self._log_path(i).read_text(errors="replace").splitlines()
                mark = "metrics on "
                found = [x.removeprefix(mark).strip() for x in lines if x.startswith(mark)]
                if found or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if not found:
                raise WorkerError(f"worker {i} serves no metrics; log {self._log_path(i)}")
            urls.append(found[-1])
        return urls

    def _serve_dashboard(self) -> Dashboard:
        from datafusion_distributed_py import _internal
        from datafusion_distributed_py.monitor import MONITOR
        from datafusion_distributed_py.status import ClusterStatus

        core = self.security._to_core() if self.security is not None else None
        coordinator = _internal.Coordinator.remote(ClusterUrls(self), core)

        def status() -> ClusterStatus:
            return ClusterStatus.take(coordinator.worker_status(), MONITOR.queries(owner=self))

        token = self.security.token if self.security is not None else None
        board = Dashboard(status, token=token)
        _log.info("LocalCluster dashboard: %s", board.url)
        return board

    def _watch(self) -> None:
        """Restart each worker process that exits, until :meth:`close`."""
        while not self._closing.wait(RESTART_POLL):
            for i, proc in enumerate(list(self.processes)):
                if proc.poll() is None or self._closing.is_set():
                    continue
                old = self.urls[i]
                try:
                    new = self._spawn(i, self._setup, self._versions[i], self._pickled is not None)
                    if self._pickled is not None:
                        _send(new, self._pickled)
                    url = self._wait_ready(i, new)
                except Exception as e:  # tried again at the next poll
                    _log.warning("worker %d (%s) died and could not be restarted: %s", i, old, e)
                    continue
                self.processes[i] = new
                # A new list: readers see the old URLs or the new ones, never half of each.
                self.urls = [*self.urls[:i], url, *self.urls[i + 1 :]]
                self.restarts += 1
                _log.warning(
                    "worker %d (%s) exited with code %s; restarted as %s",
                    i, old, proc.returncode, url,
                )  # fmt: skip

    def _log_path(self, i: int) -> Path:
        return self.log_dir / f"worker-{i}.log"

    def _spawn(
        self, i: int, setup: str | None, version: str | None, pipe_stdin: bool
    ) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            "-m",
            "datafusion_distributed_py.worker",
            "--port",
            "0",
            "--parent-pid",
            str(os.getpid()),
        ]
        if setup:
            cmd += ["--setup", setup]
        if version is not None:
            cmd += ["--report-version", version]
        cmd += self._options
        # Secrets go through the environment, never the command line (`ps` shows that).
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFDPY_")}
        if self.security is not None:
            env.update(self.security.to_env())
        env.update(PYTHONUNBUFFERED="1", PYTHONPATH=_parent_path())
        log = open(self._log_path(i), "wb")  # noqa: SIM115 - owned by the child
        try:
            return subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE if pipe_stdin else subprocess.DEVNULL,
                env=env,
                # `python -m` puts its working directory first on `sys.path`: a neutral one.
                cwd=self.log_dir,
            )
        finally:
            log.close()

    def _wait_ready(self, i: int, proc: subprocess.Popen[bytes]) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        path = self._log_path(i)
        while time.monotonic() < deadline:
            log = path.read_text(errors="replace")
            for line in log.splitlines():
                if line.startswith("listening on "):
                    return line.removeprefix("listening on ").strip()
            if proc.poll() is not None:
                raise WorkerError(
                    f"worker {i} exited with code {proc.returncode} before listening; "
                    f"log {path}:\n{log[-2000:]}"
                )
            time.sleep(0.05)
        # The log goes with the temporary directory: its tail is in the message.
        tail = path.read_text(errors="replace")[-2000:]
        raise WorkerError(f"worker {i} did not start within {START_TIMEOUT}s; log {path}:\n{tail}")

    @property
    def n_workers(self) -> int:
        """The number of worker processes."""
        return len(self.processes)

    def close(self, timeout: float = 10.0) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after ``timeout`` seconds), and remove
        :attr:`log_dir` if this cluster created it."""
        board = getattr(self, "dashboard", None)
        if board is not None:
            board.close()
            self.dashboard = None
        self._stop_watching()
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in self.processes:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._remove_log_dir()

    def _stop_watching(self) -> None:
        closing: threading.Event | None = getattr(self, "_closing", None)
        if closing is not None:
            closing.set()
        watcher: threading.Thread | None = getattr(self, "_watcher", None)
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(START_TIMEOUT)

    def _remove_log_dir(self) -> None:
        if getattr(self, "_owns_log_dir", False):
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self._owns_log_dir = False

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        closing: threading.Event | None = getattr(self, "_closing", None)
        if closing is not None:
            closing.set()
        procs: list[subprocess.Popen[bytes]] = getattr(self, "processes", [])
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self._remove_log_dir()

    def __repr__(self) -> str:
        return f"LocalCluster(urls={self.urls!r}, log_dir='{self.log_dir}')"


def _send(proc: subprocess.Popen[bytes], payload: bytes) -> None:
    """Write ``payload`` to the worker's stdin and close it (the worker reads to the end)."""
    assert proc.stdin is not None
    # A worker that died before reading is reported with its log by `_wait_ready`.
    with contextlib.suppress(BrokenPipeError), proc.stdin as stdin:
        stdin.write(payload)


def _parent_path() -> str:
    """This process's import path, so workers import what it can (your script's modules, the
    modules of UDFs and setup functions), ahead of any PYTHONPATH it was started with; and
    first of all the directory this package was imported from, so that workers run the very
    same build (never, say, an unbuilt source checkout in the current directory)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    entries = [here] + [os.path.abspath(p or os.curdir) for p in sys.path]
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join(entries + ([inherited] if inherited else []))


#: The kernel's flag on a task that is exiting (``include/linux/sched.h``).
_PF_EXITING = 0x4


def _gone(proc: subprocess.Popen[bytes]) -> bool:
    """Whether a worker process has exited or is exiting (see :func:`_exiting`)."""
    return proc.poll() is not None or _exiting(proc.pid)


def _exiting(pid: int) -> bool:
    """Whether process ``pid`` is exiting: a killed process closes its sockets before it can be
    reaped, so a query sees its streams break while ``poll()`` still calls it running. On
    Linux its ``/proc`` entry says so from then on (a zombie, or the exiting flag); elsewhere
    only ``poll()`` tells."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state, *rest = stat[stat.rindex(")") + 2 :].split()
    return state in ("Z", "X") or bool(int(rest[5]) & _PF_EXITING)
