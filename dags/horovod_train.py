"""Example DAG ``horovod_train``: distributed PyTorch training with Horovod on a Kubeflow MPIJob."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.providers.common.compat.sdk import DAG, Param

from airflow_mpi.operators import HorovodJobOperator

DOC = """
### Horovod training

Trains Horovod's PyTorch MNIST example data-parallel across GPU workers. The launcher runs
`horovodrun -np <workers x GPUs per worker> --slots-per-host <GPUs per worker> ...` with the
mpi-operator's host discovery script; each worker pod gets its GPUs as `nvidia.com/gpu` limits.

**Parameters** (trigger form): **workers**, **GPUs per worker** (also the Horovod processes per
worker), **epochs** and the **image** (one with Horovod and the examples under `/horovod/examples`,
such as `horovod/horovod`).

**Cluster**: GPU nodes with the NVIDIA device plugin and the mpi-operator (`kubeflow.org/v2beta1`);
connection `kubernetes_default`.
"""

with DAG(
    dag_id="horovod_train",
    description="Data-parallel PyTorch training with horovodrun on a Kubeflow MPIJob",
    doc_md=DOC,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["example", "mpi", "horovod"],
    params={
        "workers": Param(
            2, type="integer", minimum=1, maximum=64, title="Workers",
            description="Worker pods (the MPIJob's Worker replicas).",
        ),
        "gpus_per_worker": Param(
            1, type="integer", minimum=1, maximum=8, title="GPUs per worker",
            description="nvidia.com/gpu limit of each worker pod, and Horovod processes (slots) per worker.",
        ),
        "epochs": Param(
            3, type="integer", minimum=1, maximum=100, title="Epochs",
            description="Training epochs of the MNIST example.",
        ),
        "image": Param(
            "horovod/horovod:0.28.1", type="string", minLength=1, title="Image",
            description="Image of launcher and workers: Horovod with PyTorch and the examples in /horovod/examples.",
        ),
    },
) as dag:
    HorovodJobOperator(
        task_id="train",
        image="{{ params.image }}",
        # "--epochs=N" in one item: a lone "{{ params.epochs }}" would render to an int (native rendering)
        program=["python", "/horovod/examples/pytorch/pytorch_mnist.py", "--epochs={{ params.epochs }}"],
        workers="{{ params.workers }}",
        slots_per_worker="{{ params.gpus_per_worker }}",
        gpus_per_worker="{{ params.gpus_per_worker }}",
        launcher_resources={"requests": {"cpu": "500m", "memory": "1Gi"}},
        worker_resources={"requests": {"cpu": "2000m", "memory": "8Gi"}},
        env={"NCCL_DEBUG": "INFO"},
        log_level="INFO",
        poll_interval=10,
    )
