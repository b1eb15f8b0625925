"""Which process does a piece of shared work: ``host:pid`` labels, and whether one is still alive.

Trials (study.py) and MLflow child runs (tracking.py) carry the label of the process writing them,
so a worker that starts later can tell a crashed writer's leftovers from a live one's work.
"""
from __future__ import annotations

import os
import socket

THIS_PROCESS = f"{socket.gethostname()}:{os.getpid()}"


def parse(label: str) -> tuple[str, str]:
    """(host, pid) of a ``host:pid`` label; ("", "") if none."""
    host, _, pid = str(label).rpartition(":")
    return host, pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_here(label: str) -> bool:
    """True only for a process of this host that is gone; other hosts' and unlabelled ones are
    not known to be dead."""
    host, pid = parse(label)
    return host == socket.gethostname() and pid.isdigit() and not alive(int(pid))
