"""Memory side by side: single-node datafusion, the embedded cluster and LocalCluster(2), each in
a process of its own, fed the same queries in turn, with every process's peak RSS per query.

    python -m benchmarks.memory --sf 10                  # TPC-H SF10: time and peak RSS
    python -m benchmarks.memory --sf 1 --section limits  # sort / join / aggregate over memory
    python -m benchmarks.memory --sf 1 --section stream  # a large result read batch by batch

Sections:

* ``tpch``: the 22 queries; per query each mode's time (best of ``--repeat``) and the peak RSS
  of each of its processes (the coordinator, and each worker of LocalCluster(2)); rows checked
  against single-node.
* ``limits``: a sort, a hash join and a hash aggregate larger than the memory given — a
  session pool of ``P`` for single-node and the embedded cluster, ``memory_limit=P`` per worker
  for LocalCluster(2) — for each ``P`` of ``--limits``: how each ends (rows, or the error),
  its time, and each process's peak RSS against its limit.
* ``stream``: ``SELECT * FROM lineitem`` read with ``execute_stream()`` by a slow reader on
  LocalCluster(2): the coordinator's peak RSS against the result's size (backpressure).

Peak RSS is the kernel's high-water mark (``VmHWM``), reset before each query
(``/proc/<pid>/clear_refs``). Writes markdown under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.ipc as ipc

RESULTS = Path(__file__).parent / "results"
MODES = ("single", "embedded", "local2")

LIMIT_CASES = {
    "sort": "SELECT * FROM lineitem ORDER BY l_comment, l_orderkey",
    "hash join": (
        "SELECT l_orderkey, l_comment, o_comment, o_clerk "
        "FROM lineitem JOIN orders ON l_orderkey = o_orderkey"
    ),
    "hash aggregate": (
        "SELECT l_orderkey, l_partkey, sum(l_quantity) AS q FROM lineitem "
        "GROUP BY l_orderkey, l_partkey"
    ),
}


# --- The child: one mode in a process of its own ------------------------------------------


def serve(mode: str, data: str, pool: int | None) -> None:
    """Answers queries read from stdin (one JSON per line) with their time and where their
    rows are (one JSON line on stdout each), until stdin closes."""
    from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext

    from datafusion_distributed_py import DistributedContext, LocalCluster
    from harness import tpch

    runtime = RuntimeEnvBuilder().with_disk_manager_os()
    if pool is not None and mode != "local2":
        runtime = runtime.with_fair_spill_pool(pool)
    ctx = SessionContext(SessionConfig(), runtime)
    tpch.register(ctx, data)
    cluster = None
    if mode == "single":
        run_on: Any = ctx
    elif mode == "embedded":
        run_on = DistributedContext(ctx, progress=False)
    else:
        cluster = LocalCluster(2, memory_limit=pool)
        run_on = DistributedContext(ctx, workers=cluster, progress=False)
    workers = [p.pid for p in cluster.processes] if cluster is not None else []
    print(json.dumps({"ready": True, "workers": workers}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        started = time.perf_counter()
        answer: dict[str, Any] = {}
        try:
            df = run_on.sql(ask["sql"])
            if "stream" in ask:
                rows = 0
                for batch in df.execute_stream():
                    rows += batch.to_pyarrow().num_rows
                    time.sleep(ask["stream"])
                answer["rows"] = rows
            else:
                table = df.to_arrow_table()
                answer["rows"] = table.num_rows
                if ask.get("out"):
                    with ipc.new_file(ask["out"], table.schema) as w:
                        w.write_table(table)
        except Exception as e:
            answer["error"] = str(e).splitlines()[0][:300]
        answer["seconds"] = time.perf_counter() - started
        print(json.dumps(answer), flush=True)
    if cluster is not None:
        cluster.close()


# --- The parent: feeds the modes in turn, reads their peaks -------------------------------


def reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Mode:
    """One mode's process (and its workers')."""

    def __init__(self, mode: str, data: Path, pool: int | None) -> None:
        self.name = mode
        args = [sys.executable, "-m", "benchmarks.memory", "--serve", mode, "--data", str(data)]
        if pool is not None:
            args += ["--pool", str(pool)]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        ready = self._read()
        self.workers: list[int] = ready["workers"]
        self.at_rest = peak_mib(self.proc.pid)  # its peak before any query

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} ended early (exit {self.proc.wait()})")
        return json.loads(line)

    def pids(self) -> list[int]:
        return [self.proc.pid, *self.workers]

    def run(self, ask: dict[str, Any]) -> dict[str, Any]:
        """``ask`` run once: the answer, with each process's peak RSS (MiB) during it."""
        for pid in self.pids():
            reset_peak(pid)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(ask) + "\n")
        answer = self._read()
        answer["peaks"] = [peak_mib(pid) for pid in self.pids()]
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def same(a: Path, b: Path, ordered: bool) -> bool:
    from benchmarks.tpch import same_values

    got = ipc.open_file(a).read_all()
    want = ipc.open_file(b).read_all()
    return same_values(got, want, ordered)


def tpch_section(data: Path, repeat: int, queries: list[int], out: list[str]) -> None:
    from harness import tpch

    modes = [Mode(m, data, None) for m in MODES]
    tmp = Path(tempfile.mkdtemp(prefix="dfdpy-memory-"))
    totals = {m.name: 0.0 for m in modes}
    peaks = {m.name: [0.0] * len(m.pids()) for m in modes}
    equal = 0
    out += [
        "| query | " + " | ".join(f"{m} s" for m in MODES) + " | embedded × | local2 × | "
        "single MiB | embedded MiB | local2 MiB (coord + workers) | rows |",
        "|---" * (len(MODES) * 2 + 4) + "|",
    ]
    print(out[-2], flush=True)
    for n in queries:
        sql = tpch.query(n)
        best: dict[str, dict[str, Any]] = {}
        for _ in range(repeat):
            for m in modes:  # in turn, so that a noisy moment hits every mode alike
                got = m.run({"sql": sql, "out": str(tmp / f"{m.name}.arrow")})
                if "error" in got:
                    raise RuntimeError(f"q{n} on {m.name}: {got['error']}")
                if m.name not in best or got["seconds"] < best[m.name]["seconds"]:
                    best[m.name] = got
        ordered = "order by" in sql.lower()
        ok = all(same(tmp / f"{m}.arrow", tmp / "single.arrow", ordered) for m in MODES[1:])
        equal += ok
        for m in modes:
            totals[m.name] += best[m.name]["seconds"]
            peaks[m.name] = [
                max(a, b) for a, b in zip(peaks[m.name], best[m.name]["peaks"], strict=True)
            ]
        s = best["single"]["seconds"]
        local = best["local2"]["peaks"]
        row = (
            f"| q{n} | "
            + " | ".join(f"{best[m]['seconds']:.2f}" for m in MODES)
            + f" | {best['embedded']['seconds'] / s:.2f} | {best['local2']['seconds'] / s:.2f}"
            + f" | {best['single']['peaks'][0]:.0f} | {best['embedded']['peaks'][0]:.0f}"
            + f" | {sum(local):.0f} ({' + '.join(f'{p:.0f}' for p in local)})"
            + f" | {'equal' if ok else 'DIFFERENT'} |"
        )
        out.append(row)
        print(row, flush=True)
    for m in modes:
        m.close()
    s = totals["single"]
    out += [
        "",
        f"Total: single {s:.1f} s; embedded {totals['embedded']:.1f} s "
        f"({totals['embedded'] / s:.2f}×); LocalCluster(2) {totals['local2']:.1f} s "
        f"({totals['local2'] / s:.2f}×); {equal}/{len(queries)} equal.",
        f"Peak RSS over the run: single {peaks['single'][0]:.0f} MiB; embedded "
        f"{peaks['embedded'][0]:.0f} MiB; LocalCluster(2) coordinator "
        f"{peaks['local2'][0]:.0f} MiB + workers "
        f"{' + '.join(f'{p:.0f}' for p in peaks['local2'][1:])} MiB = "
        f"{sum(peaks['local2']):.0f} MiB.",
    ]
    print("\n".join(out[-3:]), flush=True)


def limits_section(data: Path, limits: list[int], overhead: int, out: list[str]) -> None:
    out += [
        "| case | memory | mode | ends with | s | peak MiB per process | within limit + "
        f"{overhead} MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    print(out[-2], flush=True)
    for limit in limits:
        for case, sql in LIMIT_CASES.items():
            ends: dict[str, str] = {}
            for mode in MODES:
                m = Mode(mode, data, limit)
                # Read batch by batch and let go: the result itself is not what is measured.
                got = m.run({"sql": sql, "stream": 0.0})
                m.close()
                end = f"{got['rows']} rows" if "rows" in got else f"error: {got['error']}"
                ends[mode] = "rows" if "rows" in got else "error"
                # Every process that runs tasks under the limit: the workers, and the
                # single/embedded process (its session's pool).
                bounded = got["peaks"][1:] if mode == "local2" else got["peaks"]
                within = all(p <= limit / 2**20 + overhead for p in bounded)
                peaks = " + ".join(f"{p:.0f}" for p in got["peaks"])
                row = (
                    f"| {case} | {limit / 1e6:.0f} MB | {mode} | {end[:90]} | "
                    f"{got['seconds']:.1f} | {peaks} | {'yes' if within else 'NO'} |"
                )
                out.append(row)
                print(row, flush=True)
            if len(set(ends.values())) > 1:
                out.append(f"| {case} | {limit / 1e6:.0f} MB | ends differ: {ends} | | | | |")


def stream_section(data: Path, out: list[str]) -> None:
    # Each read in a fresh process: memory a process once held it may keep (allocators).
    m = Mode("local2", data, None)
    slow = m.run({"sql": "SELECT * FROM lineitem", "stream": 0.002})
    slow_rest = m.at_rest
    m.close()
    m = Mode("local2", data, None)
    fast = m.run({"sql": "SELECT * FROM lineitem"})
    m.close()
    out += [
        f"The coordinator process before any query: {slow_rest:.0f} MiB (interpreter, "
        "datafusion, this package, the session).",
        "",
        "| read | rows | s | coordinator peak MiB | worker peaks MiB |",
        "|---|---|---|---|---|",
        f"| to_arrow_table() (holds the result) | {fast['rows']} | {fast['seconds']:.1f} | "
        f"{fast['peaks'][0]:.0f} | {' + '.join(f'{p:.0f}' for p in fast['peaks'][1:])} |",
        f"| execute_stream(), 2 ms per batch | {slow['rows']} | {slow['seconds']:.1f} | "
        f"{slow['peaks'][0]:.0f} | {' + '.join(f'{p:.0f}' for p in slow['peaks'][1:])} |",
    ]
    print("\n".join(out[-7:]), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=10.0)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--data", default=os.path.join("benchmarks", "data"))
    parser.add_argument("--section", default="tpch", choices=["tpch", "limits", "stream"])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--queries", default="1-22")
    parser.add_argument("--limits", default="150,500", help="MB, comma separated")
    parser.add_argument(
        "--overhead",
        type=int,
        default=400,
        help="MiB a process may hold beyond its limit (docs/memory.md)",
    )
    parser.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--pool", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.data, args.pool)
        return 0

    from benchmarks.tpch import machine, parse_queries
    from harness import tpch

    print(f"generating TPC-H SF{args.sf} ({args.parts} files per table)...", flush=True)
    data = tpch.generate(Path(args.data) / f"sf{args.sf}-p{args.parts}", args.sf, args.parts)
    out = [f"# Memory: {args.section}, TPC-H SF{args.sf:g}", "", machine(), ""]
    if args.section == "tpch":
        tpch_section(data, args.repeat, parse_queries(args.queries), out)
    elif args.section == "limits":
        limits = [int(x) * 1000 * 1000 for x in args.limits.split(",")]
        limits_section(data, limits, args.overhead, out)
    else:
        stream_section(data, out)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"memory_{args.section}_sf{args.sf:g}.md"
    path.write_text("\n".join(out) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
