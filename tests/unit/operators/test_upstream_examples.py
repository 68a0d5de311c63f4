"""Golden: upstream's published MPIJob examples, passed unchanged as base_manifest, come out unchanged.

The examples are read from the pinned mpi-operator and training-operator modules (tests/unit/upstream.py),
never copied here. The only additions allowed are the task instance's identity labels and annotations,
the kind's retries mapping where an example leaves it unset (v2beta1: backoffLimit = retries; v1: 0, the retries
stay Airflow's; launcher restartPolicy Never: both the task log and Resolved.settings call them defaults), for
v2beta1 the launcher waiting for its workers (their sshd, then their names in the DNS), and what a parameter asks for.
"""

from __future__ import annotations

import copy

import pytest

from airflow_mpi.jobspec import API_V1, DEFAULT
from airflow_mpi.jobspec.container_defaults import STARTUP_PROBE
from airflow_mpi.jobspec.kinds import kind_for
from airflow_mpi.jobspec.spec import (
    CONFIG_MOUNT_PATH,
    CONFIG_VOLUME,
    WORKERS_DNS_WAIT,
    workers_dns_wait_script,
)
from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.operators.task_params import placeholder_identity
from tests.unit.fakes import FakeSyncHook
from tests.unit.upstream import example, example_texts, schema_errors

RUN_ID = "manual__2026-11-22T10:00:00+00:00"


def build(name: str, **params) -> tuple[MPIJobOperator, dict]:
    api, text = example_texts()[name]
    if api == API_V1:
        params.setdefault(
            "api_version", API_V1
        )  # the operator's API version is a parameter (default v2beta1)
    op = MPIJobOperator(task_id="example", base_manifest=text, **params)
    op.__dict__["hook"] = FakeSyncHook(namespace=None)  # no namespace configured on the connection
    return op, op.build_manifest({"run_id": RUN_ID})


def with_dns_wait(expected: dict) -> dict:
    """v2beta1: the launcher's init container that waits for the workers' names, in its main container's image."""
    if expected["apiVersion"] != API_V1:
        pod = expected["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        main = pod["containers"][0]
        pod["initContainers"] = [
            {
                "name": WORKERS_DNS_WAIT,
                "image": main["image"],
                "command": [
                    "/bin/sh",
                    "-c",
                    workers_dns_wait_script(360),
                ],  # the task's default schedule_timeout + 60 s
                **{
                    key: main[key]
                    for key in ("imagePullPolicy", "resources", "securityContext")
                    if key in main
                },
                "volumeMounts": [{"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH}],
            }
        ]
    return expected


def expected_from(name: str, op: MPIJobOperator, retries: int = 0) -> dict:
    """The example plus identity metadata, its name made unique per task instance, its kind's retries mapping, for
    v2beta1 the launcher waiting for its workers' sshd (a startup probe where the example has no probe), and for v1 the
    kind's idle worker command where the example's workers have none."""
    expected = example(name)
    identity = placeholder_identity(op, RUN_ID)
    metadata = expected["metadata"]
    metadata["name"] = identity.job_name(prefix=metadata["name"])
    if expected["apiVersion"] == API_V1:  # idle workers ending on SIGTERM, where the example gives no command
        worker = expected["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        if "command" not in worker and "args" not in worker:
            worker["command"] = list(kind_for(API_V1).idle_worker_command)
    if expected["apiVersion"] != API_V1:
        expected["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
        worker = expected["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        if "readinessProbe" not in worker:
            worker["startupProbe"] = STARTUP_PROBE
    metadata["labels"] = {**metadata.get("labels", {}), **identity.labels()}
    metadata["annotations"] = {**metadata.get("annotations", {}), **identity.annotations()}
    mapping = kind_for(expected["apiVersion"]).retries_mapping(
        retries
    )  # the kind's (v1: Never + 0, the retries stay Airflow's)
    expected["spec"].setdefault("runPolicy", {})["backoffLimit"] = mapping.backoff_limit
    expected["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = mapping.launcher_restart_policy
    return with_dns_wait(expected)


@pytest.mark.parametrize("name", sorted(example_texts()))
def test_a_published_example_passes_through_unchanged(name):
    op, manifest = build(name, retries=2)
    defaults = {field for field, setting in op._resolved.settings.items() if setting.source == DEFAULT}
    expected_defaults = {"backoff_limit", "launcher.restart_policy"}  # where every example is silent
    worker = example(name)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    if manifest["apiVersion"] == API_V1 and not {"command", "args"} & set(worker):
        expected_defaults.add("worker.command")  # the kind's idle workers
    if manifest["apiVersion"] != API_V1:
        expected_defaults |= {"launcher_creation_policy", "launcher.wait_for_workers"}
        if (
            "startupProbe"
            in manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        ):
            expected_defaults.add("worker.startup_probe")
    assert defaults == expected_defaults  # nothing of the mpiuser convention: each example says its own
    assert op._resolved.settings["name"].source == "base manifest, suffixed per task instance"
    assert manifest == expected_from(name, op, retries=2)
    assert schema_errors(manifest) == []


@pytest.mark.parametrize("name", ["pi", "pi-intel", "v1-tensorflow-mnist"])
def test_explicit_parameters_change_only_what_they_name(name):
    op, manifest = build(name, workers=4, image="example/mpi:2", program=["/opt/app"], backoff_limit=1)
    expected = expected_from(name, op)
    expected["spec"]["runPolicy"]["backoffLimit"] = 1
    del expected["spec"]["mpiReplicaSpecs"]["Launcher"][
        "restartPolicy"
    ]  # no retries mapping: backoff_limit given
    expected["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 4
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    for role in ("Launcher", "Worker"):
        expected["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]["image"] = (
            "example/mpi:2"
        )
    expected_launcher = expected["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    line = "args" if manifest["spec"].get("mpiImplementation") in ("Intel", "MPICH") else "command"
    expected_launcher.pop("args", None)  # program replaces the example's command line
    expected_launcher.pop("command", None)
    expected_launcher[line] = launcher[
        line
    ]  # Intel/MPICH: in args, the image's entrypoint kept (as upstream's)
    assert manifest == with_dns_wait(expected)  # the waiter in the image the parameter gave
    np_flag = "-np" if manifest["spec"].get("mpiImplementation", "OpenMPI") == "OpenMPI" else "-n"
    assert launcher[line][0] == "mpirun" and launcher[line][launcher[line].index(np_flag) + 1] == "4"
    assert launcher[line][-1] == "/opt/app"
    assert schema_errors(manifest) == []


def test_the_examples_are_read_as_published():
    """The golden tests above start from upstream's files, not from an edited copy."""
    pi = example("pi-intel")
    assert (
        pi["spec"]["mpiImplementation"] == "Intel"
        and pi["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    )
    assert "command" in pi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]  # null
    before = copy.deepcopy(example_texts())
    build("pi-intel")
    assert example_texts() == before
