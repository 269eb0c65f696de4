"""TPC-H as Delta Lake tables, side by side: single-node through deltalake's own provider,
and our embedded cluster and LocalCluster(2) through ``register_delta``.

    python -m benchmarks.lakehouse [--sf 1] [--parts 4] [--repeat 2]

The TPC-H parquet files are written once as Delta tables (``lineitem`` partitioned by
``l_returnflag``, ``orders`` by ``o_orderstatus``, the others unpartitioned; ``parts``
commits each, so each table has several files per partition). Every query's rows are
checked against single-node, every distributed plan must have network stages, and the
per-query table (best times, ratios) is printed and written to
``benchmarks/results/lakehouse_sf<sf>.md``. Target: total at most 1.0x single-node.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from pathlib import Path

import pyarrow.parquet as pq
from datafusion import SessionContext

from benchmarks.tpch import RESULTS, best_times, data_arguments, machine
from datafusion_distributed_py import DistributedContext, LocalCluster, ran_on, tpch
from datafusion_distributed_py.testing import assert_same_rows, is_distributed

PARTITIONED = {"lineitem": ["l_returnflag"], "orders": ["o_orderstatus"]}


def write_delta(parquet: Path, out: Path) -> Path:
    """The TPC-H tables under ``parquet`` as Delta tables under ``out`` (reused when there)."""
    from deltalake import write_deltalake

    marker = out / ".complete"
    if marker.exists():
        return out
    for table in tpch.TABLES:
        for i, part in enumerate(sorted((parquet / table).glob("*.parquet"))):
            write_deltalake(
                out / table,
                pq.read_table(part),
                partition_by=PARTITIONED.get(table),
                mode="overwrite" if i == 0 else "append",
            )
    marker.touch()
    return out


def main() -> None:
    parser = data_arguments(argparse.ArgumentParser(description=__doc__), repeat=2)
    parser.add_argument("--queries", default="1-22", help="e.g. 1,3,5 or 1-22")
    args = parser.parse_args()
    from deltalake import DeltaTable

    data = Path(args.data) / f"sf{args.sf}-parts{args.parts}"
    parquet = tpch.generate(data, scale_factor=args.sf, parts=args.parts)
    lake = write_delta(parquet, Path(args.data) / f"delta-sf{args.sf}-parts{args.parts}")
    single = SessionContext()
    for table in tpch.TABLES:
        single.register_table(table, DeltaTable(str(lake / table)))
    first, last = (args.queries.split("-") + [None])[:2]
    queries = (
        range(int(first), int(last) + 1) if last else [int(q) for q in args.queries.split(",")]
    )
    with ExitStack() as stack:
        cluster = stack.enter_context(LocalCluster(2))
        modes = {"embedded": None, "local2": cluster}
        dctxs = {}
        for mode, workers in modes.items():
            dctx = DistributedContext(SessionContext(), workers=workers, progress=False)
            for table in tpch.TABLES:
                dctx.register_delta(table, lake / table)
            dctxs[mode] = dctx

        def runner(mode: str):
            if mode == "single":
                return lambda sql: single.sql(sql).to_arrow_table()

            def run(sql: str):
                df = dctxs[mode].sql(sql)
                got = df.to_arrow_table()
                assert ran_on(df) == "workers", (mode, sql)
                assert is_distributed(str(dctxs[mode].explain(df))), (mode, sql)
                return got

            return run

        runners = {m: runner(m) for m in ("single", *modes)}
        totals = dict.fromkeys(runners, 0.0)
        lines = [
            f"# TPC-H SF{args.sf} as Delta tables: deltalake single-node vs distributed",
            "",
            f"{machine()}; best of {args.repeat}; rows checked against single-node.",
            "",
            "| query | single (deltalake) s | embedded s | local2 s | embedded / single "
            "| local2 / single |",
            "|---|---|---|---|---|---|",
        ]
        for q in queries:
            sql = tpch.query(q)
            best, results = best_times(runners, sql, args.repeat, budget=0.0)
            for mode in modes:
                assert_same_rows(
                    results[mode],
                    results["single"],
                    ordered="order by" in sql.lower(),
                    tolerance=1e-6,
                )
            for mode, t in best.items():
                totals[mode] += t
            s = best["single"]
            row = (
                f"| q{q} | {s:.3f} | {best['embedded']:.3f} | {best['local2']:.3f} "
                f"| {best['embedded'] / s:.2f} | {best['local2'] / s:.2f} |"
            )
            print(row, flush=True)
            lines.append(row)
        s = totals["single"]
        total = (
            f"| **total** | {s:.2f} | {totals['embedded']:.2f} | {totals['local2']:.2f} "
            f"| **{totals['embedded'] / s:.2f}** | **{totals['local2'] / s:.2f}** |"
        )
        print(total)
        lines.append(total)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"lakehouse_sf{args.sf:g}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
