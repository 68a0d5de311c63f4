"""Ports for the components of a local cluster, claimed machine-wide so that clusters started at once never collide.

kwokctl picks a component's port by counting down from 32767 and taking the first one it can bind, the same
sequence in every process: two clusters created at the same moment (scripts/test's lanes start several) get the
same ports, and one cluster's client then reaches the other's API server ("x509: certificate signed by unknown
authority" while kwokctl installs its CRDs; seen in a cold run of 2026-11-27). Instead, every port is given to
kwokctl, chosen at random below the kernel's ephemeral range (as kwokctl's own are), free when tested, and recorded
in a claims file under a lock, so that no process of this machine hands it out again while the cluster may still be
starting (a claim lasts ``CLAIM_SECONDS``; by then its component holds the port).
"""

from __future__ import annotations

import fcntl
import json
import random
import socket
import time
from pathlib import Path

LOW, HIGH = 10000, 32767  # kwokctl's own range; the kernel's ephemeral ports start above it
CLAIM_SECONDS = 600


def _bindable(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def claim(count: int, claims_file: Path) -> list[int]:
    """``count`` distinct ports, free now and claimed by no other cluster start of this machine in the last
    ``CLAIM_SECONDS``."""
    claims_file.parent.mkdir(parents=True, exist_ok=True)
    with open(claims_file.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        try:
            claims = {
                int(p): t for p, t in json.loads(claims_file.read_text()).items() if now - t < CLAIM_SECONDS
            }
        except (OSError, ValueError):
            claims = {}
        ports: list[int] = []
        while len(ports) < count:
            port = random.randint(LOW, HIGH)
            if port not in claims and port not in ports and _bindable(port):
                ports.append(port)
        claims.update(dict.fromkeys(ports, now))
        claims_file.write_text(json.dumps(claims))
        return ports


def free_loopback_port() -> int:
    """A port free on 127.0.0.1 now, chosen by the kernel (a controller's webhook or probe port: taken at once
    by the process it is handed to, unlike kwokctl's, which a cluster start claims in a batch)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
