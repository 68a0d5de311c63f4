"""P2 on TrainJobs (issue 35): N waits on Kubeflow Trainer v2 TrainJobs in one process while nothing changes, beside
N waits on MPIJobs on the same cluster right after; its section of docs/benchmarks.md and its plot.

    python -m benchmarks.waits --kind trainjob --n 10,100,300 --skip p1,p3 --settle 30 --nodes 12

The cluster (default ``bench-trainjob``): the local one with the real Trainer v2.3.0 and JobSet v0.12.0 controllers
added beside the mpi-operator, as the test sessions add them (``LocalCluster.add_controllers``), and the runtime
``openmpi-mpiuser`` applied (airflowstack/trainer_runtime.py). Each TrainJob (benchmarks/trainjob_load.py) has
one node pod and its launcher, kept running; the waits are this provider's trigger with the TrainJob's api_version,
logs on, the same figures as P2 (benchmarks/waits.py ``measure``). A TrainJob takes two pods as an MPIJob of the
plain P2 does, and both kinds' namespaces stay until the next run: ``--nodes`` (110 pods each) sizes the simulated
nodes for every launcher to run (``trainjob_load.capacity``). ``--control S``: before the waits start, S seconds
with no waiting process on the settled jobs: what the API server counts then is the controllers', not the waits'.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from benchmarks import cluster_load as load
from benchmarks import trainjob_load as tj

TRAINJOB_WAIT = "provider, logs on, TrainJob"
MPIJOB_WAIT = "provider, logs on"  # the plain P2's label (waits.p2, waits_report.PROVIDER)
NAMESPACE = "bench-p2-trainjob"


def ensure_trainer(cluster: Any) -> None:
    """The cluster runs Trainer and JobSet (added when it does not yet) and holds the runtime (created or replaced)."""
    from airflowstack.trainer_runtime import TRAINER_CONTROLLERS, apply_runtime

    cluster.add_controllers(TRAINER_CONTROLLERS)
    apply_runtime(cluster.api_client())


def idle_window(api: Any, seconds: float) -> dict:
    """Namespace-scoped reads and open watches over ``seconds`` with no waiting process: the controllers' share of
    what the API server counts (they read through cluster-wide informers: none expected)."""
    before = load.request_counts(api)
    time.sleep(seconds)
    return {
        "seconds": seconds,
        "requests": load.delta(before, load.request_counts(api)),
        "open_long_running": load.long_running(api),
    }


def p2_trainjob(cluster: Any, api: Any, n: int, window: float, settle: float, control: float) -> dict:
    """P2's figures for ``n`` waits on TrainJobs, once every TrainJob is acknowledged and its launcher runs (or the
    nodes are full) and none changed for a while."""
    from airflow_mpi.jobspec.kinds import API_TRAINJOB
    from benchmarks.waits import measure

    load.ensure_namespace(api, NAMESPACE)
    cluster.set_launcher_logs(
        NAMESPACE, [f"line {i}" for i in range(20)], containers=(tj.LAUNCHER_CONTAINER,)
    )
    names = [f"p2-{i:04d}" for i in range(n)]
    start = time.time()
    tj.create(api, NAMESPACE, names)
    acknowledged, running = tj.settled(api, NAMESPACE, n)
    settled_s = time.time() - start
    print(
        f"P2 N={n} {TRAINJOB_WAIT}: {acknowledged} acknowledged, {running} launchers running "
        f"({tj.capacity(cluster.nodes)} fit on {cluster.nodes} nodes), "
        f"settled {settled_s:.0f} s after the first create",
        flush=True,
    )
    quiet = idle_window(api, control) if control else None
    result = measure(
        cluster, api, "provider", NAMESPACE, names, True, window, settle, api_version=API_TRAINJOB
    )
    result.update(
        {
            "running": running,
            "acknowledged": acknowledged,
            "settled_s": settled_s,
            "capacity": tj.capacity(cluster.nodes),
            **({"control": quiet} if quiet else {}),
        }
    )
    return result


def run_entry(cluster: Any, api: Any, n: int, args: argparse.Namespace, entry: dict) -> dict:
    """P2 on TrainJobs at ``n``, then (unless --no-baseline) plain P2 of this provider on MPIJobs at ``n`` on the
    same cluster, into ``entry`` (when, where, how: benchmarks/waits.py). Both namespaces are kept, growing with the
    next N (run the sizes in increasing order)."""
    from benchmarks.waits import p2

    entry = {
        **entry,
        "nodes": cluster.nodes,
        TRAINJOB_WAIT: p2_trainjob(cluster, api, n, args.window, args.settle, args.control),
    }
    if not args.no_baseline:
        entry.update(p2(cluster, api, n, args.window, args.settle, ("provider",)))
    return entry


# ---------------------------------------------------------------------- the report


def target_rows(results: dict) -> list[str]:
    """The rows of "Against the targets" for TrainJobs, from the largest N measured: watches and reads."""
    entries = results.get("p2_trainjob") or {}
    if not entries:
        return []
    n = max(entries, key=int)
    r = entries[n][TRAINJOB_WAIT]
    watches = ", ".join(
        f"{k}: {v:.0f}" for k, v in sorted(r["open_long_running"].items()) if k.startswith("WATCH")
    )
    reads = r["requests_per_job_hour"]
    return [
        f"| O(1) watches per namespace, TrainJobs | {watches} at N={n} | met |",
        f"| O(1) API reads per job per hour, TrainJobs | {reads:.1f} at N={n} | {'met' if reads < 5 else 'not met'} |",
    ]


def _owner_checks(r: dict) -> str:
    """The hub's checks of the objects between a job and its pods since it started (a TrainJob's: 3 GETs each)."""
    hubs = r.get("hubs") or []
    return " / ".join(str(hub["stats"].get("launcher_job_checks", 0)) for hub in hubs) or "-"


def _control(r: dict) -> str:
    quiet = r.get("control")
    if not quiet:
        return "-"
    reads = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(quiet["requests"].items())) or "none"
    return f"{reads} in {quiet['seconds']:.0f} s"


TRAINJOB_ROWS = (
    (
        "TrainJobs acknowledged / launchers running / fit on the nodes",
        lambda r: f"{r['acknowledged']} / {r['running']} / {r['capacity']}" if "acknowledged" in r else "-",
    ),
    ("settled after the first create, s", lambda r: f"{r['settled_s']:.0f}" if "settled_s" in r else "-"),
    (
        "the hub's owner-chain checks since it started (3 GETs each for a TrainJob, 1 for an MPIJob)",
        _owner_checks,
    ),
    ("namespace-scoped reads with no waiting process, before the waits (the controllers')", _control),
)


def columns(results: dict) -> list[tuple[str, dict]]:
    """The table's columns: TrainJobs at each N, each followed by MPIJobs on the same cluster right after, then the
    P2 table's MPIJobs at the largest N."""
    entries = results.get("p2_trainjob") or {}
    out = []
    for n in sorted(entries, key=int):
        r = entries[n][TRAINJOB_WAIT]
        out.append((f"TrainJob, N={n} ({r['running']} running)", r))
        if same := entries[n].get(MPIJOB_WAIT):
            out.append((f"MPIJob, N={n}, same cluster, right after ({same.get('running', n)} running)", same))
    largest = max(entries, key=int, default=None)
    if largest and (earlier := (results.get("p2") or {}).get(largest, {}).get(MPIJOB_WAIT)):
        out.append(
            (f"MPIJob, N={largest}, the P2 table above ({earlier.get('running', largest)} running)", earlier)
        )
    return out


def section(results: dict, png: str) -> list[str]:
    """The section "P2 on TrainJobs" (nothing without TrainJob results): how each N ran, then one table."""
    from benchmarks.waits_report import P2_ROWS

    entries = results.get("p2_trainjob") or {}
    if not entries:
        return []
    cols = columns(results)
    window = next(iter(entries.values()))["window"]
    lines = [
        f"## P2 on TrainJobs: N waits on Kubeflow Trainer v2 TrainJobs beside MPIJobs, nothing changing "
        f"({window:.0f} s window)",
        "",
        "The local cluster with the real Trainer v2.3.0 and JobSet v0.12.0 controllers added beside the mpi-operator "
        "(as the tests add them) and the ClusterTrainingRuntime `openmpi-mpiuser` applied. Each TrainJob: one node "
        "pod and the launcher, which kwok keeps running (a `runtimePatches` entry labels the launcher's pod "
        "template); the waits: this provider's trigger, logs on, as in P2, in one process. Each run:",
        "",
    ]
    for n in sorted(entries, key=int):
        e = entries[n]
        lines.append(
            f"- N={n}: {e['date']} at {e['commit']} on {e['machine']}; load average at the start {e['load']}; "
            f"{e['nodes']} simulated nodes of 110 pods; `{e['command']}` (settle {e['settle']:.0f} s)."
        )
    lines += [
        "",
        "| | " + " | ".join(title for title, _ in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for label, cell in (*P2_ROWS, *TRAINJOB_ROWS):
        lines.append(f"| {label} | " + " | ".join(_cell(cell, r) for _, r in cols) + " |")
    lines += ["", f"![P2 on TrainJobs]({png})", ""]
    for n in sorted(entries, key=int):
        lines += [f"- {note}" for note in entries[n].get("notes") or []]
    return lines + [""] * any(entries[n].get("notes") for n in entries)


def _cell(cell: Any, r: dict) -> str:
    try:
        return cell(r)
    except KeyError:  # a figure the older run did not record
        return "-"


def plot(results: dict, png: Path) -> None:
    """CPU, peak RSS and reads per job and hour by N: TrainJobs and the MPIJobs of the same runs."""
    from benchmarks.waits_report import plot_by_n

    entries = results.get("p2_trainjob") or {}
    if not entries:
        return
    kinds = ((TRAINJOB_WAIT, "TrainJob"), (MPIJOB_WAIT, "MPIJob, same cluster, right after"))
    by_n = {n: {title: e[label] for label, title in kinds if label in e} for n, e in entries.items()}
    last = entries[max(entries, key=int)]["date"]
    # "shared" only when other work used the machine: its busy cores in the windows, the waiting process's included
    busy = max((r.get("machine_cpu_per_min") or 0 for e in by_n.values() for r in e.values()), default=0)
    machine = (
        "shared 2-core machine" if busy > 60 else f"2-core machine, at most {busy:.0f} of 120 CPU s/min busy"
    )
    plot_by_n(by_n, f"N waits on TrainJobs and MPIJobs, nothing changing ({last}, {machine})", png)
