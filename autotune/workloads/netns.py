"""Emulated buildings: one Linux network namespace per building, joined through a bridge in a
core namespace by veth links; each building's uplink can be shaped with ``tc`` (tbf). Ranks of a
building run inside its namespace (``ip netns exec``): traffic inside a building stays on that
namespace's own stack, traffic between buildings crosses the shaped veth.

Everything is torn down on exit, on an exception, and on SIGTERM/SIGINT; namespaces left by a
SIGKILLed run (names carry the owner's pid) are removed by the next run. Without root or the
``ip``/``tc`` tools, ``EmulatedBuildings`` refuses in one line (NamespaceUnavailable).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess

PREFIX = "autotune"


class NamespaceUnavailable(RuntimeError):
    pass


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode:
        raise NamespaceUnavailable(f"ip {' '.join(args)}: {r.stderr.strip()[:200]}")
    return r


def our_namespaces() -> list[str]:
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith(PREFIX + "-")]


def remove_stale() -> list[str]:
    """Delete namespaces whose owning process is gone (left by a SIGKILLed run)."""
    gone = []
    for ns in our_namespaces():
        m = re.match(rf"{PREFIX}-(\d+)-", ns)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _ip("netns", "del", ns, check=False)
            gone.append(ns)
    return gone


def check_available() -> None:
    if os.geteuid() != 0:
        raise NamespaceUnavailable("emulated buildings need root (network namespaces and tc); shaped runs refused")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NamespaceUnavailable(f"emulated buildings need the `{tool}` tool (iproute2); shaped runs refused")
    probe = f"{PREFIX}-{os.getpid()}-probe"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode:
        raise NamespaceUnavailable(f"cannot create network namespaces ({r.stderr.strip()[:120]}); shaped runs refused")
    _ip("netns", "del", probe, check=False)


class EmulatedBuildings:
    """``with EmulatedBuildings(2, xb_rate_mbit=200) as eb: eb.netns[b], eb.addr[b], eb.ifname``."""

    def __init__(self, n_buildings: int, xb_rate_mbit: float | None = None):
        self.n = int(n_buildings)
        self.rate = xb_rate_mbit
        self.tag = f"{PREFIX}-{os.getpid()}"
        self.core = f"{self.tag}-core"
        self.netns = [f"{self.tag}-b{b}" for b in range(self.n)]
        self.addr = [f"10.213.0.{b + 1}" for b in range(self.n)]
        self.ifname = "bldg0"
        self._old = {}

    def __enter__(self):
        check_available()
        remove_stale()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._on_signal)
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def _build(self):
        _ip("netns", "add", self.core)
        _ip("-n", self.core, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.core, "link", "set", "br0", "up")
        for b, ns in enumerate(self.netns):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            peer = f"up{b}"
            _ip("-n", ns, "link", "add", self.ifname, "type", "veth", "peer", "name", peer, "netns", self.core)
            _ip("-n", self.core, "link", "set", peer, "master", "br0")
            _ip("-n", self.core, "link", "set", peer, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[b]}/24", "dev", self.ifname)
            _ip("-n", ns, "link", "set", self.ifname, "up")
            if self.rate:
                # each building's uplink: token bucket at the given rate (egress of its veth)
                burst_kbit = max(32, int(self.rate * 1000 / 250 / 8 * 8))   # ~4 ms of traffic
                r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", self.ifname, "root",
                                    "tbf", "rate", f"{self.rate}mbit", "burst", f"{burst_kbit}kbit",
                                    "latency", "200ms"], capture_output=True, text=True)
                if r.returncode:
                    raise NamespaceUnavailable(f"tc tbf: {r.stderr.strip()[:200]}")

    def teardown(self):
        for ns in [*self.netns, self.core]:
            _ip("netns", "del", ns, check=False)
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}

    def _on_signal(self, signum, frame):
        self.teardown()
        raise SystemExit(128 + signum)

    def __exit__(self, *exc):
        self.teardown()
        return False
