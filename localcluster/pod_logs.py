"""Log lines the tests write for simulated pods, served by kwok through the API server's ``pods/log``.

Files ``pod-logs/<namespace>/current.log`` (and ``previous.log``) in CRI format, and a kwok ``ClusterLogs``
``logs-<namespace>`` selecting the namespace and the given containers, in use once kwok serves it.

kwok learns of a ``ClusterLogs`` through an informer, and is late in two ways: after an API server outage its
watch comes back only after the reflector's backoff (measured: 2.5 s after a 5 s outage, 8 s after 20 s; a CI run
read "no logs found" 10 s after the create, right after the outage test), and kwok 0.8 caches the list it serves
under the informer's last resourceVersion, which the reflector sets before the object is in the store: a log read
in between keeps the list without it until the next change. So ``serve_logs`` returns only once kwok's own server
answers a read of the namespace, and touches the object (a new resourceVersion) while it does not.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import re
import shutil
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .cluster_objects import KWOK_GROUP, KWOK_VERSION
from .waiting import wait_until

# s: the reflector's backoff is capped at 30 s (jittered up to 60 s), on a loaded machine
SERVED_TIMEOUT = 120
TOUCH_EVERY = 5  # s without the logs served before the object gets a new resourceVersion
PROBE_POD = "served-probe"  # kwok matches a ClusterLogs by namespace and never looks the pod up
# kwok's server certificate is the local cluster's own, made for its components: not checked for a probe
_UNVERIFIED = ssl.create_default_context()
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE

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
    kwok_server: str,
    pod_logs_dir: Path,
    namespace: str,
    lines: Sequence[str],
    previous_lines: Sequence[str] | None,
    containers: Sequence[str],
) -> Path:
    """Write the log files of ``namespace``, (re)create its ``ClusterLogs``, return the current log file once
    kwok (``kwok_server``: its kubelet server's URL) serves it."""
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
    touches = itertools.count(1)
    touched = [time.monotonic()]
    _apply(api, obj)

    def served() -> bool:
        if all(
            kwok_serves(kwok_server, namespace, c, previous=previous_lines is not None) for c in containers
        ):
            return True
        if time.monotonic() - touched[0] >= TOUCH_EVERY:  # kwok may hold a list cached without it
            obj["metadata"]["annotations"] = {"airflow-mpi.test/touch": str(next(touches))}
            _apply(api, obj)
            touched[0] = time.monotonic()
        return False

    wait_until(served, SERVED_TIMEOUT, f"kwok to serve the ClusterLogs {name} (pod logs of {namespace})")
    return current


def _apply(api: Any, obj: dict) -> None:
    """Create the cluster-scoped kwok object, or replace the one of that name."""
    from kubernetes import client

    co = client.CustomObjectsApi(api)
    name = obj["metadata"]["name"]
    obj["metadata"].pop("resourceVersion", None)
    try:
        co.create_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", obj)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
        existing = co.get_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", name)
        obj["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        co.replace_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", name, obj)


def kwok_serves(kwok_server: str, namespace: str, container: str, *, previous: bool = False) -> bool:
    """kwok's kubelet server answers a log read of ``container`` in ``namespace`` (400 "no logs found" while it
    has no ClusterLogs for it); no line is read."""
    query = urllib.parse.urlencode({"tailLines": 0, **({"previous": "true"} if previous else {})})
    url = f"{kwok_server}/containerLogs/{namespace}/{PROBE_POD}/{container}?{query}"
    try:
        with urllib.request.urlopen(url, context=_UNVERIFIED, timeout=10) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as err:
        if err.code == 400:
            return False
        raise


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
