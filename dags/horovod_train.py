"""Example DAG ``horovod_train``: data-parallel TensorFlow training with horovodrun on a Kubeflow MPIJob."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.providers.common.compat.sdk import DAG, Param

from airflow_mpi.operators import HorovodJobOperator

# images/mpi's `horovod` target (Horovod 0.28.1 with Gloo and Open MPI, TensorFlow 2.12 for CPUs, the training
# program below): `docker build -f images/mpi/Dockerfile --target horovod -t airflow-mpi/horovod:cpu images/mpi`.
DEFAULT_IMAGE = os.environ.get("AIRFLOW_MPI_HOROVOD_IMAGE", "airflow-mpi/horovod:cpu")

DOC = """
### Horovod training

Trains a small Keras model data-parallel with Horovod: the launcher runs
`horovodrun -np <workers x processes per worker> --hostfile /etc/mpi/hostfile python horovod_train.py`, every
rank trains on its own synthetic shard, gradients are averaged with allreduce, and rank 0 prints loss and
accuracy per epoch. With **elastic** on, `horovodrun` follows the workers the mpi-operator's host discovery
script lists (`--min-np 1 --max-np <np>`): training goes on when a worker goes away.

**Parameters** (trigger form): **workers**, **processes per worker** (Horovod ranks per worker pod),
**GPUs per worker** (0 trains on CPUs; with GPUs, one process per GPU is usual), **epochs**, the **image**
(images/mpi's `horovod` target, or any image with Horovod, TensorFlow and `/home/mpiuser/horovod_train.py`),
**elastic** and **deferrable**.

**Cluster**: the mpi-operator (`kubeflow.org/v2beta1`), GPU nodes with the NVIDIA device plugin when GPUs are
asked for; connection `kubernetes_default`.
"""


with DAG(
    dag_id="horovod_train",
    description="Data-parallel TensorFlow training with horovodrun on a Kubeflow MPIJob",
    doc_md=DOC,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["example", "mpi", "horovod"],
    params={
        "workers": Param(
            2,
            type="integer",
            minimum=1,
            maximum=64,
            title="Workers",
            description="Worker pods (the MPIJob's Worker replicas).",
        ),
        "processes_per_worker": Param(
            1,
            type="integer",
            minimum=1,
            maximum=8,
            title="Processes per worker",
            description="Horovod ranks per worker pod (the MPIJob's slotsPerWorker).",
        ),
        "gpus_per_worker": Param(
            0,
            type="integer",
            minimum=0,
            maximum=8,
            title="GPUs per worker",
            description="nvidia.com/gpu limit of each worker pod; 0 trains on CPUs.",
        ),
        "epochs": Param(
            2,
            type="integer",
            minimum=1,
            maximum=100,
            title="Epochs",
            description="Training epochs.",
        ),
        "image": Param(
            DEFAULT_IMAGE,
            type="string",
            minLength=1,
            title="Image",
            description="Image of launcher and workers: Horovod, TensorFlow and /home/mpiuser/horovod_train.py.",
        ),
        "elastic": Param(
            False,
            type="boolean",
            title="Elastic",
            description="Elastic Horovod (--min-np 1, the mpi-operator's host discovery script; needs Gloo).",
        ),
        "deferrable": Param(
            False,
            type="boolean",
            title="Deferrable",
            description="Wait for the job in the triggerer instead of holding a worker slot.",
        ),
    },
) as dag:
    HorovodJobOperator(
        task_id="train",
        image="{{ params.image }}",
        # "--epochs=N" in one item: a lone "{{ params.epochs }}" would render to an int (native rendering)
        program=["python", "/home/mpiuser/horovod_train.py", "--epochs={{ params.epochs }}"],
        workers="{{ params.workers }}",
        slots_per_worker="{{ params.processes_per_worker }}",
        gpus_per_worker="{{ params.gpus_per_worker or None }}",
        min_np="{{ 1 if params.elastic else None }}",
        deferrable="{{ params.deferrable }}",
        launcher_resources={"requests": {"cpu": "100m", "memory": "512Mi"}},
        worker_resources={"requests": {"cpu": "250m", "memory": "1Gi"}},
        log_level="INFO",
        poll_interval=5,
    )
