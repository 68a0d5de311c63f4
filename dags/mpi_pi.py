"""Example DAG ``mpi_pi``: estimate pi with an MPI program on a Kubeflow MPIJob."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_mpi.operators import MPIJobOperator

MPI_IMPLEMENTATIONS = ["OpenMPI", "Intel", "MPICH"]
# The image the form proposes: the mpi-operator's published pi image, or (docker-compose.yaml, scripts/demo)
# the locally built equivalent from images/mpi, since the local node has no registry to pull from.
DEFAULT_IMAGE = os.environ.get("AIRFLOW_MPI_PI_IMAGE", "mpioperator/mpi-pi:openmpi")


DOC = """
### MPI pi

Runs the Kubeflow mpi-operator's **pi** example as an `MPIJob`: the launcher starts
`mpirun -np <workers x slots_per_worker> /home/mpiuser/pi`, every rank samples random points,
and rank 0 prints the estimate (`pi is approximately 3.14...`). The launcher's log streams into
the `pi` task's log while the job runs.

**Parameters** (trigger form): number of **workers**, **slots per worker** (MPI processes per
worker pod), the **image** (`mpioperator/mpi-pi:openmpi`, `:intel` or `:mpich`, matching the
**MPI implementation**; the local stack builds `airflow-mpi/mpi-pi:openmpi` and `:mpich`), and
**deferrable** (wait in the triggerer instead of holding a worker slot), **samples** per rank and
**hold_seconds**: how long every rank sleeps after its first line, so that the job stays running without
using CPU (to try marking the task failed, or a retry; the images of this project's images/mpi honour it,
upstream's `mpioperator/mpi-pi` ignores it).

**Result**: `pi` returns the job summary (XCom: name, namespace, condition, start/completion
time, launcher pods); `report` reads it and logs how long the job took.

**Connection**: `kubernetes_default` (kubeconfig path or in-cluster; its `namespace` extra is used).
Requires the mpi-operator (`kubeflow.org/v2beta1`) on the cluster.
"""

with DAG(
    dag_id="mpi_pi",
    description="Estimate pi with mpirun on a Kubeflow MPIJob",
    doc_md=DOC,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    render_template_as_native_obj=True,  # integer/boolean Params stay integers/booleans in the operator
    tags=["example", "mpi"],
    params={
        "workers": Param(
            2,
            type="integer",
            minimum=1,
            maximum=16,
            title="Workers",
            description="Worker pods (the MPIJob's Worker replicas).",
        ),
        "slots_per_worker": Param(
            1,
            type="integer",
            minimum=1,
            maximum=8,
            title="Slots per worker",
            description="MPI processes per worker pod; mpirun starts workers x slots processes.",
        ),
        "image": Param(
            DEFAULT_IMAGE,
            type="string",
            minLength=1,
            title="Image",
            description="Image of launcher and workers, with /home/mpiuser/pi built for the chosen MPI "
            "implementation (tags :openmpi, :intel, :mpich).",
        ),
        "mpi_implementation": Param(
            "OpenMPI",
            type="string",
            enum=MPI_IMPLEMENTATIONS,
            title="MPI implementation",
            description="Selects the mpirun flavour and the MPIJob's mpiImplementation.",
        ),
        "samples": Param(
            2_000_000,
            type="integer",
            minimum=1000,
            maximum=100_000_000_000,
            title="Samples per rank",
            description="Random points each rank draws (the pi program's argument): more samples, a closer "
            "estimate and a longer run.",
        ),
        "hold_seconds": Param(
            0,
            type="integer",
            minimum=0,
            maximum=3600,
            title="Hold (seconds)",
            description="How long every rank sleeps after its first line: the job stays running without using "
            "CPU (pi's second argument; upstream's image ignores it).",
        ),
        "deferrable": Param(
            False,
            type="boolean",
            title="Deferrable",
            description="Wait for the job in the triggerer instead of holding a worker slot.",
        ),
    },
) as dag:
    pi = MPIJobOperator(
        task_id="pi",
        image="{{ params.image }}",
        # launcher: mpirun ... -np <workers x slots> /home/mpiuser/pi <samples> <hold seconds> (a shell string: the
        # rendered numbers stay text; upstream's pi image ignores the arguments)
        program="/home/mpiuser/pi {{ params.samples }} {{ params.hold_seconds }}",
        workers="{{ params.workers }}",
        slots_per_worker="{{ params.slots_per_worker }}",
        mpi_implementation="{{ params.mpi_implementation }}",
        deferrable="{{ params.deferrable }}",  # templated like every setting of how the task waits
        # nothing about SSH: the defaults follow the mpi-operator's image conventions (mpiuser runs mpirun, the
        # workers its sshd) and start the launcher once every worker's sshd listens (docs/first-run.md)
        # CPU requests, no CPU limits (a throttled rank holds up every other rank); small enough that the default
        # 2 workers fit a 2-core machine beside the launcher. Quantities as strings that do not look like numbers:
        # templated fields render natively ("1" -> 1)
        launcher_resources={"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        worker_resources={"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        poll_interval=5,
        # a try cut short (its worker process or, with the KubernetesExecutor, its pod killed by the cluster) is
        # retried, and the retry reattaches to the same MPIJob; the job's launcher gets the same one restart
        # (runPolicy.backoffLimit follows retries)
        retries=1,
        retry_delay=timedelta(seconds=30),
    )

    @task
    def report(job: dict) -> dict:
        """Summarise the MPIJob from the ``pi`` task's XCom."""
        started, finished = job.get("start_time"), job.get("completion_time")
        seconds = None
        if started and finished:
            parse = lambda s: datetime.fromisoformat(str(s).replace("Z", "+00:00"))  # noqa: E731
            seconds = (parse(finished) - parse(started)).total_seconds()
        summary = {
            "job": f"{job['namespace']}/{job['name']}",
            "condition": job.get("condition"),
            "seconds": seconds,
            "launcher_attempts": job.get("launcher_attempts"),
        }
        print(
            f"MPIJob {summary['job']} ended {summary['condition']} after {seconds} s "
            f"({summary['launcher_attempts']} launcher attempt(s))"
        )
        return summary

    report(pi.output)
