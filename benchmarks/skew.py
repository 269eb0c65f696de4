"""A join with a skewed key: single-node, and distributed with its hot key split or not.

    python -m benchmarks.skew [--rows 4000000] [--shares 0.2,0.8] [--repeat 4]

``facts`` (``--rows`` rows in 4 parquet files) joins ``dims`` (200,000 keys); a share of the
fact rows (``--shares``) has the one key 42, the rest are spread over all keys. Each query
is run single-node, then on the embedded cluster and on ``LocalCluster(2)`` with
``distributed.adaptive`` on (a hot key split whatever its bytes: ``adaptive_skew_bytes =
0``; see docs/adaptive-joins.md) and off (planned from statistics), taking turns; each
keeps its best time. Every answer is checked against single-node's, and whether the join
was split is read from ``explain``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_same_rows

RESULTS = Path(__file__).parent / "results"
KEYS = 200_000
SQL = """SELECT d_name, count(*) AS n, sum(f_val * f_x) AS s
         FROM facts JOIN dims ON f_key = d_key GROUP BY d_name ORDER BY d_name"""


def generate(root: Path, rows: int, share: float) -> Path:
    out = root / f"skew-{rows}-{share:g}"
    if (out / "dims.parquet").exists():
        return out
    rng = np.random.default_rng(58)
    keys = rng.integers(0, KEYS, rows)
    keys[rng.random(rows) < share] = 42
    (out / "facts").mkdir(parents=True, exist_ok=True)
    for part in range(4):
        cut = slice(part * rows // 4, (part + 1) * rows // 4)
        table = pa.table(
            {"f_key": keys[cut], "f_val": keys[cut] % 97, "f_x": rng.random(rows // 4)}
        )
        pq.write_table(table, out / "facts" / f"{part}.parquet")
    dims = pa.table({"d_key": np.arange(KEYS), "d_name": [f"n{k % 50}" for k in range(KEYS)]})
    pq.write_table(dims, out / "dims.parquet")
    return out


def best_ms(run, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--shares", default="0.2,0.8", help="shares of rows with the hot key")
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--data", default="benchmarks/data")
    args = parser.parse_args(argv)
    lines = [
        f"# A skewed join key, {args.rows:,} fact rows, best of {args.repeat} (turns taken)",
        "",
        "| hot share | cluster | single ms | split (adaptive) ms | static ms | split / single "
        "| static / single | split? | equal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with LocalCluster(2) as local:
        for share in (float(s) for s in args.shares.split(",")):
            data = generate(Path(args.data), args.rows, share)
            ctx = SessionContext()
            ctx.register_parquet("facts", str(data / "facts"))
            ctx.register_parquet("dims", str(data / "dims.parquet"))
            expected = ctx.sql(SQL).to_arrow_table()
            for name, workers in (("embedded", None), ("local2", local)):
                dctx = DistributedContext(ctx, workers=workers)
                dctx.sql("SET distributed.adaptive_skew_bytes = 0")  # split every hot key
                times: dict[str, float] = {"single": float("inf")}
                for _ in range(args.repeat):
                    times["single"] = min(times["single"], best_ms(ctx.sql(SQL).collect, 1))
                    for mode in ("true", "false"):
                        dctx.sql(f"SET distributed.adaptive = {mode}")
                        took = best_ms(dctx.sql(SQL).collect, 1)
                        times[mode] = min(times.get(mode, float("inf")), took)
                dctx.sql("SET distributed.adaptive = true")
                assert_same_rows(dctx.sql(SQL).to_arrow_table(), expected, ordered=True)
                split = "skewed keys split" in dctx.explain(SQL)
                row = (
                    f"| {share:g} | {name} | {times['single']:.0f} | {times['true']:.0f} "
                    f"| {times['false']:.0f} | {times['true'] / times['single']:.2f} "
                    f"| {times['false'] / times['single']:.2f} | {'yes' if split else 'no'} | yes |"
                )
                print(row, flush=True)
                lines.append(row)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "skew.md").write_text("\n".join(lines) + "\n")
    print(f"results: {RESULTS / 'skew.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
