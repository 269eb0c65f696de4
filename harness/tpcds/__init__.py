"""TPC-DS data and queries, from DuckDB's ``tpcds`` extension (``duckdb`` with
``duckdb-extension-tpcds``, both from PyPI: the ``test`` and ``bench`` extras), for the tests
and the benchmarks. Nothing generated is committed.

Example:
    >>> from harness import tpcds
    >>> len(tpcds.TABLES), tpcds.QUERIES[0], tpcds.QUERIES[-1]
    (24, 1, 99)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from datafusion import SessionConfig, SessionContext

TABLES = (
    "call_center", "catalog_page", "catalog_returns", "catalog_sales", "customer",
    "customer_address", "customer_demographics", "date_dim", "household_demographics",
    "income_band", "inventory", "item", "promotion", "reason", "ship_mode", "store",
    "store_returns", "store_sales", "time_dim", "warehouse", "web_page", "web_returns",
    "web_sales", "web_site",
)  # fmt: skip
QUERIES = tuple(range(1, 100))


def _duckdb() -> Any:
    try:
        import duckdb
        import duckdb_extensions
    except ImportError as e:
        raise RuntimeError(
            "TPC-DS data comes from DuckDB's dsdgen: pip install duckdb "
            "duckdb-extension-tpcds duckdb-extensions (matching versions)"
        ) from e
    duckdb_extensions.import_extension("tpcds")
    con = duckdb.connect()
    con.sql("LOAD tpcds")
    return con


def generate(out_dir: str | os.PathLike[str], scale_factor: float = 0.1) -> Path:
    """Write the TPC-DS tables as parquet under ``out_dir/<table>.parquet`` and the 99 queries
    (DuckDB's text) to ``out_dir/queries.json``. Reuses a complete earlier run."""
    out = Path(out_dir)
    marker = out / f".complete-sf{scale_factor}"
    if marker.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    con = _duckdb()
    con.sql(f"CALL dsdgen(sf={scale_factor})")
    for table in TABLES:
        con.sql(f"COPY {table} TO '{out / table}.parquet' (FORMAT parquet)")
    queries = dict(con.sql("SELECT query_nr, query FROM tpcds_queries()").fetchall())
    (out / "queries.json").write_text(json.dumps({str(k): v for k, v in queries.items()}))
    marker.touch()
    return out


def query(data_dir: str | os.PathLike[str], n: int) -> str:
    """The SQL text of TPC-DS query ``n`` (1..99), as written by :func:`generate`."""
    if n not in QUERIES:
        raise ValueError(f"TPC-DS has queries 1..99, not {n}")
    queries = json.loads((Path(data_dir) / "queries.json").read_text())
    return str(queries[str(n)])


def partitioned_joins(build_rows: int = 10_000) -> SessionConfig:
    """Settings under which a join whose build side has more than ``build_rows`` rows (or
    10 bytes a row of them) is partitioned, its probe side shuffled, instead of collected. At
    SF 0.1 this puts selective collected joins above shuffles, as they are at SF 1 (at small
    scales every join is collected).

    Example:
        >>> from datafusion import SessionContext
        >>> ctx = SessionContext(partitioned_joins().with_information_schema(True))
        >>> show = "SHOW datafusion.optimizer.hash_join_single_partition_threshold_rows"
        >>> ctx.sql(show).to_pylist()[0]["value"]
        '10000'
    """
    return (
        SessionConfig()
        .set("datafusion.optimizer.hash_join_single_partition_threshold_rows", str(build_rows))
        .set("datafusion.optimizer.hash_join_single_partition_threshold", str(10 * build_rows))
    )


def register(ctx: SessionContext, data_dir: str | os.PathLike[str]) -> None:
    """Register every TPC-DS table under ``data_dir`` on ``ctx`` as a parquet table."""
    for table in TABLES:
        path = Path(data_dir) / f"{table}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"missing TPC-DS table {path}")
        ctx.register_parquet(table, str(path))
