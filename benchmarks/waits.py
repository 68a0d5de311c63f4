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

``--kueue-queued Q`` makes P2 "P2 under Kueue" (a cluster with Kueue, by default ``bench-waits-kueue``): each N's jobs
carry a Kueue queue label, their ClusterQueue has quota for exactly N - Q of them, so N - Q are admitted (running,
logs followed) and Q stay queued (suspended, their Workloads QuotaReserved=False); the same figures as P2, plus the
hub's own lists and watches and the task log's queued / admitted lines. Plain P2 of this provider at the same N
follows on the same cluster (``--no-baseline``: not). Typical: ``--n 300 --kueue-queued 280 --skip p1,p3``.

``--kind trainjob`` makes P2 "P2 on TrainJobs" (benchmarks/waits_trainjob.py: a cluster with Kubeflow Trainer and
JobSet, by default ``bench-trainjob``): the same figures for waits on TrainJobs, each N followed by plain P2 of this
provider on MPIJobs on the same cluster (``--no-baseline``: not). Typical: ``--kind trainjob --n 10,100,300 --skip
p1,p3 --settle 30 --nodes 12`` (``--nodes``: simulated nodes of a cluster this starts; both kinds' pods must fit).

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
from datetime import UTC, datetime
from pathlib import Path

import psutil

from benchmarks import cluster_load as load
from localcluster.processes import child_env

REPO = Path(__file__).resolve().parents[1]
PEER = "cncf.kubernetes KubernetesJobTrigger (poll 10 s)"


class Worker:
    """benchmarks/wait_worker.py in a process of its own; samples its RSS and TCP connections."""

    def __init__(
        self,
        side: str,
        namespace: str,
        names: list[str],
        kubeconfig: str,
        *,
        logs: bool,
        seconds: float,
        collect_lines: bool = False,
        log: Path | None = None,
        api_version: str | None = None,
    ) -> None:
        self.out = Path(tempfile.mkstemp(prefix="bench-waits-", suffix=".jsonl")[1])
        cmd = (
            [
                sys.executable,
                "-m",
                "benchmarks.wait_worker",
                "--side",
                side,
                "--namespace",
                namespace,
                "--names",
                ",".join(names),
                "--kubeconfig",
                kubeconfig,
                "--seconds",
                str(seconds),
                "--out",
                str(self.out),
            ]
            + (["--logs"] if logs else [])
            + (["--collect-lines"] if collect_lines else [])
            + (["--api-version", api_version] if api_version else [])
        )
        # KUBECONFIG too: the peer's async hook reads the default kubeconfig when its connection is not set
        env = child_env(PYTHONPATH=str(REPO), KUBECONFIG=kubeconfig)
        self.stderr = self.out.with_suffix(".stderr")
        # stdout: the waits' own log lines, as a triggerer writes them (kept in ``log`` when given)
        with open(self.stderr, "w") as err, open(log or os.devnull, "w") as out:
            self.popen = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err)
        self.proc = psutil.Process(self.popen.pid)
        self.peak_rss = 0
        self.peak_conns = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set() and self.popen.poll() is None:
            try:
                self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
                conns = [
                    c for c in self.proc.net_connections(kind="tcp") if c.status == psutil.CONN_ESTABLISHED
                ]
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
            if time.time() > deadline or (self.popen.poll() is not None and len(found) < count):
                raise RuntimeError(
                    f"worker: {len(found)} of {count} {key!r} records ({self.out}, {self.stderr})"
                )
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
    for label, side, logs in (
        ("provider, logs on", "provider", True),
        ("provider, logs off", "provider", False),
        (PEER, "peer", False),
    ):
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
        latencies[label] = sorted(
            e["t"] - watcher.ended[e["event"]] for e in events if e["event"] in watcher.ended
        )
        print(f"P1 {label}: {[f'{x:.2f}' for x in latencies[label]]}", flush=True)
        if side == "provider":
            own = sorted(
                e["t"] - succeeded.ended[e["event"]] for e in events if e["event"] in succeeded.ended
            )
            latencies[f"{label}, from the MPIJob's Succeeded condition"] = own
            print(f"P1 {label} from Succeeded: {[f'{x:.3f}' for x in own]}", flush=True)
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
        results[label] = {
            **measure(cluster, api, side, namespace, names, logs, window, settle),
            "running": running,
        }
        print(f"P2 N={n} {label}: {json.dumps(results[label])}", flush=True)
    return results


def measure(
    cluster,
    api,
    side: str,
    namespace: str,
    names: list[str],
    logs: bool,
    window: float,
    settle: float,
    worker_log: Path | None = None,
    api_version: str | None = None,
) -> dict:
    """P2's figures: ``names`` waited on in one process, over ``window`` seconds once ``settle`` seconds passed;
    ``api_version``: the jobs' kind's (default: MPIJobs v2beta1)."""
    # the worker stops by itself after the window (and a margin: its watches must still be open when sampled)
    worker = Worker(
        side,
        namespace,
        names,
        str(cluster.kubeconfig_path),
        logs=logs,
        seconds=settle + window + 15,
        log=worker_log,
        api_version=api_version,
    )
    worker.wait_for("started")
    time.sleep(settle)  # startup (one GET per wait, the hub's lists) is not the steady state
    cpu0, req0, busy0, t0 = worker.cpu(), load.request_counts(api), psutil.cpu_times(), time.time()
    idle_lag = _sleep_sampling(window)
    cpu1, req1, busy1, t1 = worker.cpu(), load.request_counts(api), psutil.cpu_times(), time.time()
    open_requests = load.long_running(api)
    tcp_end = worker.connections()
    end = worker.finish()
    requests = load.delta(req0, req1)
    return {
        "cpu_per_min": (cpu1 - cpu0) * 60 / window,
        "peak_rss_mib": worker.peak_rss / 2**20,
        "tcp": worker.peak_conns,
        "tcp_end": tcp_end,
        "requests": requests,
        "requests_per_job_hour": sum(requests.values()) / len(names) * 3600 / window,
        "open_long_running": open_requests,
        "lag_p99_ms": _p99(
            end["lag_ms"]
        ),  # the worker's whole life, startup included (as P2 always measured)
        "window_lag_p99_ms": _p99([ms for t, ms in end["lag_samples"] if t0 <= t <= t1]),
        "idle_lag_p99_ms": _p99(idle_lag),
        # the machine's cores busy in the window, in CPU s per minute, this process's share included (shared machine)
        "machine_cpu_per_min": (_busy(busy1) - _busy(busy0)) * 60 / window,
        "loadavg_end": os.getloadavg()[0],
        **({"hubs": end["hubs"]} if end.get("hubs") is not None else {}),
    }


def _p99(samples: list[float]) -> float:
    lag = sorted(samples) or [0.0]
    return lag[int(len(lag) * 0.99) - 1] if len(lag) > 1 else lag[0]


def _sleep_sampling(seconds: float) -> list[float]:
    """Sleep ``seconds`` in steps of 0.1 s, as the worker's lag probe does: how late each step woke, ms. This idle
    process's lag, in the same window as the worker's, is the machine's share of it (other work on its cores)."""
    samples, end = [], time.monotonic() + seconds
    while (now := time.monotonic()) < end:
        step = min(0.1, end - now)
        time.sleep(step)
        samples.append((time.monotonic() - now - step) * 1000)
    return samples


def _busy(times) -> float:
    """CPU seconds the machine's cores spent not idle."""
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


KUEUE = "provider, logs on, under Kueue"
KUEUE_LINES = {
    "queued": "is queued by Kueue",
    "admitted": "was admitted by Kueue",
    "evicted": "was evicted by Kueue",
    "not visible": "Workload is not visible",
}


def p2_kueue(cluster, api, n: int, queued: int, window: float, settle: float) -> dict:
    """P2 with every job in a Kueue queue: ``n - queued`` admitted (running), ``queued`` suspended by Kueue (their
    Workloads QuotaReserved=False), in a ClusterQueue of their own sized for exactly ``n - queued`` jobs."""
    from localcluster import behaviour as bh

    namespace = f"bench-p2-kueue-{uuid.uuid4().hex[:6]}"
    load.ensure_namespace(api, namespace)
    cluster.set_launcher_logs(namespace, [f"line {i}" for i in range(20)])
    queue = load.Queue(namespace, admitted=n - queued)
    queue.create(api)
    names = [f"p2-{i:04d}" for i in range(n)]
    start = time.time()
    load.create(api, namespace, "provider", names, bh.RUN, queue=queue)
    admitted, waiting = queue.settled(api, n)
    settled_s = time.time() - start
    running = load.running_main_containers(api, namespace)
    print(
        f"P2 N={n} {KUEUE}: {admitted} admitted ({running} launchers running), {waiting} queued, "
        f"settled {settled_s:.0f} s after the first create",
        flush=True,
    )
    worker_log = Path(tempfile.mkstemp(prefix="bench-kueue-", suffix=".log")[1])
    result = measure(cluster, api, "provider", namespace, names, True, window, settle, worker_log=worker_log)
    text = worker_log.read_text()
    after = queue.workloads(api)
    result.update(
        {
            "running": running,
            "admitted": admitted,
            "queued": waiting,
            "admitted_queued_after": after,
            "settled_s": settled_s,
            "quota": {
                "cluster_queue_cpu_m": queue.admitted * 2 * queue.pod_cpu_milli,
                "pod_cpu_m": queue.pod_cpu_milli,
            },
            "log_lines": {kind: text.count(marker) for kind, marker in KUEUE_LINES.items()},
        }
    )
    print(f"P2 N={n} {KUEUE}: {json.dumps(result)}", flush=True)
    delete_namespace(
        api, namespace, wait=300
    )  # the namespace controller's lists must not fall in the next window
    queue.delete(api)
    return result


def p3(cluster, api, lines: int, seconds: float) -> dict:
    namespace = f"bench-p3-{uuid.uuid4().hex[:6]}"
    load.ensure_namespace(api, namespace)
    cluster.set_launcher_logs(namespace, [])
    load.create(api, namespace, "provider", ["p3"], bh_succeed(), f"{int(seconds) + 15}s")
    load.wait_running(api, namespace, 1)
    worker = Worker(
        "provider",
        namespace,
        ["p3"],
        str(cluster.kubeconfig_path),
        logs=True,
        seconds=seconds + 120,
        collect_lines=True,
    )
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
    return {
        "written": written,
        "printed": got["distinct"],
        "lost": written - got["distinct"],
        "doubled": got["doubled"],
        "cpu_s": cpu1 - cpu0,
        "seconds": seconds,
    }


def delete_namespace(api, namespace: str, wait: float = 0) -> None:
    """Delete ``namespace``; ``wait``: for at most that many seconds until it is gone (its name free again)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.delete_namespace(namespace)
    deadline = time.time() + wait
    while time.time() < deadline:
        try:
            core.read_namespace(namespace)
        except client.exceptions.ApiException as err:
            if err.status == 404:
                return
            raise
        time.sleep(2)


def machine() -> str:
    mem = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.node()}: {psutil.cpu_count()} cores, {mem:.0f} GiB, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", default="10,100,300", help="numbers of concurrent waits (P2)")
    parser.add_argument(
        "--cluster",
        help="local cluster name (started when not running; default bench-waits, "
        "bench-waits-kueue with --kueue-queued)",
    )
    parser.add_argument("--window", type=float, default=60.0, help="P2 measuring window, seconds")
    parser.add_argument("--settle", type=float, default=10.0, help="P2 seconds after start before measuring")
    parser.add_argument("--p1-runs", type=int, default=5)
    parser.add_argument("--p3-lines", type=int, default=50_000)
    parser.add_argument("--p3-seconds", type=float, default=60.0)
    parser.add_argument("--sides", default="provider,peer", help="P2: which waits to measure")
    parser.add_argument(
        "--kueue-queued",
        type=int,
        metavar="Q",
        help="P2 under Kueue instead: each N's jobs in a Kueue queue with quota for N - Q of them "
        "(admitted, running), Q queued (this provider's waits only; a cluster with Kueue)",
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="with --kueue-queued or --kind trainjob: not followed by plain P2 (provider) at each N on the same "
        "cluster",
    )
    parser.add_argument(
        "--kind",
        choices=("mpijob", "trainjob"),
        default="mpijob",
        help="P2's jobs: MPIJobs, or TrainJobs of Kubeflow Trainer (benchmarks/waits_trainjob.py)",
    )
    parser.add_argument("--nodes", type=int, help="simulated nodes of a cluster this starts (default 4)")
    parser.add_argument(
        "--control",
        type=float,
        default=30.0,
        help="--kind trainjob: seconds with no waiting process on the settled jobs, before the waits (0: none)",
    )
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: p1,p2,p3")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    parser.add_argument("--previous", help="results JSON of an earlier run: its parts not rerun are kept")
    parser.add_argument(
        "--real-node",
        metavar="NAME",
        help="instead: only P1 on the running real-node cluster NAME "
        "(benchmarks/p1_real.py; python -m localcluster node up --name NAME), --p1-runs per variant",
    )
    args = parser.parse_args()
    if args.real_node:
        return _real_node(args)
    from localcluster.cluster import LocalCluster

    kueue, trainjob = args.kueue_queued is not None, args.kind == "trainjob"
    name = args.cluster or ("bench-waits-kueue" if kueue else "bench-trainjob" if trainjob else "bench-waits")
    nodes = {"nodes": args.nodes} if args.nodes else {}
    cluster = _running(name) or LocalCluster(name, "v2beta1", kueue=kueue, **nodes).start()
    if kueue and not cluster.kueue:
        sys.exit(
            f"--kueue-queued: the running cluster {name!r} has no Kueue (python -m localcluster down {name})"
        )
    if trainjob and "p2" not in args.skip.split(","):
        from benchmarks.waits_trainjob import ensure_trainer

        ensure_trainer(cluster)
    api = cluster.api_client()
    skip = set(filter(None, args.skip.split(",")))
    parts = [p for p in ("p1", "p3", "p2") if p not in skip]
    results = json.loads(Path(args.previous).read_text()) if args.previous else {}
    which = f"under Kueue, {args.kueue_queued} queued" if kueue else "TrainJobs" if trainjob else args.sides
    results.setdefault("runs", []).append(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {', '.join(parts)}"
        + (f" (N={args.n}, {which})" if "p2" in parts else "")
    )
    results.update(
        {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "window": args.window,
        }
    )
    if "p1" not in skip:
        results["p1"] = p1(cluster, api, args.p1_runs)
    if "p3" not in skip:
        results["p3"] = p3(cluster, api, args.p3_lines, args.p3_seconds)
        print(f"P3: {results['p3']}", flush=True)
    if "p2" not in skip and kueue:
        results.setdefault("p2_kueue", {}).update(
            {str(n): _under_kueue(cluster, api, n, args, results) for n in map(int, args.n.split(","))}
        )
    elif "p2" not in skip and trainjob:
        from benchmarks.waits_trainjob import run_entry

        results.setdefault("p2_trainjob", {}).update(
            {
                str(n): run_entry(cluster, api, n, args, _run_entry(results, args))
                for n in map(int, args.n.split(","))
            }
        )
    elif "p2" not in skip:
        results.setdefault("p2", {}).update(
            {
                str(n): {
                    **results.get("p2", {}).get(str(n), {}),
                    **p2(cluster, api, n, args.window, args.settle, tuple(args.sides.split(","))),
                }
                for n in map(int, args.n.split(","))
            }
        )
    _save(results, Path(args.out))


def _under_kueue(cluster, api, n: int, args: argparse.Namespace, results: dict) -> dict:
    """P2 under Kueue at ``n``, then (unless --no-baseline) plain P2 of this provider at ``n`` on the same cluster,
    back to back; both namespaces are deleted after (the baseline's pods fill the simulated nodes)."""
    entry = {
        **_run_entry(results, args),
        KUEUE: p2_kueue(cluster, api, n, args.kueue_queued, args.window, args.settle),
    }
    if not args.no_baseline:
        entry.update(p2(cluster, api, n, args.window, args.settle, ("provider",)))
        delete_namespace(api, "bench-p2-provider", wait=300)
    return entry


def _run_entry(results: dict, args: argparse.Namespace) -> dict:
    """When, where and how a section's run was made (the section reports it beside its figures)."""
    return {
        "date": results["date"],
        "commit": _commit(),
        "machine": results["machine"],
        "load": _load(),
        "window": args.window,
        "settle": args.settle,
        "command": _command(),
    }


def _real_node(args: argparse.Namespace) -> None:
    """P1 on a real node, merged into the results of ``--previous``."""
    from benchmarks.p1_real import p1_real
    from localcluster.node_container import NodeCluster

    node = NodeCluster(args.real_node)
    if not node.running():
        sys.exit(
            f"--real-node {args.real_node!r}: no such node cluster running "
            f"(python -m localcluster node up --name {args.real_node})"
        )
    results = json.loads(Path(args.previous).read_text()) if args.previous else {}
    now = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    results.setdefault("runs", []).append(f"{now}: p1 on the real node")
    results.setdefault("machine", machine())
    results.setdefault("date", now)
    results["p1_real"] = {
        "date": now,
        "machine": machine(),
        **p1_real(str(node.kubeconfig_path), args.p1_runs),
    }
    _save(results, Path(args.out))


def _save(results: dict, out: Path) -> None:
    raw = out.with_suffix(".json")
    raw.write_text(json.dumps(results, indent=1))
    from benchmarks.waits_report import write_report

    write_report(results, out)
    print(f"wrote {out} and {raw}")


def _commit() -> str:
    """The checkout's commit (``+`` when its tracked files differ from it)."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, env=child_env()
    ).stdout
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO, env=child_env()).returncode
    return head.strip() + ("+" if dirty else "")


def _load() -> str:
    """The machine's load average when the run started (other work shares its cores)."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1 / 5 / 15 min)"


def _command() -> str:
    return "python -m benchmarks.waits " + " ".join(sys.argv[1:])


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
