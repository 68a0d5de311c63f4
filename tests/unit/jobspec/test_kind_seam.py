"""What a kind now says of its manifest's shape and of its requests (jobspec/kinds/ ReplicaLayout, LauncherOwner,
event_selector, longest_name, PodLabels.index, hydra_address_wired), for each built-in kind from its own data; and a
third, made-up kind whose replica specs, plural, names and labels all differ from the MPIJob's, registered as a
plug-in would be: the layout, validation, the request paths, the event selectors and the hub follow it."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from unittest import mock

import pytest
from kubernetes import client as k8s
from kubernetes.client import V1ObjectMeta, V1OwnerReference, V1Pod

from airflow_mpi.function_task.function_call import mount_call_secret, mounted_call_secret
from airflow_mpi.hooks import AsyncMPIJobHook, MPIJobHook
from airflow_mpi.hooks.ownership import Owner, launcher_job_call
from airflow_mpi.hooks.requests import EVENTS, PODS, pod_selectors
from airflow_mpi.jobspec import MPIJobSpec, ReplicaSpec, resolve
from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.kinds import (
    MPIJOB_REPLICAS,
    MPIJOB_V1,
    MPIJOB_V2BETA1,
    JobKind,
    LauncherOwner,
    PodLabels,
    ReplicaLayout,
    register,
    registry,
)
from airflow_mpi.jobspec.layout import pod_spec, replica_spec
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.parameters import resolve_parameters
from airflow_mpi.jobspec.redaction import MASK, redact_manifest
from airflow_mpi.operators.lineage import facet_fields, facts_of
from airflow_mpi.wait.namespace_watch import _request
from airflow_mpi.wait.watch_hub import WatchHub, watch_selector, watched

# ------------------------------------------------------------------ the built-in kinds' answers, each its own
BUILT_IN = {
    MPIJOB_V2BETA1.api_version: dict(
        launcher_owner=LauncherOwner(kind="Job", group="batch", version="v1", plural="jobs"),
        hydra_address_wired=False,
    ),
    MPIJOB_V1.api_version: dict(launcher_owner=None, hydra_address_wired=True),
}
KINDS = [MPIJOB_V2BETA1, MPIJOB_V1]
IDS = [k.api_version for k in KINDS]


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_both_mpijob_apis_keep_their_replica_specs_in_spec_mpi_replica_specs(kind):
    assert kind.replica_layout == MPIJOB_REPLICAS
    assert kind.replica_path("Launcher") == ("spec", "mpiReplicaSpecs", "Launcher")
    assert kind.replica_path("Worker") == ("spec", "mpiReplicaSpecs", "Worker")
    assert kind.replica_layout.field == "mpi_replica_specs"
    assert kind.replica_layout.role_of("Worker") == "Worker" and kind.replica_layout.role_of("PS") is None
    manifest = resolve(_spec(kind)).manifest
    assert replica_spec(manifest, "Worker")["replicas"] == 2
    assert (
        pod_spec(manifest, "Launcher") is manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    )


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_each_kind_names_what_stands_between_the_job_and_its_launcher_pods(kind):
    expected = BUILT_IN[kind.api_version]
    assert kind.launcher_owner == expected["launcher_owner"]
    assert kind.hydra_address_wired is expected["hydra_address_wired"]
    between = controlled("Job", "pi-launcher", "uid-job-of-that-name")
    owner = Owner("pi", "uid-pi", job_kind=kind)
    # v2beta1: one GET of the launcher Job tells (None: undecided); v1: the job controls its launcher pod itself
    assert owner.owns(between) is (None if kind.launcher_owner else False)
    assert owner.owns(controlled("MPIJob", "pi", "uid-pi")) is True


def test_the_v2beta1_launcher_job_is_read_where_its_kind_says():
    call = launcher_job_call("ns", "pi", MPIJOB_V2BETA1)
    assert (call.kwargs["group"], call.kwargs["version"], call.kwargs["plural"]) == ("batch", "v1", "jobs")
    assert call.kwargs["name"] == "pi-launcher"


def test_v1_has_no_launcher_job_to_read():
    with pytest.raises(ValueError, match="no object between"):
        launcher_job_call("ns", "pi", MPIJOB_V1)


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_event_selector_names_and_worker_index_are_the_kinds(kind):
    assert kind.event_selector("pi") == "involvedObject.kind=MPIJob,involvedObject.name=pi"
    assert kind.longest_name("pi", 10) == "pi-worker-9"
    assert kind.longest_name("pi", 1) == "pi-worker-0"  # as long as pi-launcher: the worker's is named
    assert kind.pod_labels.index == "training.kubeflow.org/replica-index"
    assert watched(kind) == ("mpijobs", PODS, EVENTS)
    assert watch_selector(PODS, kind) == {"label_selector": "training.kubeflow.org/job-name"}


# ------------------------------------------------------------------ a third kind
RANKJOB = JobKind(
    group="batch.example.com", version="v1alpha1", kind="RankJob", plural="rankjobs", controller="rank-operator",
    restart_policies=("Never", "OnFailure"), managed_by=(), container_names={"Launcher": "main", "Worker": "main"},
    replica_layout=ReplicaLayout(("spec", "rankReplicaSpecs"), {"Launcher": "Master", "Worker": "Rank"}),
    launcher_suffix="-master", worker_infix="-rank-", invalid_reasons=("RankJobInvalid",),
    pod_labels=PodLabels("example.com/job", "example.com/role", index="example.com/rank"),
)  # fmt: skip


@pytest.fixture
def rankjob(monkeypatch):
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    monkeypatch.setattr(registry, "_loaded", True)  # no plug-ins looked for
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": {}})
    )
    return register(RANKJOB)


def _spec(kind: JobKind, **kwargs) -> MPIJobSpec:
    kwargs = {
        "name": "pi",
        "worker": ReplicaSpec(image="img", replicas=2, env={"API_TOKEN": "s3cret"}),
        **kwargs,
    }
    return MPIJobSpec(
        namespace="ns", api_version=kind.api_version,
        launcher=ReplicaSpec(image="img", command=["mpirun", "hostname"]), **kwargs,
    )  # fmt: skip


def test_the_layout_follows_the_kind(rankjob):
    manifest = resolve(_spec(rankjob)).manifest
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch.example.com/v1alpha1", "RankJob")
    assert list(manifest["spec"]) == ["rankReplicaSpecs"]
    specs = manifest["spec"]["rankReplicaSpecs"]
    assert list(specs) == ["Master", "Rank"]
    assert next(iter(specs["Master"])) == "replicas" and specs["Master"]["replicas"] == 1
    assert specs["Rank"]["replicas"] == 2
    assert specs["Master"]["template"]["spec"]["containers"][0]["name"] == "main"
    assert replica_spec(manifest, "Worker") is specs["Rank"]
    # the model's readers find the replica specs through the kind: the function's Secret, the redaction, lineage
    mounted = mount_call_secret(manifest, "pi-call")
    assert mounted_call_secret(mounted) == "pi-call"
    assert "volumes" not in specs["Master"]["template"]["spec"]
    env = redact_manifest(manifest)["spec"]["rankReplicaSpecs"]["Rank"]["template"]["spec"]["containers"][0][
        "env"
    ]
    assert env == [{"name": "API_TOKEN", "value": MASK}]
    facts = facts_of(manifest)
    assert (facts["image"], facts["workerImage"], facts["workers"]) == ("img", "img", 2)
    assert (
        facet_fields(api_version=rankjob.api_version, job=None, facts=facts, result=None, cluster=None)[
            "kind"
        ]
        == "RankJob"
    )


def test_the_launcher_command_is_written_into_the_kinds_launcher(rankjob):
    values = {
        "api_version": rankjob.api_version,
        "name": "pi",
        "image": "img",
        "program": ["/pi"],
        "workers": 3,
    }
    manifest = resolve_parameters(values).manifest
    command = manifest["spec"]["rankReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "mpirun" and command[command.index("-np") + 1] == "3"  # sized from the Rank replicas
    assert command[-1] == "/pi"


def test_validation_reads_the_kinds_replica_specs_and_names(rankjob):
    base = {
        "apiVersion": rankjob.api_version,
        "kind": "RankJob",
        "spec": {"rankReplicaSpecs": {"PS": {"replicas": 1}}, "mpiReplicaSpecs": {}},
    }
    with pytest.raises(MPIJobValidationError) as raised:
        resolve(_spec(rankjob, base_manifest=base))
    errors = {e.field: e.reason for e in raised.value.errors}
    assert errors["rank_replica_specs.PS"] == "unknown replica type (expected Master, Rank)"
    assert errors["spec.mpiReplicaSpecs"] == "is not a field of batch.example.com/v1alpha1 RankJob"
    with pytest.raises(MPIJobValidationError, match="must be a RankJob"):
        resolve(_spec(rankjob, base_manifest={"kind": "MPIJob"}))
    with pytest.raises(MPIJobValidationError, match="derives 'p{60}-rank-1'"):
        resolve(_spec(rankjob, name="p" * 60))


@pytest.mark.parametrize("kind", [MPIJOB_V2BETA1, RANKJOB], ids=["mpijob", "rankjob"])
def test_a_derived_name_leaves_room_for_exactly_the_kinds_longest_name(rankjob, kind):
    identity = TaskIdentity("d" * 40, "t" * 40, "run")
    worker = ReplicaSpec(image="img", replicas=1000)
    name = resolve(_spec(kind, name=None, identity=identity, worker=worker)).manifest["metadata"]["name"]
    assert len(kind.longest_name(name, 1000)) == 63  # "-worker-999" or "-rank-999"


def test_the_requests_go_to_the_kinds_plural(rankjob):
    hook = MPIJobHook(api_version=rankjob.api_version)
    hook.__dict__["custom_object_client"] = client = mock.create_autospec(k8s.CustomObjectsApi, instance=True)
    client.get_namespaced_custom_object.return_value = {"metadata": {"name": "pi"}}
    hook.get_mpijob("pi", "ns")
    where = {"group": "batch.example.com", "version": "v1alpha1", "namespace": "ns", "plural": "rankjobs"}
    client.get_namespaced_custom_object.assert_called_once_with(**where, name="pi")
    manifest = resolve(_spec(rankjob)).manifest
    client.create_namespaced_custom_object.return_value = manifest
    hook.create_mpijob(manifest)
    assert client.create_namespaced_custom_object.call_args.kwargs["plural"] == "rankjobs"
    assert pod_selectors(rankjob.api_version, "pi", "worker") == [
        "example.com/job=pi,example.com/role=worker"
    ]
    # the hub lists and watches the kind's plural, through the hook
    method, kwargs = _request(AsyncMPIJobHook(api_version=rankjob.api_version), object(), "rankjobs", "ns")
    assert method.__name__ == "list_namespaced_custom_object" and kwargs == where


def test_the_event_selectors_follow_the_kind(rankjob):
    hook = AsyncMPIJobHook(api_version=rankjob.api_version)
    with mock.patch.object(AsyncMPIJobHook, "_events", mock.AsyncMock(return_value=[])) as events:
        asyncio.run(hook.job_events("pi", "ns"))
    events.assert_awaited_once_with("ns", "involvedObject.kind=RankJob,involvedObject.name=pi")
    assert watch_selector(EVENTS, rankjob) == {
        "field_selector": "involvedObject.kind=RankJob,reason=RankJobInvalid"
    }


def test_the_hub_files_the_kinds_jobs_and_pods_and_owns_by_its_kind(rankjob):
    async def run():
        hub = WatchHub(SimpleNamespace(api_version=rankjob.api_version), "ns")
        assert hub.kinds == ("rankjobs", PODS, EVENTS)
        assert watch_selector(PODS, rankjob) == {"label_selector": "example.com/job"}
        hub._apply("rankjobs", "ADDED", {"metadata": {"name": "pi", "uid": "uid-pi"}})
        pod = controlled("RankJob", "pi", "uid-pi", name="pi-rank-0", labels={"example.com/job": "pi"})
        hub._apply(PODS, "ADDED", pod)
        sub = hub.subscribe("pi")
        assert hub.jobs["pi"]["metadata"]["uid"] == "uid-pi" and sub.pods() == [pod]
        # no object between a RankJob and its pods: a pod another controller made is not the job's, no GET asked
        assert hub.owner("pi", "uid-pi").owns(controlled("Job", "pi-master", "uid-x")) is False

    asyncio.run(run())


def controlled(kind: str, owner: str, uid: str, *, name: str = "p", labels: dict | None = None) -> V1Pod:
    ref = V1OwnerReference(api_version="x/v1", kind=kind, name=owner, uid=uid, controller=True)
    return V1Pod(metadata=V1ObjectMeta(name=name, labels=labels or {}, owner_references=[ref]))
