"""Example DAG ``mpi_function``: a Python function on every MPI rank with ``@task.mpi`` (mpi4py reduction)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.providers.common.compat.sdk import DAG, Param, task

MPI_IMPLEMENTATIONS = ["OpenMPI", "MPICH"]
# images/mpi's images have python3 and mpi4py (built for their MPI); the local node has no registry to pull from.
DEFAULT_IMAGE = os.environ.get("AIRFLOW_MPI_PYTHON_IMAGE", "airflow-mpi/mpi-pi:openmpi")

DOC = """
### A Python function on every MPI rank

`numbers` makes the input (1..count); `sum_of_squares` is a plain Python function decorated with
`@task.mpi`: the provider sends its source and its argument (the upstream XCom) in a Secret made with the
MPIJob and mounted into its pods, `mpirun` starts it on `workers x slots_per_worker` ranks, each squares
its share of the numbers and mpi4py reduces the partial sums onto rank 0. Rank 0's return value is the
task's XCom (the other ranks' are ignored); `check` compares it with the closed form `n(n+1)(2n+1)/6` and
the ranks' count.

**Parameters** (trigger form): **count** of numbers, **workers**, **slots per worker**, the **image**
(python3 + mpi4py: `airflow-mpi/mpi-pi:openmpi` or `:mpich`) and its **MPI implementation**.

The launcher's log, every line tagged with its rank, streams into the `sum_of_squares` task's log.
"""

with DAG(
    dag_id="mpi_function",
    description="A Python function on every MPI rank: @task.mpi with an mpi4py reduction",
    doc_md=DOC,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    render_template_as_native_obj=True,  # integer Params stay integers
    tags=["example", "mpi"],
    params={
        "count": Param(
            1000,
            type="integer",
            minimum=1,
            maximum=10_000_000,
            title="Count",
            description="How many numbers (1..count) the ranks share.",
        ),
        "workers": Param(
            2, type="integer", minimum=1, maximum=16, title="Workers", description="Worker pods."
        ),
        "slots_per_worker": Param(
            2,
            type="integer",
            minimum=1,
            maximum=8,
            title="Slots per worker",
            description="MPI ranks per worker pod; the function runs on workers x slots ranks.",
        ),
        "image": Param(
            DEFAULT_IMAGE,
            type="string",
            minLength=1,
            title="Image",
            description="Image of launcher and workers, with python3 and mpi4py built for its MPI.",
        ),
        "mpi_implementation": Param(
            "OpenMPI",
            type="string",
            enum=MPI_IMPLEMENTATIONS,
            title="MPI implementation",
            description="The image's MPI (the mpirun flavour and the MPIJob's mpiImplementation).",
        ),
    },
) as dag:

    @task
    def numbers(params: dict | None = None) -> list[int]:
        """The input: 1..count (an XCom the MPI function receives as its argument)."""
        return list(range(1, int(params["count"]) + 1))

    @task.mpi(
        image="{{ params.image }}",
        workers="{{ params.workers }}",
        slots_per_worker="{{ params.slots_per_worker }}",
        mpi_implementation="{{ params.mpi_implementation }}",
        launcher_resources={"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        worker_resources={"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        poll_interval=5,
    )
    def sum_of_squares(values: list[int]) -> dict | None:
        """Runs on every rank: a share of the squares each, summed onto rank 0 by mpi4py."""
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        share = values[rank::size]
        partial = sum(v * v for v in share)
        print(
            f"rank {rank} of {size} on {MPI.Get_processor_name()}: {len(share)} numbers, partial sum {partial}"
        )
        total = comm.reduce(partial, op=MPI.SUM, root=0)
        sum_of_ranks = comm.reduce(rank, op=MPI.SUM, root=0)
        if rank == 0:
            return {"sum_of_squares": total, "ranks": size, "sum_of_ranks": sum_of_ranks}
        return None  # ignored: only rank 0's value becomes the XCom

    @task
    def check(result: dict, params: dict | None = None) -> int:
        """Compare rank 0's value with the closed forms."""
        n, ranks = int(params["count"]), result["ranks"]
        expected = n * (n + 1) * (2 * n + 1) // 6
        if result["sum_of_squares"] != expected or result["sum_of_ranks"] != ranks * (ranks - 1) // 2:
            raise ValueError(f"{result} is wrong: expected sum of squares {expected} over {ranks} ranks")
        print(f"{ranks} ranks summed the squares of 1..{n}: {expected}")
        return expected

    check(sum_of_squares(numbers()))
