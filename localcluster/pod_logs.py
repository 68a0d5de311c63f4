"""Log lines the tests write for simulated pods, served by kwok through the API server's ``pods/log``.

Files ``pod-logs/<namespace>/current.log`` (and ``previous.log``) in CRI format, and a kwok ``ClusterLogs``
``logs-<namespace>`` selecting the namespace and the given containers.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .cluster_objects import KWOK_GROUP, KWOK_VERSION

_CRI_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (stdout|stderr) [FP] ")


def _rfc3339nano(t: float) -> str:
    dt = _dt.datetime.fromtimestamp(t, tz=_dt.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int((t % 1) * 1e9):09d}Z"


def cri_lines(lines: Iterable[str], start: float | None = None, step: float = 0.001) -> list[str]:
    """Format messages as CRI log lines ``<RFC3339Nano> stdout F <text>``; lines already in CRI format pass.

    Timestamps start at ``start`` (default: now) and grow by ``step`` seconds per line so that their order is
    stable and distinct even at second precision when ``step >= 1``.
    """
    t = time.time() if start is None else start
    out = []
    for i, line in enumerate(lines):
        line = line.rstrip("\n")
        out.append(line if _CRI_LINE.match(line) else f"{_rfc3339nano(t + i * step)} stdout F {line}")
    return out


def serve_logs(
    api: Any,
    pod_logs_dir: Path,
    namespace: str,
    lines: Sequence[str],
    previous_lines: Sequence[str] | None,
    containers: Sequence[str],
) -> Path:
    """Write the log files of ``namespace``, (re)create its ``ClusterLogs``; returns the current log file."""
    from kubernetes import client

    d = pod_logs_dir / namespace
    d.mkdir(parents=True, exist_ok=True)
    current = d / "current.log"
    previous = d / "previous.log"
    now = time.time()
    if previous_lines is not None:
        prev = cri_lines(previous_lines, start=now - 60)
        previous.write_text("".join(x + "\n" for x in prev))
    current.write_text("".join(x + "\n" for x in cri_lines(lines, start=now)))
    log_spec: dict = {"containers": list(containers), "logsFile": str(current)}
    if previous_lines is not None:
        log_spec["previousLogsFile"] = str(previous)
    name = f"logs-{namespace}"
    obj = {
        "apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}",
        "kind": "ClusterLogs",
        "metadata": {"name": name},
        "spec": {"selector": {"matchNamespaces": [namespace]}, "logs": [log_spec]},
    }
    co = client.CustomObjectsApi(api)
    try:
        co.create_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", obj)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
        existing = co.get_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", name)
        obj["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        co.replace_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", name, obj)
    return current


def append_logs(pod_logs_dir: Path, namespace: str, lines: Sequence[str]) -> None:
    """Append lines to the current log file of ``namespace`` (followers receive them)."""
    with open(pod_logs_dir / namespace / "current.log", "a") as f:
        for x in cri_lines(lines):
            f.write(x + "\n")
        f.flush()


def clear_logs(api: Any, pod_logs_dir: Path, namespace: str) -> None:
    """Delete the ``ClusterLogs`` and the files of ``namespace``."""
    from kubernetes import client

    co = client.CustomObjectsApi(api)
    with contextlib.suppress(client.exceptions.ApiException):
        co.delete_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", f"logs-{namespace}")
    shutil.rmtree(pod_logs_dir / namespace, ignore_errors=True)
