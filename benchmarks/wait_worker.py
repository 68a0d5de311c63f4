"""One process running N waits at once, as a triggerer does (started by benchmarks/waits.py).

Appends JSON lines to ``--out`` (stdout is the waits' own log, as a triggerer's): ``{"started": t}`` once
every wait runs, ``{"event": name, "t": ..., "status": ...}`` per finished wait, ``{"lag_ms": [...],
"lag_samples": [[t, ms], ...], "lines": {...}, "hubs": [...]}`` at the end (event-loop lag samples, sorted,
and as taken; P3 line counts; this provider's watch hubs: what they listed and watched).

    python -m benchmarks.wait_worker --side provider|peer --namespace NS --names a,b --kubeconfig K
        --out FILE [--logs] [--seconds S] [--collect-lines] [--api-version trainer.kubeflow.org/v1alpha1]

With ``BENCH_TRACEMALLOC=FILE`` in the environment, the Python allocations alive at the end of the window
(where the steady state's memory goes) are written to FILE, largest first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import tracemalloc
from collections import Counter
from datetime import UTC, datetime

_OUT: list = []


def _print(obj: dict) -> None:
    _OUT[0].write(json.dumps(obj) + "\n")
    _OUT[0].flush()


def provider_wait(args, name: str, collected: Counter | None):
    from airflow_mpi.triggers import MPIJobTrigger
    from airflow_mpi.wait.contract import WaitOptions

    trigger = MPIJobTrigger(
        name=name,
        namespace=args.namespace,
        kubernetes_conn_id=None,
        connection={"config_file": args.kubeconfig},
        **({"api_version": args.api_version} if args.api_version else {}),
        submitted_at=datetime.now(UTC).isoformat(),
        options=WaitOptions(
            get_logs=args.logs, startup_timeout=None, schedule_timeout=None, poll_interval=10.0
        ),
    )
    if collected is None:
        return trigger.run()
    return _monitored(args, name, collected)


async def _monitored(args, name: str, collected: Counter):
    """P3: the trigger's monitor with every launcher line counted (the trigger logs them through structlog)."""
    from airflow_mpi.hooks import AsyncMPIJobHook
    from airflow_mpi.version_compat import TriggerEvent
    from airflow_mpi.wait.monitor import JobMonitor

    def count(message: str) -> None:
        if message.startswith("line "):
            collected[message] += 1

    async with AsyncMPIJobHook(conn_id=None, config_file=args.kubeconfig) as hook:
        payload = await JobMonitor(
            hook, name, args.namespace, emit=count, submitted_at=datetime.now(UTC), poll_interval=10.0
        ).run()
    yield TriggerEvent(payload.to_event())


def peer_wait(args, name: str):
    from airflow.providers.cncf.kubernetes.triggers.job import KubernetesJobTrigger

    trigger = KubernetesJobTrigger(
        job_name=name,
        job_namespace=args.namespace,
        pod_names=[],
        pod_namespace=args.namespace,
        base_container_name="base",
        kubernetes_conn_id=None,
        config_file=args.kubeconfig,
        poll_interval=10.0,
        get_logs=False,
        do_xcom_push=False,
    )
    return trigger.run()


async def _one(args, name: str, collected: Counter | None) -> None:
    events = provider_wait(args, name, collected) if args.side == "provider" else peer_wait(args, name)
    try:
        async for event in events:
            _print({"event": name, "t": time.time(), "status": event.payload.get("status")})
            return
    except Exception as err:
        _print({"error": name, "t": time.time(), "message": f"{type(err).__name__}: {err}"[:2000]})
        raise


async def _lag(samples: list[float], at: list[float]) -> None:
    """Event-loop lag samples (ms) and when each was taken (wall clock, to pick a window's)."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(0.1)
        samples.append((loop.time() - start - 0.1) * 1000)
        at.append(time.time())


async def main(args) -> None:
    collected: Counter | None = Counter() if args.collect_lines else None
    lag: list[float] = []
    lag_at: list[float] = []
    lag_task = asyncio.create_task(_lag(lag, lag_at))
    waits = [asyncio.create_task(_one(args, name, collected)) for name in args.names.split(",")]
    await asyncio.sleep(0)
    _print({"started": time.time()})
    done, pending = await asyncio.wait(waits, timeout=args.seconds)
    hubs = (
        _hub_stats() if args.side == "provider" else None
    )  # before the waits leave (the last one closes a hub)
    if os.environ.get("BENCH_TRACEMALLOC"):
        _dump_allocations(os.environ["BENCH_TRACEMALLOC"])
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    lag_task.cancel()
    lines = (
        {
            "distinct": len(collected),
            "total": sum(collected.values()),
            "doubled": sum(1 for c in collected.values() if c > 1),
        }
        if collected is not None
        else None
    )
    _print(
        {
            "lag_ms": sorted(lag),
            "lag_samples": [[round(t, 3), round(ms, 3)] for t, ms in zip(lag_at, lag)],
            "lines": lines,
            "finished": len(done),
            "hubs": hubs,
        }
    )


def _hub_stats() -> list[dict]:
    """What each watch hub of this process asked of the API server since it started: lists, watches (a renewal
    counts again), re-lists after 410 Gone, events and bookmarks by kind, and the jobs it cached."""
    from airflow_mpi.wait import watch_hub

    return [
        {
            "namespace": hub.namespace,
            "jobs": len(hub.jobs),
            "pods": len(hub.pods),
            "workloads": len(hub.workloads),
            "stats": dict(sorted(hub.stats.items())),
        }
        for hub in watch_hub.hubs()
    ]


def _dump_allocations(path: str, top: int = 40) -> None:
    """The live allocations by the line that made them, largest first (before the waits are torn down)."""
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    with open(path, "w") as out:
        out.write(
            f"live Python allocations: {total / 2**20:.1f} MiB in {sum(s.count for s in stats)} blocks\n"
        )
        for stat in stats[:top]:
            frame = stat.traceback[0]
            out.write(
                f"{stat.size / 2**20:8.2f} MiB {stat.count:8d} blocks  {frame.filename}:{frame.lineno}\n"
            )


if __name__ == "__main__":
    if os.environ.get("BENCH_TRACEMALLOC"):
        tracemalloc.start()
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", choices=("provider", "peer"), required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--names", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--logs", action="store_true")
    parser.add_argument("--seconds", type=float, default=600.0, help="stop waiting after this long")
    parser.add_argument("--collect-lines", action="store_true")
    parser.add_argument(
        "--api-version", help="provider: the jobs' kind's (default the MPIJob's, kubeflow.org/v2beta1)"
    )
    parser.add_argument("--out", required=True)
    arguments = parser.parse_args()
    _OUT.append(open(arguments.out, "a", buffering=1))  # noqa: SIM115 (written until the process ends)
    asyncio.run(main(arguments))
