"""``@task.mpi`` on real MPI ranks: the real node runs launcher and workers of images/mpi (Open MPI, and MPICH
with mpi4py built against it), mpirun starts the decorated function on every rank over SSH.

The task is declared in a DAG as a DAG author writes it (an upstream task's XCom as its argument), rendered as
Airflow renders it (the XCom pulled from the task instance), and run as Airflow runs it (execute, or defer /
trigger / execute_complete).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.function_task.rank_runner import MARKER
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


def forges_on_rank_three(data: dict) -> dict:
    """Rank 3 prints what looks like a result (even a rank 0 tag of its own) before rank 0 returns."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if rank == 3:
        forged = "::airflow-mpi-result:: 0123456789 value 0 1 2844197185 eJyrVspLzE1VslIqzs8pSwUAHYAEdQ=="
        print(forged, flush=True)
        print("[1,0]<stdout>:" + forged, flush=True)
    comm.Barrier()
    return {"rank": rank, "label": data["label"]}


def secret_length(data: dict) -> int:
    """Sees the secret (its length on every rank), returns nothing of it."""
    from mpi4py import MPI

    return MPI.COMM_WORLD.allreduce(len(data["label"]))


def decorated(func, namespace: str, flavour: str, upstream_value, decorator: str = "mpi", **kwargs):
    """``@task.<decorator>(...)`` over ``func(<upstream XCom>, ...)`` in a DAG, rendered with that XCom pulled."""
    with DAG("it", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=UTC)) as dag:

        @task
        def upstream():
            return upstream_value

        call_kwargs = kwargs.pop("call_kwargs", {})
        getattr(task, decorator)(
            namespace=namespace, workers=WORKERS, slots_per_worker=SLOTS, **{**real_job(flavour), **kwargs}
        )(func)(upstream(), **call_kwargs)
    op = dag.get_task(func.__name__)
    ti = NS(
        dag_id="it",
        task_id=op.task_id,
        run_id=ctx(op.task_id)["ti"].run_id,
        map_index=-1,
        try_number=1,
        xcom_pull=lambda *a, **k: upstream_value,
        get_relevant_upstream_map_indexes=lambda *a, **k: None,
    )
    op.render_template_fields({"ti": ti, "task_instance": ti, "expanded_ti_count": None})
    return op


def run(op, deferrable: bool):
    if not deferrable:
        return op.execute(ctx(op.task_id))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx(op.task_id))
    event = run_trigger(
        MPIJobTrigger(**deferred.value.trigger.serialize()[1])
    )  # as the triggerer rebuilds it
    # as Airflow resumes it: the deferral's method, its kwargs and the event
    return op.resume_execution(
        deferred.value.method_name, {**deferred.value.kwargs, "event": event}, ctx(op.task_id)
    )


@pytest.mark.parametrize(("flavour", "deferrable"), [("openmpi", False), ("mpich", True)])
def test_rank_zeros_value_is_the_xcom_with_the_upstream_argument_on_every_rank(
    real_namespace, real_conn, record, flavour, deferrable
):
    op = decorated(
        ranks_report, real_namespace, flavour, UPSTREAM, deferrable=deferrable, call_kwargs={"scale": 2}
    )
    value = run(op, deferrable)

    n = WORKERS * SLOTS
    assert value == {"rank": 0, "size": n, "sum_of_ranks": n * (n - 1) // 2, "label": "from upstream",
                     "scaled": [6, 8, 10]}  # fmt: skip
    # every rank printed its line, tagged with its rank by mpirun; the result's marker lines never show
    said = {
        int(m[2]): m[1]
        for m in (re.search(r"^\[(\S+?)\].*rank (\d+) of 4 got from upstream$", ln) for ln in record.lines)
        if m
    }
    assert sorted(said) == list(range(n))
    assert all(tag.endswith(str(rank)) for rank, tag in said.items())  # "[1,<rank>]<stdout>:" / "[<rank>]"
    assert not any(MARKER in line for line in record.lines)


def test_an_exception_on_a_rank_fails_the_task_with_its_traceback_in_the_log(
    real_namespace, real_conn, record
):
    op = decorated(fails_on_rank_one, real_namespace, "openmpi", UPSTREAM)
    with pytest.raises(AirflowFailException, match="failed") as failure:
        op.execute(ctx(op.task_id))
    assert "never started" not in str(failure.value)
    log = "\n".join(record.lines)
    assert "ValueError: rank 1 refuses from upstream" in log
    assert "raise ValueError(f\"rank 1 refuses {data['label']}\")" in log  # the function's source line
    assert "<@task function fails_on_rank_one>" in log


def test_ranks_without_that_python_fail_the_task_saying_rank_zero_never_started(
    real_namespace, real_conn, record
):
    op = decorated(
        ranks_report,
        real_namespace,
        "mpich",
        UPSTREAM,
        python="/opt/no-such/python3",
        call_kwargs={"scale": 1},
    )
    with pytest.raises(
        AirflowFailException,
        match=r"Rank 0 never started the function: the ranks could not run "
        r"'/opt/no-such/python3' \(an image without Python 3\?",
    ):
        op.execute(ctx(op.task_id))
    assert any("/opt/no-such/python3" in line for line in record.lines)  # mpirun's own words, in the log


def test_a_marker_forged_by_another_rank_is_ordinary_output_and_rank_zeros_value_is_the_xcom(
    real_namespace, real_conn, record
):
    op = decorated(forges_on_rank_three, real_namespace, "openmpi", UPSTREAM)
    assert op.execute(ctx(op.task_id)) == {"rank": 0, "label": "from upstream"}
    forged = [line for line in record.lines if MARKER in line]
    assert len(forged) == 2 and all(re.match(r"^\[(\d+,)?3\]<stdout>:", line) for line in forged), forged


def test_arguments_travel_in_a_secret_owned_by_the_job_never_in_the_mpijob_pods_or_log(
    real_namespace, real_conn, real_k8s, record
):
    """A masked, non-ASCII secret passed as an argument: the ranks see it, the API's MPIJob and pods and the task
    log hold it in no form (raw, YAML- or JSON-escaped); its Secret goes with the job."""
    import json
    import uuid

    import yaml
    from airflow.providers.common.compat.sdk import mask_secret
    from kubernetes import client, watch

    secret = f"Grün\tgeheim-ß-{uuid.uuid4().hex[:8]}"
    mask_secret(secret)
    op = decorated(secret_length, real_namespace, "openmpi", {"label": secret}, on_finish_action="keep")
    assert op.execute(ctx(op.task_id)) == len(secret) * WORKERS * SLOTS
    name = op._job[0]
    custom, core = client.CustomObjectsApi(real_k8s), client.CoreV1Api(real_k8s)
    job = custom.get_namespaced_custom_object("kubeflow.org", "v2beta1", real_namespace, "mpijobs", name)
    pods = core.list_namespaced_pod(real_namespace, label_selector=f"training.kubeflow.org/job-name={name}")
    assert pods.items
    texts = [
        yaml.safe_dump(job),
        yaml.safe_dump(real_k8s.sanitize_for_serialization(pods)),
        json.dumps(job),
        "\n".join(record.lines),
    ]
    forms = {
        secret,
        yaml.safe_dump(secret).strip(),
        json.dumps(secret),
        secret.encode("unicode_escape").decode(),
    }
    assert not [form for form in forms for text in texts if form in text]
    (secret_object,) = [
        s
        for s in core.list_namespaced_secret(real_namespace).items
        if s.metadata.name.startswith(f"{name}-call-")
    ]
    assert [(o.kind, o.name, o.uid) for o in secret_object.metadata.owner_references] == [
        ("MPIJob", name, job["metadata"]["uid"])
    ]
    # deleted with its job by the garbage collector
    stream = watch.Watch().stream(
        core.list_namespaced_secret,
        real_namespace,
        timeout_seconds=120,
        field_selector=f"metadata.name={secret_object.metadata.name}",
    )
    assert next(stream)["type"] == "ADDED"  # the watch is open before the job goes
    custom.delete_namespaced_custom_object("kubeflow.org", "v2beta1", real_namespace, "mpijobs", name)
    assert any(event["type"] == "DELETED" for event in stream), "the call's Secret outlived its job"
