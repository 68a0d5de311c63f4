"""``@task.mpi`` on real MPI ranks: the real node runs launcher and workers of images/mpi (Open MPI, and MPICH
with mpi4py built against it), mpirun starts the decorated function on every rank over SSH.

The task is declared in a DAG as a DAG author writes it (an upstream task's XCom as its argument), rendered as
Airflow renders it (the XCom pulled from the task instance), and run as Airflow runs it (execute, or defer /
trigger / execute_complete).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.models.rank_runner import MARKER
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowFailException, TaskDeferred
from tests.integration.test_operator import ctx, record, run_trigger  # noqa: F401
from tests.integration.test_real_mpi import real_job

try:
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow.decorators import task
    from airflow.models.dag import DAG

WORKERS, SLOTS = 2, 2
UPSTREAM = {"label": "from upstream", "numbers": [3, 4, 5]}


def ranks_report(data: dict, scale: int) -> dict:
    """Every rank: a line of its own, an allreduce over all ranks; the value returned is rank 0's."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    print(f"rank {rank} of {size} got {data['label']}")
    sum_of_ranks = comm.allreduce(rank, op=MPI.SUM)
    return {"rank": rank, "size": size, "sum_of_ranks": sum_of_ranks, "label": data["label"],
            "scaled": [n * scale for n in data["numbers"]]}  # fmt: skip


def fails_on_rank_one(data: dict) -> int:
    """Rank 1 raises while the others wait for it in a collective: MPI_Abort must end them all."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 1:
        raise ValueError(f"rank 1 refuses {data['label']}")
    return comm.allreduce(1)


def decorated(func, namespace: str, flavour: str, upstream_value, decorator: str = "mpi", **kwargs):
    """``@task.<decorator>(...)`` over ``func(<upstream XCom>, ...)`` in a DAG, rendered with that XCom pulled."""
    with DAG("it", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=timezone.utc)) as dag:

        @task
        def upstream():
            return upstream_value

        call_kwargs = kwargs.pop("call_kwargs", {})
        getattr(task, decorator)(
            namespace=namespace, workers=WORKERS, slots_per_worker=SLOTS, **{**real_job(flavour), **kwargs}
        )(func)(upstream(), **call_kwargs)
    op = dag.get_task(func.__name__)
    ti = NS(dag_id="it", task_id=op.task_id, run_id=ctx(op.task_id)["ti"].run_id, map_index=-1, try_number=1,
            xcom_pull=lambda *a, **k: upstream_value, get_relevant_upstream_map_indexes=lambda *a, **k: None)  # fmt: skip
    op.render_template_fields({"ti": ti, "task_instance": ti, "expanded_ti_count": None})
    return op


def run(op, deferrable: bool):
    if not deferrable:
        return op.execute(ctx(op.task_id))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx(op.task_id))
    event = run_trigger(MPIJobTrigger(**deferred.value.trigger.serialize()[1]))  # as the triggerer rebuilds it
    return op.execute_complete(ctx(op.task_id), event)


@pytest.mark.parametrize(
    ("flavour", "deferrable"), [("openmpi", False), ("mpich", True)]
)
def test_rank_zeros_value_is_the_xcom_with_the_upstream_argument_on_every_rank(
    real_namespace, real_conn, record, flavour, deferrable
):
    op = decorated(ranks_report, real_namespace, flavour, UPSTREAM, deferrable=deferrable, call_kwargs={"scale": 2})
    value = run(op, deferrable)

    n = WORKERS * SLOTS
    assert value == {"rank": 0, "size": n, "sum_of_ranks": n * (n - 1) // 2, "label": "from upstream",
                     "scaled": [6, 8, 10]}  # fmt: skip
    # every rank printed its line, tagged with its rank by mpirun; the result's marker lines never show
    said = {int(m[2]): m[1] for m in (re.search(r"^\[(\S+?)\].*rank (\d+) of 4 got from upstream$", ln) for ln in record.lines) if m}
    assert sorted(said) == list(range(n))
    assert all(tag.endswith(str(rank)) for rank, tag in said.items())  # "[1,<rank>]<stdout>:" / "[<rank>]"
    assert not any(MARKER in line for line in record.lines)


def test_an_exception_on_a_rank_fails_the_task_with_its_traceback_in_the_log(real_namespace, real_conn, record):
    op = decorated(fails_on_rank_one, real_namespace, "openmpi", UPSTREAM)
    with pytest.raises(AirflowFailException, match="failed") as failure:
        op.execute(ctx(op.task_id))
    assert "never started" not in str(failure.value)
    log = "\n".join(record.lines)
    assert "ValueError: rank 1 refuses from upstream" in log
    assert "raise ValueError(f\"rank 1 refuses {data['label']}\")" in log  # the function's source line
    assert "<@task function fails_on_rank_one>" in log


def test_ranks_without_that_python_fail_the_task_saying_rank_zero_never_started(real_namespace, real_conn, record):
    op = decorated(ranks_report, real_namespace, "mpich", UPSTREAM, python="/opt/no-such/python3", call_kwargs={"scale": 1})
    with pytest.raises(AirflowFailException, match=r"Rank 0 never started the function: the ranks could not run "
                                                   r"'/opt/no-such/python3' \(an image without Python 3\?"):  # fmt: skip
        op.execute(ctx(op.task_id))
    assert any("/opt/no-such/python3" in line for line in record.lines)  # mpirun's own words, in the log
