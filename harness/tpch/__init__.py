"""TPC-H data and queries, shared by the quickstart, the tests and the benchmarks.

Data comes from the ``tpchgen-cli`` package (``pip install tpchgen-cli``); the 22 queries are
the standard ones with the specification's validation parameters.

Example:
    >>> from harness import tpch
    >>> tpch.TABLES[:3]
    ('customer', 'lineitem', 'nation')
    >>> "l_returnflag" in tpch.query(1)
    True
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from datafusion import SessionContext

TABLES = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")
QUERIES = tuple(range(1, 23))


def query(n: int) -> str:
    """The SQL text of TPC-H query ``n`` (1..22)."""
    if n not in QUERIES:
        raise ValueError(f"TPC-H has queries 1..22, not {n}")
    return (resources.files(__package__) / "queries" / f"q{n}.sql").read_text()


def _tpchgen() -> str:
    exe = shutil.which("tpchgen-cli") or os.path.join(
        os.path.dirname(sys.executable), "tpchgen-cli"
    )
    if not os.path.exists(exe):
        raise RuntimeError("tpchgen-cli not found: pip install tpchgen-cli")
    return exe


def generate(out_dir: str | os.PathLike[str], scale_factor: float = 0.1, parts: int = 4) -> Path:
    """Write TPC-H parquet tables under ``out_dir/<table>/`` (``parts`` files each).

    Reuses a complete earlier run in the same directory. Returns the directory.
    """
    out = Path(out_dir)
    marker = out / f".complete-sf{scale_factor}-parts{parts}"
    if marker.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            _tpchgen(),
            "parquet",
            "-s",
            str(scale_factor),
            "--parts",
            str(parts),
            "--output-dir",
            str(out),
            "--overwrite",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    marker.touch()
    return out


def register(ctx: SessionContext, data_dir: str | os.PathLike[str]) -> None:
    """Register every TPC-H table found under ``data_dir`` on ``ctx`` as a parquet table."""
    for table in TABLES:
        path = Path(data_dir) / table
        if not path.exists():
            raise FileNotFoundError(f"missing TPC-H table directory {path}")
        ctx.register_parquet(table, f"{path}/")
