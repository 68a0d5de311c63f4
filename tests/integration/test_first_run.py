"""A user's first run, on the real node: upstream's own example manifests and docs/first-run.md's parameters-only job
succeed with nothing but the operator's defaults, and runs never collide.

The images are not upstream's, nor built from its Dockerfiles: they are this project's look-alikes
(images/mpi/Dockerfile targets ``openmpi-upstream``, ``mpich-upstream``, ``intel-upstream``;
localcluster/node_container.py ``UPSTREAM_IMAGES``), written from the mpi-operator's documented behaviour (sshd on
port 2222, ``mpiuser``, no mpirun wrapper, MPICH and Intel MPI waiting for DNS in an ENTRYPOINT). They run this
project's pi program (images/mpi/pi.c, not upstream's pi.cc) on this project's MPI builds: Debian's Open MPI, as
upstream's; MPICH 4.3.2 from PyPI's ``mpich`` wheel (upstream: Debian's mpich); Intel MPI 2021.16 from PyPI's
``impi-rt`` (upstream: oneAPI's intel-oneapi-mpi). So this proves that upstream's manifests and the operator's
defaults run MPI on images that behave like upstream's, not that upstream's published images do.

The examples are upstream's files (read from the pinned mpi-operator module, tests/unit/upstream.py), changed only
where the local node needs it: the image (the look-alike above), ``imagePullPolicy: IfNotPresent`` (the image is
loaded into the node; no registry here) and no CPU/memory requests or limits (three 1-CPU pods do not fit a 2-core
node). Upstream's ``name: pi`` stays ``pi`` in every example: the operator makes it a prefix unique per task instance.

Each launcher must succeed at its first attempt: the defaults start it once the workers' sshd listens, so it neither
races their DNS records nor spends the task's retries (``backoffLimit`` = retries = 0 here). Every case runs once;
``AIRFLOW_MPI_REPEAT=N`` runs every example and form, sync and deferrable, N times (the measurement of issue 19).
"""

from __future__ import annotations

import os
import re
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, TaskDeferred
from localcluster.mpi_images import UPSTREAM_IMAGES
from localcluster.node_container import await_image
from tests.integration.test_operator import Background, record, run_trigger  # noqa: F401
from tests.integration.test_real_mpi import PI_LINE, launcher_pods
from tests.unit.upstream import example

IMPLEMENTATION = {"openmpi": "OpenMPI", "mpich": "MPICH", "intel": "Intel"}
EXAMPLE = {"openmpi": "pi", "mpich": "pi-mpich", "intel": "pi-intel"}
REPEAT = int(os.environ.get("AIRFLOW_MPI_REPEAT", "1"))
# Once: every example and the parameters-only job of every implementation, sync and deferrable alternating.
# Repeated: every combination.
_ONCE = [
    ("openmpi", "example", False),
    ("openmpi", "parameters", True),
    ("mpich", "example", True),
    ("mpich", "parameters", False),
    ("intel", "example", False),
    ("intel", "parameters", True),
]
CASES = (
    _ONCE
    if REPEAT == 1
    else [
        (flavour, form, deferrable)
        for flavour in IMPLEMENTATION
        for form in ("example", "parameters")
        for deferrable in (False, True)
    ]
)


def upstream_image(flavour: str) -> str:
    """The look-alike of upstream's ``mpioperator/mpi-pi:<flavour>`` (see above), once the real node has it."""
    await_image(UPSTREAM_IMAGES[f"{flavour}-upstream"])  # the real node may still be loading it
    return UPSTREAM_IMAGES[f"{flavour}-upstream"]


def upstream_example(flavour: str) -> dict:
    """Upstream's v2beta1 pi example of ``flavour``, fitted to the local node (see the module docstring)."""
    manifest = example(EXAMPLE[flavour])
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            container["image"] = upstream_image(flavour)
            container["imagePullPolicy"] = "IfNotPresent"
            container.pop("resources", None)
    return manifest


def context(task_id: str, run_id: str, try_number: int = 1) -> dict:
    ti = NS(
        dag_id="first_run",
        task_id=task_id,
        run_id=run_id,
        map_index=-1,
        try_number=try_number,
        get_first_reschedule_date=lambda context: None,
    )
    return {"ti": ti, "task_reschedule_count": 0}


def first_run(flavour: str, form: str, namespace: str, **kwargs) -> MPIJobOperator:
    """The job a new user writes: upstream's example as it is, or image, program and workers only."""
    if form == "example":
        return MPIJobOperator(
            task_id=f"{flavour}_example",
            namespace=namespace,
            base_manifest=upstream_example(flavour),
            poll_interval=2,
            **kwargs,
        )
    return MPIJobOperator(
        task_id=f"{flavour}_parameters",
        namespace=namespace,
        image=upstream_image(flavour),
        program="/home/mpiuser/pi",
        workers=2,
        mpi_implementation=IMPLEMENTATION[flavour],
        poll_interval=2,
        **kwargs,
    )


def execute(op: MPIJobOperator, ctx: dict, deferrable: bool) -> dict:
    """Run the task as Airflow does: execute, or execute / defer / the trigger in its own loop / execute_complete."""
    if not deferrable:
        return op.execute(ctx)
    op.deferrable = True
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    event = run_trigger(
        MPIJobTrigger(**deferred.value.trigger.serialize()[1])
    )  # as the triggerer rebuilds it
    resume = {**(deferred.value.kwargs or {}), "event": event}  # as Airflow resumes it
    return op.resume_execution(deferred.value.method_name, resume, ctx)


@pytest.mark.parametrize(("flavour", "form", "deferrable"), CASES)
def test_upstreams_example_and_the_parameters_only_job_succeed_at_the_first_attempt(
    real_k8s, real_namespace, real_conn, record, flavour, form, deferrable
):
    names = set()
    for run in range(REPEAT):
        del record.lines[:]
        op = first_run(flavour, form, real_namespace, on_finish_action="keep")
        xcom = execute(op, context(op.task_id, f"manual__run-{run}"), deferrable)
        assert xcom["condition"] == "Succeeded" and xcom["launcher_attempts"] == 1, (run, xcom)
        (pi,) = [m for m in map(PI_LINE.match, record.lines) if m]
        assert int(pi[2]) == 2, pi[0]  # upstream's "-n 2" or the parameters' 2 workers x 1 slot
        names.add(xcom["name"])
    assert len(names) == REPEAT  # one job per run, each kept beside the others
    if form == "example":
        assert all(re.fullmatch(r"pi-[0-9a-f]{8}", name) for name in names)  # upstream's name is the prefix


def test_the_same_dag_run_twice_at_once_and_after_a_failed_run_kept_gets_a_job_per_run(
    real_k8s, real_namespace, real_conn, record
):
    def task() -> MPIJobOperator:  # the same task of the same DAG: upstream's example named "pi"
        return MPIJobOperator(
            task_id="pi",
            namespace=real_namespace,
            base_manifest=upstream_example("openmpi"),
            poll_interval=2,
            on_finish_action="keep",
        )

    first, second = (Background(task().execute, context("pi", f"manual__concurrent-{i}")) for i in (1, 2))
    results = [first.result(300), second.result(300)]
    assert all(isinstance(r, dict) and r["condition"] == "Succeeded" for r in results), results
    failing = MPIJobOperator(
        task_id="pi",
        namespace=real_namespace,
        base_manifest=upstream_example("openmpi"),
        program=["sh", "-c", "exit 3"],
        poll_interval=2,
        on_finish_action="keep",
    )
    with pytest.raises(AirflowException, match="exit codes: 3"):
        failing.execute(context("pi", "manual__failed"))  # kept for debugging
    after = task().execute(context("pi", "manual__after-the-failure"))
    assert after["condition"] == "Succeeded"
    names = [r["name"] for r in results] + [after["name"]]
    assert len(set(names)) == 3 and all(name.startswith("pi-") for name in names)
    launchers = {
        p.metadata.labels["training.kubeflow.org/job-name"] for p in launcher_pods(real_k8s, real_namespace)
    }
    assert (
        set(names) < launchers and len(launchers) == 4
    )  # the failed run's job is still there, beside the others
