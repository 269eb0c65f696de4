"""A datafusion-distributed worker process, and its command line.

    datafusion-distributed-worker --host 127.0.0.1 --port 50051 [--setup pkg.mod:func]
    datafusion-distributed-worker --host 0.0.0.0 --token-file /etc/dfdpy/token \
        --advertise-host 10.0.0.5 [--tls-cert c.pem --tls-key k.pem --tls-ca ca.pem [--mutual]]
    python -m datafusion_distributed_py.worker --port 0
    python -m datafusion_distributed_py.worker --setup pickle:- < setup.pickle

The worker prints ``listening on http(s)://HOST:PORT`` once it accepts work, with the address
others dial (never ``0.0.0.0``). SIGTERM and SIGINT stop it gracefully: in-flight tasks get a
bounded drain time. Listening beyond loopback without a token is refused unless
``--insecure`` is given. Settings also come from ``DFDPY_*`` environment variables (see
:class:`~datafusion_distributed_py.Security`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import pickle
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from datafusion import SessionContext

from datafusion_distributed_py import _internal, object_stores
from datafusion_distributed_py.config import memory_limit_bytes
from datafusion_distributed_py.core_specs import WorkerSpec
from datafusion_distributed_py.functions import register_all
from datafusion_distributed_py.local_server import is_loopback
from datafusion_distributed_py.security import Security

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
        security: the token every RPC must carry and the TLS settings to serve with (see
            :class:`~datafusion_distributed_py.Security`); the same settings are used to reach
            other workers (shuffles). ``None``: no token, plain gRPC.
        advertise_host: the address in :attr:`url`, the one others dial; by default ``host``,
            or for a wildcard ``host`` (``0.0.0.0``) ``$POD_IP`` or this machine's address.
        refuse_pickled_code: never unpickle functions sent inside plans: only functions that
            ``setup`` registered (by the same name) run.
        memory_limit: bytes (or ``"500MB"``, ``"2GiB"``) the worker's queries may hold before
            sorts, joins and aggregations spill to disk (and a query that cannot spill fails
            naming the worker); ``"auto"`` (the default) is 80% of the machine's memory (the
            container's, under a cgroup limit); ``None`` leaves it unbounded.
        spill_dir: where spill files go (default: the system's temporary directory).
        functions: packages whose functions the worker registers before ``setup`` runs
            (import names, e.g. ``["datafusion_extra_functions"]``; see
            :func:`~datafusion_distributed_py.register_functions`): functions of extension
            packages travel by name, so a worker runs only those it has.

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
        security: Security | None = None,
        advertise_host: str | None = None,
        refuse_pickled_code: bool = False,
        memory_limit: int | str | None = "auto",
        spill_dir: str | os.PathLike[str] | None = None,
        functions: Iterable[str] = (),
        _report_version: str | None = None,
    ) -> None:
        if not 0 <= int(port) <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        if security is not None and not isinstance(security, Security):
            raise TypeError(f"security must be a Security, got {type(security).__name__}")
        self.security = security
        self._advertise = advertise_host or _advertised_host(host)
        self.ctx = SessionContext()
        register_all(self.ctx, functions)
        if setup is not None:
            setup(self.ctx)
        version = _report_version if _report_version is not None else _internal.__version__
        # Object stores the setup registered serve this worker's reads (over the coordinator's).
        stores = object_stores.stores_of(self.ctx)
        spec = WorkerSpec(
            host,
            int(port),
            self.ctx,
            version,
            stores,
            security=security._to_core() if security is not None else None,
            refuse_pickled_code=refuse_pickled_code,
            memory_limit=memory_limit_bytes(memory_limit),
            spill_dir=os.fspath(spill_dir) if spill_dir is not None else None,
        )
        self._server = _internal.WorkerServer(spec)

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of this worker as others dial it (the bound port once
        started; ``https`` when it serves TLS)."""
        scheme = self.security.scheme if self.security is not None else "http"
        host = f"[{self._advertise}]" if ":" in self._advertise else self._advertise
        return f"{scheme}://{host}:{self._server.port}"

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


def _advertised_host(host: str) -> str:
    """The address others should dial for a worker bound to ``host``."""
    if host not in ("0.0.0.0", "::", ""):
        return host
    if os.environ.get("POD_IP"):
        return os.environ["POD_IP"]
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _die_with_parent(parent_pid: int) -> None:
    """Exit when the process that started us is gone, even if it was SIGKILLed.

    Not Linux's ``PR_SET_PDEATHSIG``: it fires when the *thread* that started us ends, so a
    cluster made in a web server's or a notebook's worker thread died with that thread. A
    process's children are re-parented only when the whole process is gone.
    """

    def watch() -> None:
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
        "--functions",
        action="append",
        default=[],
        metavar="PACKAGE[,PACKAGE]",
        help="register the functions of these packages (e.g. datafusion_extra_functions) before "
        "--setup runs; repeatable",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level of the worker (default WARNING)",
    )
    parser.add_argument(
        "--advertise-host",
        help="the address printed in the URL and dialled by others (default: --host, or for "
        "0.0.0.0 $POD_IP or this machine's address)",
    )
    parser.add_argument("--token-file", help="file holding the token every RPC must carry")
    parser.add_argument("--tls-cert", help="PEM certificate to serve TLS with (https://)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument(
        "--tls-ca",
        help="PEM CA this worker trusts: the CA of the workers it pulls from (shuffles) and, "
        "with --mutual, of the clients' certificates",
    )
    parser.add_argument(
        "--mutual",
        action="store_true",
        help="mutual TLS: clients must present certificates signed by --tls-ca",
    )
    parser.add_argument(
        "--tls-server-name",
        help="the name to check other workers' certificates against (IP-addressed clusters)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow listening beyond loopback without a token",
    )
    parser.add_argument(
        "--refuse-pickled-code",
        action="store_true",
        help="never unpickle functions sent in plans; only --setup's functions run",
    )
    parser.add_argument(
        "--max-message-bytes", type=int, help="largest gRPC message accepted (default 1 GiB)"
    )
    parser.add_argument(
        "--memory-limit",
        default="auto",
        help="memory for queries before they spill, e.g. 2GB; 'auto' (default): 80%% of the "
        "machine's (or container's) memory; 'none': unbounded",
    )
    parser.add_argument("--spill-dir", help="directory for spill files")
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (0 = any free port); "
        "on --metrics-host, 127.0.0.1 by default: another interface needs the worker's token",
    )
    parser.add_argument("--metrics-host", default="127.0.0.1", help="interface of /metrics")
    parser.add_argument(
        "--event-log",
        metavar="LOCATION",
        help="append a record of each task this worker runs to the event log at LOCATION "
        "(a directory or an s3://... URI; the format of DistributedConfig(event_log=...))",
    )
    parser.add_argument(
        "--event-log-max-bytes",
        type=int,
        default=16 * 1024 * 1024,
        help="start the next event log file past this size (default 16 MiB)",
    )
    parser.add_argument(
        "--check",
        metavar="URL",
        help="probe: ask the worker at URL for its gRPC health; exit 0 when it serves",
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
    try:
        security = _cli_security(args)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        return _check(args.check, security)
    if not is_loopback(args.host) and (security is None or not security.token):
        if not args.insecure:
            print(
                f"error: refusing to listen on {args.host} without a token: anyone who reaches "
                "this port could run code on this machine. Give --token-file (or "
                "DFDPY_TOKEN_FILE), or --insecure on a trusted network.",
                file=sys.stderr,
            )
            return 2
        log.warning("listening on %s without a token (--insecure)", args.host)
    setup = load_setup(args.setup) if args.setup else None
    try:
        worker = Worker(
            args.host,
            args.port,
            setup,
            security=security,
            advertise_host=args.advertise_host,
            refuse_pickled_code=args.refuse_pickled_code,
            memory_limit=args.memory_limit,
            spill_dir=args.spill_dir,
            functions=[p for arg in args.functions for p in arg.split(",") if p],
            _report_version=args.report_version,
        )
        worker.start()
    except (OSError, ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    endpoint = None
    if args.metrics_port is not None:
        from datafusion_distributed_py.metrics_endpoint import serve_metrics

        # Loopback needs no token; another interface takes the worker's own.
        off_host = not is_loopback(args.metrics_host)
        token = security.token if security is not None and off_host else None
        try:
            endpoint = serve_metrics(args.metrics_host, args.metrics_port, token, role="worker")
        except (OSError, ValueError, ImportError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    task_log = None
    if args.event_log:
        from datafusion_distributed_py.event_log import WorkerTaskLog

        try:
            task_log = WorkerTaskLog(args.event_log, args.event_log_max_bytes, worker.url)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            worker.stop(0)
            return 1
    print(f"listening on {worker.url}", flush=True)
    if endpoint is not None:
        print(f"metrics on {endpoint.url}", flush=True)
    try:
        worker.serve()
    finally:
        if task_log is not None:
            task_log.stop()
    print("stopped", flush=True)
    return 0


def _check(url: str, security: Security | None) -> int:
    """``--check URL``: print the worker's health status; 0 when it serves."""
    core = security._to_core() if security is not None else None
    try:
        status = _internal.check_health(url, core)
    except (ValueError, _internal.DistributedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(status, flush=True)
    return 0 if status == "SERVING" else 1


def _cli_security(args: argparse.Namespace) -> Security | None:
    """The environment's settings (``DFDPY_*``), overridden by the command line's."""
    base = Security.from_env()
    flags = (
        args.token_file, args.tls_cert, args.tls_key, args.tls_ca, args.tls_server_name,
        args.max_message_bytes, args.mutual or None,
    )  # fmt: skip
    if not any(f is not None for f in flags):
        return base
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    return Security(
        token=token or (base.token if base else None),
        tls_ca=args.tls_ca or (base.tls_ca if base else None),
        tls_cert=args.tls_cert or (base.tls_cert if base else None),
        tls_key=args.tls_key or (base.tls_key if base else None),
        mutual=args.mutual or bool(base and base.mutual),
        server_name=args.tls_server_name or (base.server_name if base else None),
        max_message_bytes=args.max_message_bytes,
    )


if __name__ == "__main__":
    sys.exit(main())
