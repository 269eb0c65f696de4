"""Kept-table churn and a long differential DML run (issue 52).

    python -m benchmarks.kept_churn [--sf 1] [--cycles 25] [--dml 2000] [--dml-sf 0.01]

**Churn**: on ``LocalCluster(2)``, ``--cycles`` times: ``CREATE TABLE c AS SELECT * FROM
lineitem WHERE l_orderkey % 6 = i`` (~1 M rows at SF1), three queries over it, ``DROP TABLE
c``. Prints each worker's RSS after every cycle, and how far it ended above its level after
cycle 3 (target: within 150 MiB: a dropped table's memory goes back to the system).

**Differential DML**: ``--dml`` random statements (``harness.dml``, seeds 100, 101, ...)
applied single-node and distributed on the embedded cluster and on ``LocalCluster(2)``, every
touched table compared after every statement; prints statements, inserts, refusals and
mismatches per kind (target: 0 mismatches).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from datafusion import SessionContext

from benchmarks.tpch import machine
from datafusion_distributed_py import DistributedContext, LocalCluster
from harness import dml, tpch

QUERIES = (
    "SELECT l_returnflag, count(*), sum(l_quantity) FROM c GROUP BY l_returnflag",
    "SELECT count(DISTINCT l_partkey) FROM c",
    "SELECT * FROM c ORDER BY l_extendedprice DESC LIMIT 10",
)


def churn(data: Path, cycles: int) -> bool:
    ctx = SessionContext()
    tpch.register(ctx, data)
    with LocalCluster(2) as cluster:
        dctx = DistributedContext(ctx, cluster, progress=False)
        levels: list[list[int]] = []
        for i in range(cycles):
            start = time.perf_counter()
            dctx.sql(f"CREATE TABLE c AS SELECT * FROM lineitem WHERE l_orderkey % 6 = {i % 6}")
            rows = dctx.sql("SELECT count(*) AS n FROM c").to_pylist()[0]["n"]
            for sql in QUERIES:
                dctx.sql(sql).collect()
            dctx.sql("DROP TABLE c")
            # No gc.collect(): a user does not call it; what DROP frees must go at once.
            time.sleep(0.3)  # the workers free the table's parts in the background
            rss = [w.rss_bytes for w in dctx.status().workers]
            levels.append(rss)
            shown = "  ".join(f"{r / 2**20:7.0f}" for r in rss)
            print(f"cycle {i + 1:3d}: {rows:>9,} rows  {time.perf_counter() - start:5.1f} s  "
                  f"worker RSS MiB: {shown}", flush=True)  # fmt: skip
    base = levels[min(2, len(levels) - 1)]
    growth = [(end - b) / 2**20 for b, end in zip(base, levels[-1], strict=True)]
    ok = all(g <= 150 for g in growth)
    verdict = "ok" if ok else "MISSED"
    shown = ", ".join(f"{g:+.0f}" for g in growth)
    print(f"RSS after cycle {len(levels)} over its level after cycle 3, per worker (MiB): "
          f"{shown}  (target <= +150: {verdict})")  # fmt: skip
    return ok


def differential(data: Path, statements: int) -> bool:
    ok = True
    for kind in ("embedded", "LocalCluster(2)"):
        cluster = LocalCluster(2) if kind != "embedded" else None
        try:
            single, ctx = SessionContext(), SessionContext()
            tpch.register(single, data)
            tpch.register(ctx, data)
            dctx = DistributedContext(ctx, cluster, config=dml.CONFIG, progress=False)
            total = dml.Report()
            seed = 100
            start = time.perf_counter()
            while total.statements < statements:
                n = min(200, statements - total.statements)
                for t in dml.TABLES:  # each seed starts from no tables
                    for m in (single, ctx):
                        if m.table_exist(t):
                            m.deregister_table(t)
                r = dml.apply(single, dctx, dml.Generator(seed).statements(n))
                total.statements += r.statements
                total.refused += r.refused
                total.mismatches += r.mismatches
                for k, v in r.by_kind.items():
                    total.by_kind[k] = total.by_kind.get(k, 0) + v
                seed += 1
            took = time.perf_counter() - start
            wrong = len(total.mismatches)
            print(f"{kind}: {total.statements} statements ({total.by_kind}) in {took:.0f} s, "
                  f"{total.refused} refused by single-node, {wrong} mismatches")  # fmt: skip
            for m in total.mismatches[:10]:
                print(f"  #{m.index} {m.statement.sql}: {m.what}")
            ok = ok and not total.mismatches
            del dctx, ctx  # its kept tables freed while the workers are there to free them
        finally:
            if cluster is not None:
                cluster.close()
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--dml-sf", type=float, default=0.01)
    parser.add_argument("--data", default="benchmarks/data")
    parser.add_argument("--cycles", type=int, default=25)
    parser.add_argument("--dml", type=int, default=2000)
    args = parser.parse_args()
    print(machine())
    ok = True
    if args.dml:
        small = tpch.generate(Path(args.data) / f"sf{args.dml_sf}-p3", args.dml_sf, parts=3)
        ok = differential(small, args.dml) and ok
    if args.cycles:
        big = tpch.generate(Path(args.data) / f"sf{args.sf}-p8", args.sf, parts=8)
        ok = churn(big, args.cycles) and ok
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
