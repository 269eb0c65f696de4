"""Start one worker on a given port of 127.0.0.1 and serve until Ctrl-C.

python examples/localhost_worker.py 50051
"""

from __future__ import annotations

import sys

from datafusion_distributed_py import Worker


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 50051
    worker = Worker(host="127.0.0.1", port=port).start()
    print(f"listening on {worker.url}", flush=True)
    worker.serve()  # blocks; Ctrl-C stops gracefully


if __name__ == "__main__":
    main()
