"""Example DAG ``mpi_pi_queued``: several MPI pi jobs at once through a Kueue queue that admits only some of them."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_mpi.operators import MPIJobOperator

DEFAULT_IMAGE = os.environ.get("AIRFLOW_MPI_PI_IMAGE", "mpioperator/mpi-pi:openmpi")
LAUNCHER_CPU_MILLICORES = 200

DOC = f"""
### MPI pi through Kueue

Starts **jobs** MPI pi jobs at once (one mapped `pi` task each), all labelled for the
[Kueue](https://kueue.sigs.k8s.io) LocalQueue **queue_name**. Kueue admits a job only while its
ClusterQueue has quota left for the requests of all its pods, and keeps the others suspended (no pods)
until an admitted job finishes. The task log says so while it waits, then when the job is admitted:

    MPIJob pi-... is queued by Kueue in LocalQueue user-queue: couldn't assign flavors to pod set launcher:
    insufficient unused quota for cpu in flavor default-flavor, ...
    MPIJob pi-... was admitted by Kueue: ClusterQueue cluster-queue, flavor default-flavor after 12s in the queue

**Requests** of one job: the launcher {LAUNCHER_CPU_MILLICORES}m cpu, each of the **workers** **worker_cpu_millicores**.
With the defaults (3 jobs of 200m + 2 x 300m = 800m) the local stack's ClusterQueue `cluster-queue`
(cpu 2; docker-compose.yaml) admits two jobs, 1.6 cpu, which its 2-core node runs side by side, and queues the
third: the quota, not the node, holds it back. Each job holds its quota **hold_seconds** (30 s) before its
ranks sample their **samples**: every rank sleeps that long (no CPU used), long enough for the third job to find the
first two still running.

**queue_timeout** (seconds, 0: none) fails a task whose job waited longer than that in the queue.
Once admitted, each job runs as `mpi_pi`'s does, once: its launcher waits for its workers (see docs/kueue.md,
"Running under Kueue").

**Needs** Kueue with a LocalQueue of that name in the connection's namespace (docker-compose.yaml's
cluster has `user-queue` in `default`) and the mpi-operator (`kubeflow.org/v2beta1`); the role of
deploy/rbac.yaml (list/watch on `workloads.kueue.x-k8s.io`) lets the task log say why a job waits.
"""

with DAG(
    dag_id="mpi_pi_queued",
    description="MPI pi jobs through a Kueue queue: some admitted, the rest queued until quota frees up",
    doc_md=DOC,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    render_template_as_native_obj=True,  # integer Params stay integers in the operator
    tags=["example", "mpi", "kueue"],
    params={
        "queue_name": Param(
            "user-queue",
            type="string",
            minLength=1,
            maxLength=63,
            pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            title="Queue name",
            description="Kueue LocalQueue in the connection's namespace (label kueue.x-k8s.io/queue-name).",
        ),
        "jobs": Param(
            3,
            type="integer",
            minimum=1,
            maximum=8,
            title="Jobs",
            description="MPIJobs submitted at once, one mapped pi task each.",
        ),
        "workers": Param(
            2,
            type="integer",
            minimum=1,
            maximum=4,
            title="Workers per job",
            description="Worker pods of each MPIJob (one MPI rank each).",
        ),
        "worker_cpu_millicores": Param(
            300,
            type="integer",
            minimum=50,
            maximum=2000,
            title="Worker CPU request (millicores)",
            description=f"What Kueue counts against the ClusterQueue's cpu quota, with the launcher's "
            f"{LAUNCHER_CPU_MILLICORES}m (and what the scheduler fits on the node).",
        ),
        "samples": Param(
            2_000_000,
            type="integer",
            minimum=1000,
            maximum=100_000_000_000,
            title="Samples per rank",
            description="Random points each rank draws.",
        ),
        "hold_seconds": Param(
            30,
            type="integer",
            minimum=0,
            maximum=3600,
            title="Hold (seconds)",
            description="How long every rank sleeps before it samples: how long each job keeps its quota "
            "without using CPU.",
        ),
        "queue_timeout": Param(
            0,
            type="integer",
            minimum=0,
            maximum=86_400,
            title="Queue timeout (seconds)",
            description="Fail a task whose job waited longer than this in the queue (0: wait as long as it takes).",
        ),
        "image": Param(
            DEFAULT_IMAGE,
            type="string",
            minLength=1,
            title="Image",
            description="Open MPI image with /home/mpiuser/pi (launcher and workers).",
        ),
    },
) as dag:

    @task
    def job_names(params: dict | None = None) -> list[str]:
        """One name prefix per job (the task instance's hash is appended): the jobs the pi task maps over."""
        return [f"pi-{i}" for i in range(1, params["jobs"] + 1)]

    pi = MPIJobOperator.partial(
        task_id="pi",
        image="{{ params.image }}",
        program="/home/mpiuser/pi {{ params.samples }} {{ params.hold_seconds }}",
        workers="{{ params.workers }}",
        queue_name="{{ params.queue_name }}",
        queue_timeout="{{ params.queue_timeout or None }}",
        # requests only for cpu (what Kueue's quota and the scheduler count), a memory limit against runaways
        launcher_resources={
            "requests": {"cpu": f"{LAUNCHER_CPU_MILLICORES}m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        worker_resources={
            "requests": {"cpu": "{{ params.worker_cpu_millicores }}m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        poll_interval=5,
    ).expand(name=job_names())

    @task
    def report(jobs: list[dict]) -> list[dict]:
        """How each job ended and how long it ran once admitted (from the pi tasks' XComs)."""
        parse = lambda s: datetime.fromisoformat(str(s).replace("Z", "+00:00"))  # noqa: E731
        out = []
        for job in jobs:
            started, finished = job.get("start_time"), job.get("completion_time")
            seconds = (parse(finished) - parse(started)).total_seconds() if started and finished else None
            out.append(
                {
                    "job": f"{job['namespace']}/{job['name']}",
                    "condition": job.get("condition"),
                    "seconds": seconds,
                    "launcher_attempts": job.get("launcher_attempts"),
                }
            )
            print(
                f"MPIJob {out[-1]['job']} ended {out[-1]['condition']} after {seconds} s "
                f"({out[-1]['launcher_attempts']} launcher attempt(s))"
            )
        return out

    report(pi.output)
