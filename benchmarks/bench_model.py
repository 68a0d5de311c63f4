"""Throughput of the hot pure paths, with targets (run: .venv/bin/python benchmarks/bench_model.py).

* build_manifest (validation included) runs at DAG parse time for every MPIJob task and once per
  try: target < 2 ms per manifest, so a DAG file with 100 MPIJob tasks parses in well under a second.
* LogCursor de-duplication sits on every launcher log line: target > 200,000 lines/s, so a chatty
  launcher (10,000 lines/s) costs the worker or triggerer < 5 % of a core.
Exits non-zero when a target is missed.
"""

from __future__ import annotations

import sys
import timeit

from airflow_mpi.jobspec import MPIJobSpec, ReplicaSpec, RunPolicy, build_manifest
from airflow_mpi.wait.logs import LogCursor

MANIFEST_TARGET_MS = 2.0
LOG_TARGET_LINES_PER_S = 200_000


def _spec() -> MPIJobSpec:
    return MPIJobSpec(
        name="bench-pi-0123abcd",
        namespace="mpi",
        launcher=ReplicaSpec(
            replicas=1,
            image="mpi:1",
            command=["mpirun", "-np", "16", "/pi"],
            resources={"requests": {"cpu": "500m", "memory": "1Gi"}},
        ),
        worker=ReplicaSpec(
            replicas=8,
            image="mpi:1",
            gpus=2,
            env={"NCCL_DEBUG": "INFO"},
            resources={"requests": {"cpu": "8", "memory": "64Gi"}},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        slots_per_worker=2,
        run_policy=RunPolicy(backoff_limit=3, clean_pod_policy="Running"),
        labels={"team": "hpc"},
    )


def bench_manifest() -> float:
    spec = _spec()
    runs = 2000
    return timeit.timeit(lambda: build_manifest(spec), number=runs) / runs * 1000


def bench_logs() -> float:
    lines = [
        f"2026-11-22T10:{i // 6000 % 60:02d}:{i // 100 % 60:02d}.{i % 100:09d}Z step {i} loss 0.{i}"
        for i in range(100_000)
    ]
    cursor = LogCursor()

    def once() -> None:
        log_pass = cursor.new_pass("pod/launcher/0")
        for raw in lines:
            log_pass.accept(raw)

    seconds = timeit.timeit(once, number=1)
    return len(lines) / seconds


def main() -> int:
    ms = bench_manifest()
    rate = bench_logs()
    print(f"build_manifest: {ms:.3f} ms/manifest (target < {MANIFEST_TARGET_MS} ms)")
    print(f"LogCursor: {rate:,.0f} lines/s (target > {LOG_TARGET_LINES_PER_S:,})")
    return 0 if ms < MANIFEST_TARGET_MS and rate > LOG_TARGET_LINES_PER_S else 1


if __name__ == "__main__":
    sys.exit(main())
