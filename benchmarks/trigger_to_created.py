"""From trigger to ``Created`` (issue 36): how long after a run of ``mpi_pi`` is triggered its MPIJob exists and the
mpi-operator reports it ``Created``, on a running compose stack, with whichever executor the stack runs (the
KubernetesExecutor adds a pod per task try: scheduling, a container start, Airflow's imports and the DAG's parse).

    python -m benchmarks.trigger_to_created --project airflow-mpi --port 8080 --runs 5 --label LocalExecutor

Runs one at a time (each to its end), the node otherwise idle. Times are the cluster's (the MPIJob's
creationTimestamp and its condition's lastTransitionTime, one-second resolution) against the trigger's POST on this
machine's clock, which the local stack shares. Prints one JSON line per run and the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from airflowstack import AirflowClient  # noqa: E402
from tests.compose.conftest import NODE_KUBECONFIG  # noqa: E402
from tests.compose.kube_watch import KubeWatch, event_of_run  # noqa: E402

DAG = "mpi_pi"


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def one_run(client: AirflowClient, watch: KubeWatch) -> dict:
    triggered = time.time()
    run_id = client.trigger(DAG, {"workers": 2})["dag_run_id"]

    ours = event_of_run(run_id)

    def created(e: dict) -> bool:
        conditions = (e["object"].get("status") or {}).get("conditions") or []
        return ours(e) and any(c["type"] == "Created" and c["status"] == "True" for c in conditions)

    job = watch.wait(created, 300, f"the MPIJob of {run_id} Created")["object"]
    condition = next(c for c in job["status"]["conditions"] if c["type"] == "Created")
    state = client.wait_run(DAG, run_id, timeout=300)["state"]
    return {
        "run_id": run_id,
        "state": state,
        "to_job": round(_seconds(job["metadata"]["creationTimestamp"]) - triggered, 1),
        "to_created": round(_seconds(condition["lastTransitionTime"]) - triggered, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", required=True, help="the compose project (docker compose -p)")
    parser.add_argument("--port", type=int, default=8080, help="the stack's UI port")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--label", required=True, help="what the stack runs (the executor), for the report")
    args = parser.parse_args(argv)
    client = AirflowClient(f"http://127.0.0.1:{args.port}", "admin", "admin")
    client.login()
    results = []
    with KubeWatch(args.project, NODE_KUBECONFIG, "mpijobs.kubeflow.org") as watch:
        for _ in range(args.runs):
            results.append(one_run(client, watch))
            print(json.dumps({"label": args.label, **results[-1]}), flush=True)
    ok = [r for r in results if r["state"] == "success"]
    print(
        json.dumps(
            {
                "label": args.label,
                "runs": len(results),
                "succeeded": len(ok),
                "median_to_job": statistics.median(r["to_job"] for r in results),
                "median_to_created": statistics.median(r["to_created"] for r in results),
            }
        )
    )


if __name__ == "__main__":
    main()
