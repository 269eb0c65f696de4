"""TPC-H as Delta Lake (or Iceberg) tables, side by side: single-node through deltalake's own
provider, and our embedded cluster and LocalCluster(2) through ``register_delta``.

    python -m benchmarks.lakehouse [--sf 1] [--parts 4] [--repeat 2] [--format iceberg]

With ``--format iceberg`` the tables are Iceberg tables of a local SQL catalog, partitioned the
same way by identity; single-node reads them through ``register_iceberg`` on a plain
``SessionContext`` (pyiceberg-core's provider is built for DataFusion 54 and cannot be
registered on a datafusion 55 session).

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

import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import SessionContext

from benchmarks.tpch import RESULTS, best_times, data_arguments, machine
from datafusion_distributed_py import DistributedContext, LocalCluster, ran_on
from datafusion_distributed_py.lakehouse import register_iceberg
from datafusion_distributed_py.testing import assert_same_rows, is_distributed
from harness import tpch

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


def write_iceberg(parquet: Path, out: Path):
    """The TPC-H tables under ``parquet`` as Iceberg tables of a SQL catalog under ``out``
    (reused when there); returns the catalog."""
    from pyiceberg.catalog.sql import SqlCatalog

    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("tpch", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}")
    marker = out / ".complete"
    if marker.exists():
        return catalog
    catalog.create_namespace_if_not_exists("tpch")

    def read(part: Path) -> pa.Table:
        # pyiceberg partitions with kernels that take no view types.
        t = pq.read_table(part)
        plain = [pa.string() if pa.types.is_string_view(f.type) else f.type for f in t.schema]
        return t.cast(
            pa.schema([pa.field(f.name, ty) for f, ty in zip(t.schema, plain, strict=True)])
        )

    for table in tpch.TABLES:
        parts = sorted((parquet / table).glob("*.parquet"))
        first = read(parts[0])
        name = f"tpch.{table}"
        if catalog.table_exists(name):
            catalog.drop_table(name)
        created = catalog.create_table(name, schema=first.schema)
        for column in PARTITIONED.get(table, []):
            with created.update_spec() as spec:
                spec.add_identity(column)
        for part in parts:
            created.append(read(part))
    marker.touch()
    return catalog


def main() -> None:
    parser = data_arguments(argparse.ArgumentParser(description=__doc__), repeat=2)
    parser.add_argument("--queries", default="1-22", help="e.g. 1,3,5 or 1-22")
    parser.add_argument("--format", choices=["delta", "iceberg"], default="delta")
    args = parser.parse_args()

    data = Path(args.data) / f"sf{args.sf}-parts{args.parts}"
    parquet = tpch.generate(data, scale_factor=args.sf, parts=args.parts)
    single = SessionContext()
    if args.format == "delta":
        from deltalake import DeltaTable

        lake = write_delta(parquet, Path(args.data) / f"delta-sf{args.sf}-parts{args.parts}")
        for table in tpch.TABLES:
            single.register_table(table, DeltaTable(str(lake / table)))

        def register(dctx: DistributedContext, table: str) -> None:
            dctx.register_delta(table, lake / table)

    else:
        catalog = write_iceberg(parquet, Path(args.data) / f"iceberg-sf{args.sf}-parts{args.parts}")
        for table in tpch.TABLES:
            register_iceberg(single, table, catalog.load_table(f"tpch.{table}"))

        def register(dctx: DistributedContext, table: str) -> None:
            dctx.register_iceberg(table, catalog.load_table(f"tpch.{table}"))

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
                register(dctx, table)
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
        reference = "deltalake" if args.format == "delta" else "register_iceberg"
        lines = [
            f"# TPC-H SF{args.sf:g} as {args.format.capitalize()} tables: single-node "
            f"({reference}) vs distributed",
            "",
            f"{machine()}; best of {args.repeat}; rows checked against single-node.",
            "",
            f"| query | single ({reference}) s | embedded s | local2 s | embedded / single "
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
    suffix = "" if args.format == "delta" else "_iceberg"
    out = RESULTS / f"lakehouse_sf{args.sf:g}{suffix}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
