"""Separate network hosts on one machine: a Linux network namespace per host, each with its
own address from the benchmarking range 198.18.0.0/15 on a veth link to a bridge that lives
in a namespace of its own, each link capped by a token bucket (``tc tbf``).

The machine's own interfaces and namespace are never touched: every link is made directly
inside the namespaces (``ip link add ... netns``), and everything is removed on exit — also
what a killed earlier run left (namespaces are named after the process that made them).

Example (as root)::

    with Network(["coordinator", "w1", "w2"], rate="1gbit") as net:
        worker = net.spawn("w1", ["python", "-m", "datafusion_distributed_py.worker", ...])
        net.run("coordinator", ["python", "driver.py", ...])
        net.cut("w2")  # its link goes down: it no longer answers, nor says so
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: Namespaces of this harness are named ``dfdpy<pid>-<n>`` (n = 0 is the bridge's).
PREFIX = "dfdpy"
#: Where ``ip netns exec`` finds a namespace's own ``/etc`` files (its ``hosts``).
ETC_NETNS = Path("/etc/netns")
SUBNET = "198.18.0"


def available() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def remove_stale() -> None:
    """Removes namespaces left by runs whose process is gone."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            shutil.rmtree(ETC_NETNS / name, ignore_errors=True)


class Network:
    """Hosts named by ``hosts``, each at ``198.18.0.<10 + i>``, joined by one bridge; every
    host's link capped at ``rate`` (``tc`` units: ``"1gbit"``, ``"10gbit"``; None: uncapped).

    Attributes:
        address: each host's address.
        names: extra ``/etc/hosts`` lines every host resolves (name -> addresses).
    """

    def __init__(
        self,
        hosts: Sequence[str],
        rate: str | None = "1gbit",
        names: dict[str, Sequence[str]] | None = None,
    ) -> None:
        self.hosts = list(hosts)
        self.rate = rate
        self.address = {h: f"{SUBNET}.{10 + i}" for i, h in enumerate(self.hosts)}
        self.names = {k: list(v) for k, v in (names or {}).items()}
        tag = f"{PREFIX}{os.getpid()}"
        self._bridge = f"{tag}-0"
        self._ns = {h: f"{tag}-{i + 1}" for i, h in enumerate(self.hosts)}
        self._procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Network:
        remove_stale()
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _build(self) -> None:
        _ip("netns", "add", self._bridge)
        _ip("-n", self._bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self._bridge, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{a} {h}\n" for h, a in self.address.items()
        )
        hosts_file += "".join(f"{a} {n}\n" for n, addrs in self.names.items() for a in addrs)
        for i, host in enumerate(self.hosts):
            ns, port = self._ns[host], f"p{i + 1}"
            _ip("netns", "add", ns)
            # Both ends made inside the namespaces: the machine's own never sees the link.
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", port, "netns",
                self._bridge)  # fmt: skip
            _ip("-n", self._bridge, "link", "set", port, "master", "br0")
            _ip("-n", self._bridge, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.address[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if self.rate is not None:
                self._shape(ns, self.rate)
            (ETC_NETNS / ns).mkdir(parents=True, exist_ok=True)
            (ETC_NETNS / ns / "hosts").write_text(hosts_file)
            (ETC_NETNS / ns / "hostname").write_text(f"{host}\n")

    @staticmethod
    def _shape(ns: str, rate: str) -> None:
        # A bucket of a few ms at the rate: bursts as a NIC's, the average capped.
        bits = {"gbit": 10**9, "mbit": 10**6}
        unit = next(u for u in bits if rate.endswith(u))
        per_second = float(rate[: -len(unit)]) * bits[unit] / 8
        burst = max(int(per_second * 0.004), 64 * 1024)
        done = subprocess.run(
            ["tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
             "burst", str(burst), "latency", "50ms"],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"tc tbf on {ns}: {done.stderr.strip()}")

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on ``host``."""
        return ["ip", "netns", "exec", self._ns[host], *argv]

    def spawn(self, host: str, argv: Sequence[str], **popen: object) -> subprocess.Popen[str]:
        """Starts ``argv`` on ``host``; stopped on exit at the latest."""
        proc = subprocess.Popen(  # type: ignore[call-overload]
            self.command(host, argv), text=True, start_new_session=True, **popen
        )
        self._procs.append(proc)
        return proc  # type: ignore[no-any-return]

    def run(
        self, host: str, argv: Sequence[str], timeout: float, **kw: object
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``argv`` on ``host`` to its end (bounded by ``timeout`` seconds)."""
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            self.command(host, argv), text=True, capture_output=True, timeout=timeout, **kw
        )

    def cut(self, host: str) -> None:
        """Takes ``host``'s link down: its peers' packets go nowhere, with no reset."""
        _ip("-n", self._bridge, "link", "set", f"p{self.hosts.index(host) + 1}", "down")

    def restore(self, host: str) -> None:
        """Brings ``host``'s link back up after :meth:`cut`."""
        _ip("-n", self._bridge, "link", "set", f"p{self.hosts.index(host) + 1}", "up")

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for ns in [*self._ns.values(), self._bridge]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
