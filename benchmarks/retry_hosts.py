"""What a worker host lost mid-query costs, on hosts of their own (issue 53): the retry_cost
benchmark's measure on the simulated hosts of ``tests/multihost`` — three worker hosts and a
coordinator host (Linux network namespaces, links capped at 1 Gbit/s), a worker host killed
at 30% and at 70% of a query whose rows flow back as it runs, with whole-query retry and with
task-level recovery (the hosts share this machine's filesystem, so the spool is shared).

    python -m benchmarks.retry_hosts [--sf 1] [--parts 8]   # needs root

The query (``SQL``: rows flowing back as the workers hash them) is read with
``to_arrow_table()`` on the coordinator host and checked equal to single-node by
``tests/multihost/driver.py``. The killed host's worker is started again before the next run. Writes
``benchmarks/results/retry_hosts.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.tpch import RESULTS, data_arguments, machine
from datafusion_distributed_py import Security
from harness import tpch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "multihost"))
from hosts import drive_with_fault, start_worker  # noqa: E402
from netns import Network, available  # noqa: E402

WORKERS = ("w1", "w2", "w3")
LOST = "w2"
#: Its rows flow back as the scan tasks make them, each costing the workers' CPU: a hash of
#: a long string per row (a Python UDF would run on the coordinator here: CLI workers are
#: not given this process's functions).
SQL = "SELECT l_orderkey, l_linenumber, sha512(repeat(l_comment, {n})) AS h FROM lineitem"


class Hosts:
    """The worker hosts' processes, one CLI worker each on port 50051."""

    def __init__(self, net: Network, token_file: Path) -> None:
        self.net, self.token_file = net, token_file
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.urls = [self.start(host) for host in WORKERS]

    def start(self, host: str) -> str:
        self.procs[host], url = start_worker(self.net, host, "--token-file", str(self.token_file))
        return url

    def healed(self) -> None:
        """The lost host's worker up again (same address) when an earlier run killed it."""
        if self.procs[LOST].poll() is not None:
            self.start(LOST)


def run(
    net: Network, hosts: Hosts, job: dict[str, Any], scratch: Path, kill_at: float | None
) -> dict:
    """One run of the flowing query; the lost host's worker killed ``kill_at`` seconds in."""
    hosts.healed()
    job = {**job, "running_after": kill_at if kill_at is not None else 0.05}

    def kill() -> None:
        if kill_at is not None:
            hosts.procs[LOST].kill()
            hosts.procs[LOST].wait()

    report = drive_with_fault(net, job, scratch / "job.json", kill, timeout=600)
    wanted = "retried" if kill_at is not None else "not retried"
    if report.get("result") != wanted:
        raise RuntimeError(f"expected {wanted}: {report}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(parser, repeat=2)
    parser.add_argument("--weight", type=int, default=20, help="copies of l_comment hashed")
    args = parser.parse_args(argv)
    why = available()
    if why is not None:
        print(f"this benchmark needs network namespaces: {why}", file=sys.stderr)
        return 2
    data = Path(args.data).resolve() / f"sf{args.sf:g}-p{args.parts}"
    if not (data / "lineitem").exists():
        tpch.generate(data, args.sf, args.parts)
    scratch = Path(tempfile.mkdtemp(prefix="dfdpy-retry-hosts-"))
    token = Security.temporary().token or ""
    (scratch / "token").write_text(token)
    rows: list[tuple[str, float, str]] = []
    with Network(["coordinator", *WORKERS], rate="1gbit") as net:
        hosts = Hosts(net, scratch / "token")
        for mode in ("query", "task"):
            job = {"action": "slow", "sql": SQL.format(n=args.weight), "workers": hosts.urls,
                   "security": {"token": token}, "data": str(data),
                   "config": {"fault_tolerance": mode}}  # fmt: skip
            base = min(
                run(net, hosts, job, scratch, None)["query_seconds"] for _ in range(args.repeat)
            )
            rows.append((f"undisturbed, {mode}", base, "1"))
            print(f"{mode}: undisturbed {base:.2f} s", file=sys.stderr, flush=True)
            for at in (0.3, 0.7):
                report = run(net, hosts, job, scratch, at * base)
                attempts = ", ".join(sorted(report["workers_by_attempt"]))
                rows.append((f"host killed at {at:.0%}, {mode}", report["query_seconds"], attempts))
                time.sleep(0.5)
    first = rows[0][1]
    names = {"query": "whole-query retry", "task": "task-level recovery"}
    lines = [
        f"# A worker host lost mid-query (TPC-H SF{args.sf:g}, 3 worker hosts + a coordinator "
        f"host, 1 Gbit/s links; {machine()})",
        "",
        f"`{SQL.format(n=args.weight)}`, read with `to_arrow_table()`; equal to "
        "single-node in every run (checked by the driver). The undisturbed time is the best "
        f"of {args.repeat}.",
        "",
        "| run | seconds | × undisturbed (whole-query mode) | runs (attempts) |",
        "|---|---|---|---|",
    ]
    for name, seconds, attempts in rows:
        for key, label in names.items():
            name = name.replace(f", {key}", f", {label}")
        lines.append(f"| {name} | {seconds:.2f} | {seconds / first:.2f} | {attempts} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "retry_hosts.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
