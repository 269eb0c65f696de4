"""What runs on the simulated hosts: a CLI worker on a worker host, and the coordinator's
program (``driver.py``) with a job on the coordinator host. Shared by the multi-host tests
and the benchmarks that use the same hosts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netns import Network

DRIVER = Path(__file__).with_name("driver.py")
#: The port every worker host's worker listens on (each host has its own address).
PORT = 50051


def start_worker(net: Network, host: str, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """The worker CLI on ``host`` (``flags``: token, TLS...), once it listens; and its URL."""
    argv = ["datafusion-distributed-worker", "--host", "0.0.0.0", "--port", str(PORT),
            "--advertise-host", net.address[host], *flags]  # fmt: skip
    proc = net.spawn(host, argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), f"the worker on {host} did not start: {line!r}"
    return proc, line.removeprefix("listening on ")


def report_of(stdout: str, stderr: str) -> dict[str, Any]:
    """The driver's last report."""
    lines = [line for line in stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"the driver reported nothing:\n{stdout[-3000:]}\n{stderr[-5000:]}"
    return json.loads(lines[-1].removeprefix("REPORT "))  # type: ignore[no-any-return]


def drive_with_fault(
    net: Network, job: dict[str, Any], path: Path, fault: Callable[[], None], timeout: float
) -> dict[str, Any]:
    """Runs the driver on the coordinator host with ``job`` (written to ``path``), applies
    ``fault`` once its query runs (the driver says ``RUNNING``), and returns its report."""
    path.write_text(json.dumps(job))
    proc = net.spawn("coordinator", [sys.executable, str(DRIVER), str(path)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "RUNNING", line + (proc.stderr.read() if proc.stderr else "")
    fault()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the query did not end within {timeout:.0f} s of the fault") from None
    return report_of(out, err)
