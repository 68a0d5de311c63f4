"""Example DAG ``trainjob_pi``: estimate pi with real MPI ranks on a Kubeflow Trainer v2 TrainJob."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_mpi.operators import TrainJobOperator

# The runtime deploy/trainjob-mpi-runtime.yaml installs (`kubectl apply -f deploy/trainjob-mpi-runtime.yaml`): its
# launcher and node pods run the image it names (airflow-mpi/mpi-pi:openmpi), so the task sets no image.
DEFAULT_RUNTIME = "openmpi-mpiuser"
OBJECT_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a Kubernetes object name (RFC 1123 subdomain)
WORKERS_DOC = "Node pods of the TrainJob (trainer.numNodes); each runs sshd for mpirun."
SLOTS_DOC = "MPI ranks per node pod (trainer.numProcPerNode); mpirun starts workers x slots ranks."


DOC = """
### MPI pi on a TrainJob

Runs the **pi** MPI program as a Kubeflow Trainer v2 `TrainJob` (`trainer.kubeflow.org/v1alpha1`) of the
runtime **openmpi-mpiuser**: the Trainer makes a JobSet of **workers** node pods running sshd and one launcher
pod running `mpirun -np <workers x slots> /home/mpiuser/pi`, every rank samples random points, and rank 0
prints the estimate (`pi is approximately 3.14...`). The runtime names the image of both (the project's
Open MPI pi image in openmpi-mpiuser). The launcher's log streams into the `pi` task's log while the job runs.

**Parameters** (trigger form): number of **workers** (the TrainJob's `trainer.numNodes`: node pods), **slots per
worker** (`trainer.numProcPerNode`: MPI ranks per node pod), **deferrable** (wait in the triggerer instead of
holding a worker slot) and the **runtime** (a ClusterTrainingRuntime with an MPI policy).

**Result**: `pi` returns the job summary (XCom); `report` reads it and logs how the TrainJob ended.

**Connection**: `kubernetes_default` (kubeconfig path or in-cluster; its `namespace` extra is used).
Requires Kubeflow Trainer v2 (tested with v2.3.0, JobSet v0.12.0) on the cluster and the runtime:
`kubectl apply -f deploy/trainjob-mpi-runtime.yaml` (Open MPI only: Trainer v2.3.0 refuses Intel MPI and MPICH).
MPIJob or TrainJob: README.md; the mapping of parameters: docs/kubeflow-trainer.md.
"""

with DAG(
    dag_id="trainjob_pi",
    description="Estimate pi with mpirun on a Kubeflow Trainer v2 TrainJob",
    doc_md=DOC,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    render_template_as_native_obj=True,  # integer/boolean Params stay integers/booleans in the operator
    tags=["example", "mpi", "trainjob"],
    params={
        # the TrainJob's trainer.numNodes and trainer.numProcPerNode
        "workers": Param(2, type="integer", minimum=1, maximum=16, title="Workers", description=WORKERS_DOC),
        "slots_per_worker": Param(
            1, type="integer", minimum=1, maximum=8, title="Slots per worker", description=SLOTS_DOC
        ),
        "deferrable": Param(
            False,
            type="boolean",
            title="Deferrable",
            description="Wait for the TrainJob in the triggerer instead of holding a worker slot.",
        ),
        "runtime": Param(
            DEFAULT_RUNTIME,
            type="string",
            pattern=OBJECT_NAME,
            title="Runtime",
            description="The ClusterTrainingRuntime the TrainJob names (spec.runtimeRef): an Open MPI runtime "
            "such as openmpi-mpiuser (deploy/trainjob-mpi-runtime.yaml).",
        ),
    },
) as dag:
    pi = TrainJobOperator(
        task_id="pi",
        runtime="{{ params.runtime }}",
        # no image: launcher and node pods run the runtime's (trainer.image would change the launcher's only)
        # the launcher runs mpirun with this program; the hostfile (one line a node pod, numProcPerNode slots
        # each) comes from the Trainer's MPI plugin
        program=["/home/mpiuser/pi"],
        workers="{{ params.workers }}",
        slots_per_worker="{{ params.slots_per_worker }}",
        deferrable="{{ params.deferrable }}",  # templated like every setting of how the task waits
        # no worker_resources: Trainer v2.3.0 applies trainer.resourcesPerNode to the launcher's container only
        # (the trainer step), so the node pods' requests are the runtime's (docs/kubeflow-trainer.md)
        poll_interval=5,
    )

    @task
    def report(job: dict) -> str:
        """One line on how the TrainJob ended, from the ``pi`` task's XCom."""
        line = (
            f"TrainJob {job.get('namespace')}/{job.get('name')} ended {job.get('condition')} "
            f"(started {job.get('start_time')}, finished {job.get('completion_time')})"
        )
        print(line)
        return line

    report(pi.output)
