"""A datafusion-distributed worker process, and its command line.

    datafusion-distributed-worker --host 127.0.0.1 --port 50051 [--setup pkg.mod:func]
    python -m datafusion_distributed_py.worker --port 0
    python -m datafusion_distributed_py.worker --setup pickle:- < setup.pickle

The worker prints ``listening on http://HOST:PORT`` once it accepts work. SIGTERM and
SIGINT stop it gracefully: in-flight tasks get a bounded drain time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from datafusion import SessionContext

from datafusion_distributed_py import _internal, object_stores

log = logging.getLogger("datafusion_distributed_py.worker")

#: Seconds in-flight tasks get to finish when a worker is told to stop.
DRAIN_SECONDS = 5.0

#: ``--setup pickle:-`` reads a cloudpickled callable from stdin (how ``LocalCluster`` ships
#: one: it never touches the disk).
SETUP_FROM_STDIN = "pickle:-"


class Worker:
    """A worker: a gRPC server that runs stages of distributed plans.

    The worker keeps one long-lived ``datafusion.SessionContext`` for the life of the process;
    its extension codecs decode the plan fragments it receives (Python UDFs travel inline).

    Args:
        host: address to bind; 127.0.0.1 unless you mean to accept remote coordinators.
        port: TCP port; 0 picks a free one (see :attr:`url` after :meth:`start`).
        setup: optional callable receiving the worker's ``SessionContext`` to customise it
            (register UDFs, object stores, codecs). Object stores it registers are used for
            this worker's reads, over those the coordinator sends for the same URL.

    Example:
        >>> w = Worker(port=0)
        >>> w.start().url.startswith("http://127.0.0.1:")
        True
        >>> w.stop()
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        setup: Callable[[SessionContext], object] | None = None,
        *,
        _report_version: str | None = None,
    ) -> None:
        if not 0 <= int(port) <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        self.ctx = SessionContext()
        if setup is not None:
            setup(self.ctx)
        version = _report_version if _report_version is not None else _internal.__version__
        # Object stores the setup registered serve this worker's reads (over the coordinator's).
        stores = object_stores.stores_of(self.ctx)
        self._server = _internal.WorkerServer(host, int(port), self.ctx, version, stores)

    @property
    def url(self) -> str:
        """``http://host:port`` of this worker (the bound port once started)."""
        return f"http://{self._server.host}:{self._server.port}"

    def start(self) -> Worker:
        """Start serving in the background and return self."""
        self._server.start()
        return self

    def serve(self) -> None:
        """Serve until SIGINT (Ctrl-C) or SIGTERM, then stop gracefully (blocking)."""
        self.start()
        stop = threading.Event()
        with _stop_on_signals(stop):
            while not stop.wait(0.2) and self._server.running:
                pass
        self.stop()

    def stop(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """Stop accepting work; in-flight calls get ``drain_seconds`` to finish."""
        self._server.stop(drain_seconds)

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Worker({self.url!r})"


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGINT/SIGTERM while inside (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def load_setup(spec: str) -> Callable[[SessionContext], object]:
    """Import ``module:function`` (the CLI's ``--setup``), or, for ``pickle:-``, unpickle a
    callable from stdin."""
    func: object
    if spec == SETUP_FROM_STDIN:
        func = pickle.loads(sys.stdin.buffer.read())
    else:
        module_name, sep, func_name = spec.partition(":")
        if not sep or not module_name or not func_name or module_name == "pickle":
            raise ValueError(
                "--setup must look like 'package.module:function' "
                f"(or {SETUP_FROM_STDIN!r} to read a pickle from stdin), got {spec!r}"
            )
        func = getattr(importlib.import_module(module_name), func_name)
    if not callable(func):
        raise TypeError(f"--setup {spec!r} is not callable")
    return func


def _die_with_parent(parent_pid: int) -> None:
    """Exit when the process that started us is gone, even if it was SIGKILLed."""
    try:  # Linux: the kernel signals us when the parent thread dies.
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass

    def watch() -> None:  # Everywhere: poll the parent's pid.
        import time

        while True:
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.5)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Run the worker command line (``datafusion-distributed-worker``); returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="datafusion-distributed-worker", description="Run a datafusion-distributed worker."
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=50051, help="port (default 50051; 0 = any)")
    parser.add_argument("--setup", help="module:function called with the worker SessionContext")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level of the worker (default WARNING)",
    )
    parser.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    # Testing only, so out of --help: report VERSION instead of this package's, to exercise
    # the coordinator's version check.
    parser.add_argument("--report-version", metavar="VERSION", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.parent_pid:
        _die_with_parent(args.parent_pid)
    setup = load_setup(args.setup) if args.setup else None
    worker = Worker(args.host, args.port, setup, _report_version=args.report_version)
    try:
        worker.start()
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    print(f"listening on {worker.url}", flush=True)
    worker.serve()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
