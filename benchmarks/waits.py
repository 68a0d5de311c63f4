"""Waiting at scale, side by side with cncf.kubernetes' KubernetesJobTrigger, on the local cluster.

    python -m benchmarks.waits --n 10,100,300 [--cluster bench-waits] [--window 60] [--out docs/benchmarks.md]

Starts (or reuses) a local cluster (real API server and mpi-operator, simulated kwok nodes), then:

* P1 completion latency: from a main container seen ending (a pod watch) to the wait's event; this
  provider with logs on and off (MPIJob: launcher Job -> mpi-operator -> Succeeded) and the peer
  (batch Job polled every 10 s);
* P2 N concurrent waits in one process (benchmarks/wait_worker.py) while nothing changes: CPU seconds
  per minute, peak RSS, TCP connections, event-loop lag, the API server's namespace-scoped read
  requests by verb and its open long-running requests (watches, log follows);
* P3 log throughput: one launcher writing ``--p3-lines`` lines over ``--p3-seconds``: lines lost or doubled.

``--real-node NAME`` instead measures P1 on a real node (benchmarks/p1_real.py: real containers, a real kubelet
serving the launcher's log), merged into ``--previous``'s results.

Writes a markdown report with a plot (matplotlib) to ``--out`` (and ``docs/benchmarks-waits.png``).
Targets (issue 11) are reported against, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psutil

from benchmarks import cluster_load as load

REPO = Path(__file__).resolve().parents[1]
PEER = "cncf.kubernetes KubernetesJobTrigger (poll 10 s)"


class Worker:
    """benchmarks/wait_worker.py in a process of its own; samples its RSS and TCP connections."""

    def __init__(self, side: str, namespace: str, names: list[str], kubeconfig: str, *, logs: bool,
                 seconds: float, collect_lines: bool = False) -> None:
        self.out = Path(tempfile.mkstemp(prefix="bench-waits-", suffix=".jsonl")[1])
        cmd = [sys.executable, "-m", "benchmarks.wait_worker", "--side", side, "--namespace", namespace,
               "--names", ",".join(names), "--kubeconfig", kubeconfig, "--seconds", str(seconds),
               "--out", str(self.out)] + (["--logs"] if logs else []) + (["--collect-lines"] if collect_lines else [])
        # KUBECONFIG too: the peer's async hook reads the default kubeconfig when its connection is not set
        env = {**os.environ, "PYTHONPATH": str(REPO), "KUBECONFIG": kubeconfig}
        self.stderr = self.out.with_suffix(".stderr")
        with open(self.stderr, "w") as err:  # stdout: the waits' own log lines, as a triggerer writes them
            self.popen = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
        self.proc = psutil.Process(self.popen.pid)
        self.peak_rss = 0
        self.peak_conns = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set() and self.popen.poll() is None:
            try:
                self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
                conns = [c for c in self.proc.net_connections(kind="tcp") if c.status == psutil.CONN_ESTABLISHED]
                self.peak_conns = max(self.peak_conns, len(conns))
            except psutil.Error:
                return
            self._stop.wait(0.5)

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def wait_for(self, key: str, count: int = 1, timeout: float = 600) -> list[dict]:
        deadline = time.time() + timeout
        while True:
            found = [r for r in self.records() if key in r]
            if len(found) >= count:
                return found
            if time.time() > deadline or self.popen.poll() is not None and len(found) < count:
                raise RuntimeError(f"worker: {len(found)} of {count} {key!r} records ({self.out}, {self.stderr})")
            time.sleep(0.2)

    def connections(self) -> int:
        return len([c for c in self.proc.net_connections(kind="tcp") if c.status == psutil.CONN_ESTABLISHED])

    def cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    def finish(self, timeout: float = 120) -> dict:
        self.popen.wait(timeout)
        self._stop.set()
        return self.wait_for("lag_ms")[0]


def p1(cluster, api, runs: int) -> dict[str, list[float]]:
    """Latencies by wait; for this provider also from the MPIJob's Succeeded condition (the wait's own share)."""
    latencies: dict[str, list[float]] = {}
    for label, side, logs in (("provider, logs on", "provider", True), ("provider, logs off", "provider", False),
                              (PEER, "peer", False)):
        namespace = f"bench-p1-{uuid.uuid4().hex[:6]}"
        load.ensure_namespace(api, namespace)
        if logs:
            cluster.set_launcher_logs(namespace, [f"line {i}" for i in range(20)])
        watcher = load.EndWatcher(api, namespace)
        watcher.start()
        succeeded = load.SucceededWatcher(api, namespace)
        if side == "provider":
            succeeded.start()
        names = [f"p1-{i}" for i in range(runs)]
        load.create(api, namespace, side, names, bh_succeed(), "10s")
        worker = Worker(side, namespace, names, str(cluster.kubeconfig_path), logs=logs, seconds=300)
        events = worker.wait_for("event", runs, timeout=320)
        worker.finish()
        watcher.stop()
        succeeded.stop()
        latencies[label] = sorted(e["t"] - watcher.ended[e["event"]] for e in events if e["event"] in watcher.ended)
        print(f"P1 {label}: {['%.2f' % x for x in latencies[label]]}", flush=True)
        if side == "provider":
            own = sorted(e["t"] - succeeded.ended[e["event"]] for e in events if e["event"] in succeeded.ended)
            latencies[f"{label}, from the MPIJob's Succeeded condition"] = own
            print(f"P1 {label} from Succeeded: {['%.3f' % x for x in own]}", flush=True)
        delete_namespace(api, namespace)
    return latencies


def bh_succeed() -> str:
    from localcluster import behaviour as bh

    return bh.SUCCEED


def p2(cluster, api, n: int, window: float, settle: float, sides: tuple[str, ...]) -> dict[str, dict]:
    from localcluster import behaviour as bh

    results: dict[str, dict] = {}
    for label, side, logs in (("provider, logs on", "provider", True), (PEER, "peer", False)):
        if side not in sides:
            continue
        namespace = f"bench-p2-{side}"
        load.ensure_namespace(api, namespace)
        if logs:
            cluster.set_launcher_logs(namespace, [f"line {i}" for i in range(20)])
        names = [f"p2-{i:04d}" for i in range(n)]
        load.create(api, namespace, side, names, bh.RUN)
        running = load.wait_running(api, namespace, n)
        print(f"P2 N={n} {label}: {running} of {n} main containers running", flush=True)
        # the worker stops by itself after the window (and a margin: its watches must still be open when sampled)
        worker = Worker(side, namespace, names, str(cluster.kubeconfig_path), logs=logs, seconds=settle + window + 15)
        worker.wait_for("started")
        time.sleep(settle)  # startup (one GET per wait, the hub's lists) is not the steady state
        cpu0, req0 = worker.cpu(), load.request_counts(api)
        time.sleep(window)
        cpu1, req1 = worker.cpu(), load.request_counts(api)
        open_requests = load.long_running(api)
        tcp_end = worker.connections()
        end = worker.finish()
        requests = {k: req1.get(k, 0) - req0.get(k, 0) for k in req1 if req1.get(k, 0) - req0.get(k, 0) > 0}
        lag = end["lag_ms"] or [0.0]
        results[label] = {
            "cpu_per_min": (cpu1 - cpu0) * 60 / window,
            "peak_rss_mib": worker.peak_rss / 2**20,
            "tcp": worker.peak_conns,
            "tcp_end": tcp_end,
            "requests": requests,
            "requests_per_job_hour": sum(requests.values()) / n * 3600 / window,
            "open_long_running": open_requests,
            "lag_p99_ms": lag[int(len(lag) * 0.99) - 1] if len(lag) > 1 else lag[0],
            "running": running,
        }
        print(f"P2 N={n} {label}: {json.dumps(results[label])}", flush=True)
    return results


def p3(cluster, api, lines: int, seconds: float) -> dict:
    namespace = f"bench-p3-{uuid.uuid4().hex[:6]}"
    load.ensure_namespace(api, namespace)
    cluster.set_launcher_logs(namespace, [])
    load.create(api, namespace, "provider", ["p3"], bh_succeed(), f"{int(seconds) + 15}s")
    load.wait_running(api, namespace, 1)
    worker = Worker("provider", namespace, ["p3"], str(cluster.kubeconfig_path), logs=True, seconds=seconds + 120,
                    collect_lines=True)
    worker.wait_for("started")
    batches = max(int(seconds * 10), 1)
    per_batch = lines // batches
    cpu0 = worker.cpu()
    written = 0
    for b in range(batches):
        count = per_batch if b < batches - 1 else lines - written
        cluster.append_launcher_logs(namespace, [f"line {written + i:07d}" for i in range(count)])
        written += count
        time.sleep(seconds / batches)
    worker.wait_for("event", timeout=seconds + 120)
    cpu1 = worker.cpu()
    end = worker.finish()
    delete_namespace(api, namespace)
    got = end["lines"]
    return {"written": written, "printed": got["distinct"], "lost": written - got["distinct"],
            "doubled": got["doubled"], "cpu_s": cpu1 - cpu0, "seconds": seconds}


def delete_namespace(api, namespace: str) -> None:
    from kubernetes import client

    client.CoreV1Api(api).delete_namespace(namespace)


def machine() -> str:
    mem = psutil.virtual_memory().total / 2**30
    return f"{platform.node()}: {psutil.cpu_count()} cores, {mem:.0f} GiB, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="10,100,300", help="numbers of concurrent waits (P2)")
    parser.add_argument("--cluster", default="bench-waits", help="local cluster name (started when not running)")
    parser.add_argument("--window", type=float, default=60.0, help="P2 measuring window, seconds")
    parser.add_argument("--settle", type=float, default=10.0, help="P2 seconds after start before measuring")
    parser.add_argument("--p1-runs", type=int, default=5)
    parser.add_argument("--p3-lines", type=int, default=50_000)
    parser.add_argument("--p3-seconds", type=float, default=60.0)
    parser.add_argument("--sides", default="provider,peer", help="P2: which waits to measure")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: p1,p2,p3")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    parser.add_argument("--previous", help="results JSON of an earlier run: its parts not rerun are kept")
    parser.add_argument("--real-node", metavar="NAME", help="instead: only P1 on the running real-node cluster NAME "
                        "(benchmarks/p1_real.py; python -m localcluster node up --name NAME), --p1-runs per variant")
    args = parser.parse_args()
    if args.real_node:
        return _real_node(args)
    from localcluster.cluster import LocalCluster

    cluster = _running(args.cluster) or LocalCluster(args.cluster).start()
    api = cluster.api_client()
    skip = set(filter(None, args.skip.split(",")))
    parts = [p for p in ("p1", "p3", "p2") if p not in skip]
    results = json.loads(Path(args.previous).read_text()) if args.previous else {}
    results.setdefault("runs", []).append(
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: {', '.join(parts)}"
        + (f" (N={args.n}, {args.sides})" if "p2" in parts else ""))
    results.update({"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
                    "window": args.window})
    if "p1" not in skip:
        results["p1"] = p1(cluster, api, args.p1_runs)
    if "p3" not in skip:
        results["p3"] = p3(cluster, api, args.p3_lines, args.p3_seconds)
        print(f"P3: {results['p3']}", flush=True)
    if "p2" not in skip:
        results.setdefault("p2", {}).update(
            {str(n): {**results.get("p2", {}).get(str(n), {}),
                      **p2(cluster, api, n, args.window, args.settle, tuple(args.sides.split(",")))}
             for n in map(int, args.n.split(","))})
    _save(results, Path(args.out))


def _real_node(args: argparse.Namespace) -> None:
    """P1 on a real node, merged into the results of ``--previous``."""
    from benchmarks.p1_real import p1_real
    from localcluster.node_container import NodeCluster

    node = NodeCluster(args.real_node)
    if not node.running():
        sys.exit(f"--real-node {args.real_node!r}: no such node cluster running "
                 f"(python -m localcluster node up --name {args.real_node})")
    results = json.loads(Path(args.previous).read_text()) if args.previous else {}
    now = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    results.setdefault("runs", []).append(f"{now}: p1 on the real node")
    results.setdefault("machine", machine())
    results.setdefault("date", now)
    results["p1_real"] = {"date": now, "machine": machine(), **p1_real(str(node.kubeconfig_path), args.p1_runs)}
    _save(results, Path(args.out))


def _save(results: dict, out: Path) -> None:
    raw = out.with_suffix(".json")
    raw.write_text(json.dumps(results, indent=1))
    from benchmarks.waits_report import write_report

    write_report(results, out)
    print(f"wrote {out} and {raw}")


def _running(name: str):
    """The local cluster ``name`` when it is running (reused and left running), else None."""
    from localcluster.cluster import ClusterError, LocalCluster

    try:
        cluster = LocalCluster.existing(name, verbose=False)
    except ClusterError:
        return None
    return cluster if cluster.is_running() else None


if __name__ == "__main__":
    main()
