"""Query a parquet file or directory through workers named by WORKERS=port,port,...

    WORKERS=50051,50052 python examples/distributed_run.py data.parquet "SELECT count(*) FROM t"
    WORKERS=50051,50052 python examples/distributed_run.py data.parquet --plan

The table is registered as ``t``. With ``--plan`` the distributed plan is printed instead of
the result. WORKERS entries may be ports (on 127.0.0.1) or full URLs.
"""

from __future__ import annotations

import argparse
import os

from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext


def worker_urls(spec: str) -> list[str]:
    urls = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        urls.append(f"http://127.0.0.1:{item}" if item.isdigit() else item)
    return urls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="parquet file or directory")
    parser.add_argument("query", nargs="?", default="SELECT count(*) AS n FROM t")
    parser.add_argument("--plan", action="store_true", help="print the distributed plan")
    args = parser.parse_args()

    spec = os.environ.get("WORKERS")
    if not spec:
        parser.error("set WORKERS=port,port,... (or URLs) to name the workers")
    ctx = SessionContext()
    ctx.register_parquet("t", args.path)
    dctx = DistributedContext(ctx, workers=worker_urls(spec))
    if args.plan:
        print(dctx.explain(args.query))
    else:
        dctx.sql(args.query).show()


if __name__ == "__main__":
    main()
