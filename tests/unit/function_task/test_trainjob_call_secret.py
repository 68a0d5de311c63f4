"""``@task.mpi`` on a TrainJob (issue 35): the call Secret reaches the ranks through one runtimePatch of the runtime's
`node` replicated job (Trainer v2.3.0), keyed by this provider's manager; the launcher (mpirun only) gets nothing.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace as NS
from unittest import mock

import pytest
import yaml

from airflow_mpi.function_task.function_call import (
    CALL_MOUNT,
    CALL_PATCH_MANAGER,
    mount_call_secret,
    mounted_call_secret,
)
from airflow_mpi.hooks.mpijob import MPIJobHook
from airflow_mpi.jobspec import MPIJobValidationError
from airflow_mpi.jobspec.kinds import NO_REPLICAS, TRAINJOB, register
from airflow_mpi.jobspec.kinds.registry import _KINDS
from tests.unit.jobspec.test_trainjob_manifest import BASE
from tests.unit.operators.test_task_decorators import RUN_ID, build

CONTEXT = {"ti": NS(dag_id="d", task_id="add", run_id=RUN_ID, map_index=-1, try_number=1)}
OPS_PATCH = BASE["spec"]["runtimePatches"][0]  # a base manifest's own (manager example.com/ops)


def trainjob(patches=None) -> dict:
    spec = {"runtimeRef": {"name": "openmpi-mpiuser"}, "trainer": {"numNodes": 2}}
    return {
        "apiVersion": TRAINJOB.api_version,
        "kind": "TrainJob",
        "metadata": {"name": "job"},
        "spec": spec if patches is None else {**spec, "runtimePatches": copy.deepcopy(patches)},
    }


# what the Trainer's webhook accepts: a domain-prefixed manager, the runtime's `node` replicated job and container
# (defaultMode 292: 0444)
CALL_PATCH = yaml.safe_load("""
manager: airflow-mpi.io/call-secret
trainingRuntimeSpec:
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  volumes:
                    - {name: airflow-mpi-call, secret: {secretName: job-call-1, defaultMode: 292}}
                  containers:
                    - name: node
                      volumeMounts:
                        - {name: airflow-mpi-call, mountPath: /etc/airflow-mpi/call, readOnly: true}
""")


def test_a_trainjobs_secret_is_one_runtime_patch_of_the_node_job_and_container_only():
    manifest = mount_call_secret(trainjob(), "job-call-1")
    assert manifest["spec"]["runtimePatches"] == [CALL_PATCH]
    assert manifest["spec"]["trainer"] == {"numNodes": 2}  # nothing on the trainer (the launcher's container)
    (job,) = CALL_PATCH["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert job["name"] == "node" != "launcher"  # the launcher runs only mpirun: no Secret


def test_the_secret_a_trainjob_mounts_is_read_back_from_its_patch_as_the_api_server_returns_it():
    job = mount_call_secret(trainjob(), "job-call-1")
    assert mounted_call_secret(job) == "job-call-1"
    job["spec"]["runtimePatches"][0]["time"] = "2026-11-28T16:00:00Z"  # the webhook stamps each patch
    assert mounted_call_secret(job) == "job-call-1"
    assert mounted_call_secret(trainjob()) is None and mounted_call_secret(trainjob([OPS_PATCH])) is None
    other = copy.deepcopy(CALL_PATCH) | {"manager": "example.com/ops"}  # the same volume, another manager's
    assert mounted_call_secret(trainjob([other])) is None


def test_a_base_manifests_own_runtime_patches_are_kept_before_the_call_patch():
    manifest = mount_call_secret(trainjob([OPS_PATCH]), "job-call-1")
    assert manifest["spec"]["runtimePatches"] == [OPS_PATCH, CALL_PATCH]


def test_a_remount_replaces_the_call_patch_instead_of_adding_another():
    manifest = mount_call_secret(mount_call_secret(trainjob([OPS_PATCH]), "job-call-0"), "job-call-1")
    managers = [p["manager"] for p in manifest["spec"]["runtimePatches"]]
    assert managers == ["example.com/ops", CALL_PATCH_MANAGER]  # one per manager: a listMapKey of the CRD
    assert (
        manifest["spec"]["runtimePatches"][1] == CALL_PATCH and mounted_call_secret(manifest) == "job-call-1"
    )


def test_a_kind_without_replica_specs_or_runtime_patches_is_refused_naming_why():
    from dataclasses import replace

    flat = replace(TRAINJOB, group="flat.example.com", rank_pods_patch=None, replica_layout=NO_REPLICAS)
    register(flat)
    try:
        with pytest.raises(MPIJobValidationError, match="neither replica specs nor runtime patches"):
            mount_call_secret({"apiVersion": flat.api_version, "spec": {}}, "job-call-1")
    finally:
        _KINDS.pop(flat.api_version, None)


def test_task_mpi_on_a_trainjob_builds_it_with_the_call_patch_and_the_ranks_command():
    op = build(api_version=TRAINJOB.api_version, base_manifest=copy.deepcopy(BASE) | {"metadata": {}})
    manifest = op.build_manifest(CONTEXT)
    secret, _ = op.callbacks.call_secret
    assert mounted_call_secret(manifest) == secret
    patches = manifest["spec"]["runtimePatches"]
    assert [p["manager"] for p in patches] == ["example.com/ops", CALL_PATCH_MANAGER]
    command = manifest["spec"]["trainer"]["command"]
    assert (
        command[0] == "mpirun"
        and "--tag-output" in command
        and command[-2:]
        == [
            f"{CALL_MOUNT}/runner.py",
            f"{CALL_MOUNT}/call",
        ]
    )
    assert "-hostfile" not in command  # the Trainer names its hostfile in OMPI_MCA_orte_default_hostfile


def test_the_call_secret_is_owned_by_the_trainjob_so_it_goes_with_it():
    hook = MPIJobHook(api_version=TRAINJOB.api_version)
    hook.__dict__["core_v1_client"] = mock.MagicMock()
    job = trainjob() | {"metadata": {"name": "job", "uid": "uid-tj", "labels": {}}}
    hook.create_owned_secret("job-call-1", "ns", {"call": "x"}, job)
    body = hook.core_v1_client.create_namespaced_secret.call_args.args[1]
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": TRAINJOB.api_version, "kind": "TrainJob", "name": "job", "uid": "uid-tj"}
    ]


# the Trainer v2.3.0 webhook's refusal of a runtime without the `node` replicated job (jobset.go Validate), as the API
# server returns it: the field's cause, its value the patches as JSON
REFUSED = json.dumps(
    {
        "kind": "Status",
        "message": 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request',
        "details": {
            "causes": [
                {
                    "field": "spec.runtimePatches",
                    "message": f"Invalid value: {json.dumps([CALL_PATCH])}: must not have replicated job that "
                    "doesn't exist in the runtime job template",
                }
            ]
        },
    }
)


def test_a_runtime_the_call_patch_cannot_reach_fails_the_task_with_the_webhooks_reason_and_what_it_needs():
    from kubernetes.client.exceptions import ApiException

    from airflow_mpi.exceptions import MPIJobInvalidSpecError
    from tests.unit.operators.test_task_call_secret import Store, context

    op = build(api_version=TRAINJOB.api_version)
    op.hook.create_error = ApiException(status=422, reason="Unprocessable Entity")
    op.hook.create_error.body = REFUSED
    with pytest.raises(MPIJobInvalidSpecError) as refused:
        op.execute(context(Store(), []))
    text = str(refused.value)
    assert "must not have replicated job that doesn't exist in the runtime job template" in text
    assert text.endswith(
        "template. The function's call Secret is mounted through spec.runtimePatches (manager "
        "airflow-mpi.io/call-secret) into the runtime's replicated job 'node' and its container 'node', where the "
        "ranks run: the runtime must have both (docs/kubeflow-trainer.md)"
    )
    assert refused.value.cause == "invalid" and op.hook.created == [] and not op.hook.secrets
