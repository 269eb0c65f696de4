"""What the network costs: TPC-H on three worker hosts with links capped at 10 Gbit/s,
1 Gbit/s and 100 Mbit/s, against the same workers on loopback, with the bytes each query's
shuffles moved and the effect of ``compression`` on the shuffle-heaviest queries.

Hosts are Linux network namespaces (``tests/multihost/netns.py``: own addresses from
198.18.0.0/24, a bridge in a namespace of its own, ``tc tbf`` on every link); the coordinator
runs on a host of its own (``tests/multihost/driver.py``). Needs root.

    python -m benchmarks.multihost --sf 1          # writes benchmarks/results/multihost_sf1.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.tpch import RESULTS, data_arguments, machine
from datafusion_distributed_py import Security
from harness import tpch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "multihost"))
from hosts import start_worker  # noqa: E402
from netns import Network, available  # noqa: E402

DRIVER = HERE.parent / "tests" / "multihost" / "driver.py"
WORKERS = ("w1", "w2", "w3")
NETWORKS = ("loopback", "10gbit", "1gbit", "100mbit")
LABELS = {
    "loopback": "loopback",
    "10gbit": "10 Gbit/s",
    "1gbit": "1 Gbit/s",
    "100mbit": "100 Mbit/s",
}
COMPRESSIONS = ("lz4", "none", "zstd")


def _workers(stack: ExitStack, net: Network | None, token_file: str) -> list[str]:
    """Three CLI workers: on their own hosts, or on this machine's loopback."""
    urls = []
    for host in WORKERS:
        if net is not None:
            urls.append(start_worker(net, host, "--token-file", token_file)[1])
            continue
        argv = ["datafusion-distributed-worker", "--port", "0", "--token-file", token_file]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        stack.callback(proc.wait)
        stack.callback(proc.kill)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on "), line
        urls.append(line.removeprefix("listening on "))
    return urls


def _drive(net: Network | None, job: dict[str, Any], scratch: Path) -> dict[str, Any]:
    path = scratch / "job.json"
    path.write_text(json.dumps(job))
    argv = [sys.executable, str(DRIVER), str(path)]
    if net is not None:
        argv = net.command("coordinator", argv)
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=3600)
    lines = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    if not lines:
        raise RuntimeError(f"the driver failed (exit {done.returncode})")
    return json.loads(lines[-1].removeprefix("REPORT "))["results"]  # type: ignore[no-any-return]


def run_network(
    name: str, data: Path, scratch: Path, queries: list[int], heavy: list[int], repeat: int
) -> dict[str, Any]:
    token = Security.temporary().token or ""
    token_file = scratch / "token"
    token_file.write_text(token)
    job = {"action": "bench", "data": str(data), "security": {"token": token}, "config": {},
           "repeat": repeat, "queries": queries,
           "compressions": {"lz4": queries, **{c: heavy for c in COMPRESSIONS[1:]}}}  # fmt: skip
    with ExitStack() as stack:
        net = None
        if name != "loopback":
            net = stack.enter_context(Network(["coordinator", *WORKERS], rate=name))
        job["workers"] = _workers(stack, net, str(token_file))
        print(f"== {name}: {job['workers']}", file=sys.stderr, flush=True)
        return _drive(net, job, scratch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(parser, repeat=2)
    parser.add_argument("--heavy", default="9,18,21", help="queries for the compression rows")
    args = parser.parse_args(argv)
    why = available()
    if why is not None:
        print(f"multihost benchmark needs network namespaces: {why}", file=sys.stderr)
        return 2
    sf = f"{args.sf:g}"
    data = Path(args.data).resolve() / f"sf{sf}-p{args.parts}"
    if not (data / "lineitem").exists():
        tpch.generate(data, args.sf, args.parts)
    queries, heavy = list(tpch.QUERIES), [int(q) for q in args.heavy.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="dfdpy-multihost-"))
    runs = {n: run_network(n, data, scratch, queries, heavy, args.repeat) for n in NETWORKS}
    write_results(sf, args, runs, queries, heavy)
    return 0


def write_results(sf: str, args: Any, runs: dict, queries: list[int], heavy: list[int]) -> None:
    def cell(net: str, comp: str, q: int) -> dict[str, Any]:
        return runs[net][f"{comp}/{q}"]  # type: ignore[no-any-return]

    heads = " | ".join(f"{LABELS[n]} s" for n in NETWORKS)
    rule = "|---" * (len(NETWORKS) + 4) + "|"
    lines = [
        f"# TPC-H SF{sf} on three worker hosts: what the network costs",
        "",
        f"Machine: {machine()}. Coordinator and 3 workers, each on a host of its own (a network "
        "namespace; every host's link capped by `tc tbf`), against the same 4 processes on "
        f"loopback. Best of {args.repeat}. `shuffle`: bytes all network boundaries moved (Arrow "
        "IPC, after compression). Rows checked against single-node's.",
        "",
        f"| query | {heads} | 1G / loopback | shuffle (lz4) | equal |",
        rule,
    ]
    totals = dict.fromkeys(NETWORKS, 0.0)
    for q in queries:
        t = {n: cell(n, "lz4", q)["seconds"] for n in NETWORKS}
        for n in NETWORKS:
            totals[n] += t[n]
        equal = all(cell(n, "lz4", q)["equal"] for n in NETWORKS)
        times = " | ".join(f"{t[n]:.2f}" for n in NETWORKS)
        lines.append(
            f"| q{q} | {times} | {t['1gbit'] / t['loopback']:.2f} | "
            f"{cell('1gbit', 'lz4', q)['bytes']:,} B | {'yes' if equal else 'NO'} |"
        )
    sums = " | ".join(f"{totals[n]:.2f}" for n in NETWORKS)
    lines.append(f"| **total** | {sums} | {totals['1gbit'] / totals['loopback']:.2f} | | |")
    lines += [
        "",
        "## Compression of shuffles, on the shuffle-heaviest queries",
        "",
        f"| query | compression | {heads} | shuffle | equal |",
        "|---" * (len(NETWORKS) + 4) + "|",
    ]
    for q in heavy:
        for comp in COMPRESSIONS:
            times = " | ".join(f"{cell(n, comp, q)['seconds']:.2f}" for n in NETWORKS)
            equal = all(cell(n, comp, q)["equal"] for n in NETWORKS)
            lines.append(
                f"| q{q} | {comp} | {times} | {cell('1gbit', comp, q)['bytes']:,} B | "
                f"{'yes' if equal else 'NO'} |"
            )
    out = RESULTS / f"multihost_sf{sf}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwritten to {out}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
