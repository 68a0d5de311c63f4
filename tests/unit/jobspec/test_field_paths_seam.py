"""A kind not shaped like an MPIJob, as data only (JobKind.field_paths, NO_REPLICAS, field_defaults, field_rules,
container_paths, instead): a made-up ``FlatJob`` whose one container is ``spec.main`` and whose rank count is
``spec.ranks``, registered as a plug-in would be. The layout, the precedence rule, the launcher command, the
refusals, the manifest's checks, redaction and an operator's parameter set all follow what it says (nothing here
is TrainJob's: tests/unit/jobspec/test_trainjob_manifest.py has that kind's own)."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec import Defaults
from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.fields import PARAMETERS, kind_parameters
from airflow_mpi.jobspec.kinds import NO_REPLICAS, JobKind, PodLabels, register, registry
from airflow_mpi.jobspec.layout import pod_spec, replica_spec, replica_specs
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.parameters import resolve_parameters
from airflow_mpi.jobspec.redaction import MASK, redact_manifest
from airflow_mpi.jobspec.rules import integer
from airflow_mpi.jobspec.settings import DEFAULT

FLATJOB = JobKind(
    group="flat.example.com", version="v1", kind="FlatJob", plural="flatjobs", controller="flat-operator",
    restart_policies=("Never",), managed_by=("flat.example.com/controller",),
    container_names={"Launcher": "main", "Worker": "main"}, replica_layout=NO_REPLICAS,
    field_paths={
        "name": ("metadata", "name"), "namespace": ("metadata", "namespace"), "labels": ("metadata", "labels"),
        "launcher.image": ("spec", "main", "image"), "worker.image": ("spec", "main", "image"),
        "launcher.command": ("spec", "main", "command"), "launcher.env": ("spec", "main", "env"),
        "worker.env": ("spec", "main", "env"), "worker.replicas": ("spec", "ranks"),
        "slots_per_worker": ("spec", "perRank"), "run_policy.suspend": ("spec", "paused"),
        "run_policy.managed_by": ("spec", "managedBy"),
    },
    field_defaults={"run_policy.suspend": False}, field_rules={"worker.replicas": integer(1, 8)},
    verbatim_spec_keys=("extras",), instead="set it in the FlatJob's class", container_paths=(("spec", "main"),),
    launcher_suffix="-flat", worker_infix="-flat-",
    pod_labels=PodLabels("flat.example.com/job", "flat.example.com/role"),
)  # fmt: skip
IDENTITY = TaskIdentity("dag", "flat", "run", -1, 1)


@pytest.fixture
def flatjob(monkeypatch):
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    monkeypatch.setattr(registry, "_loaded", True)  # no plug-ins looked for
    return register(FLATJOB)


def build(**params):
    values = {"api_version": FLATJOB.api_version, "image": "img", **params}
    return resolve_parameters(values, identity=IDENTITY, defaults=Defaults(retries=1))


def test_the_rows_go_where_the_kind_says_in_its_order(flatjob):
    resolved = build(workers=3, slots_per_worker=2, env={"A": "1"}, namespace="ns")
    assert resolved.manifest["spec"] == {
        "main": {"image": "img", "env": [{"name": "A", "value": "1"}]}, "ranks": 3, "perRank": 2, "paused": False,
    }  # fmt: skip
    assert resolved.settings["run_policy.suspend"].source == DEFAULT
    assert replica_specs(resolved.manifest, flatjob) is None
    assert (
        replica_spec(resolved.manifest, "Worker", flatjob)
        == pod_spec(resolved.manifest, "Worker", flatjob)
        == {}
    )


def test_the_launcher_command_is_sized_and_written_where_the_kind_keeps_them(flatjob):
    command = build(program="/app", workers=3, slots_per_worker=2).manifest["spec"]["main"]["command"]
    assert command[0] == "mpirun" and command[command.index("-np") + 1] == "6" and command[-1] == "/app"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (dict(node_selector={"a": "b"}), "node_selector"),
        (dict(args=["x"]), "args"),  # the kind keeps no launcher args
        (dict(launcher={"image": "x"}), "launcher"),
        (dict(backoff_limit=1), "backoff_limit"),
        (dict(active_deadline_seconds=5), "active_deadline_seconds"),
    ],
)
def test_a_row_the_kind_lacks_is_refused_by_name_with_its_instead(flatjob, params, field):
    with pytest.raises(MPIJobValidationError) as err:
        build(**params)
    assert [e.field for e in err.value.errors] == [field]
    assert "set it in the FlatJob's class" in err.value.errors[0].reason


def test_the_merged_manifest_is_checked_where_the_kind_keeps_each_row(flatjob):
    with pytest.raises(MPIJobValidationError) as err:
        build(workers=9)  # the kind's own rule
    assert [(e.field, e.value) for e in err.value.errors] == [("workers", 9)]
    base = {
        "apiVersion": flatjob.api_version,
        "kind": "FlatJob",
        "spec": {"extras": {"kept": 1}, "mpiReplicaSpecs": {}},
    }
    with pytest.raises(MPIJobValidationError) as err:
        build(base_manifest=base)
    assert [e.field for e in err.value.errors] == ["spec.mpiReplicaSpecs"]  # extras: verbatim
    with pytest.raises(MPIJobValidationError) as err:
        build(managed_by="kubeflow.org/mpi-operator")
    assert [e.field for e in err.value.errors] == ["managed_by"]


def test_no_mpijob_default_is_added(flatjob):
    text = str(build(program="/app").manifest)
    assert not any(word in text for word in ("sshd", "Probe", "dnsConfig", "backoffLimit", "restartPolicy"))


def test_the_kinds_container_is_redacted(flatjob):
    manifest = build(env={"API_TOKEN": "s3cret"}).manifest
    assert redact_manifest(manifest)["spec"]["main"]["env"] == [{"name": "API_TOKEN", "value": MASK}]


def test_an_operators_parameters_are_the_kinds(flatjob):
    named = kind_parameters(flatjob, PARAMETERS)
    assert {
        "image",
        "command",
        "env",
        "workers",
        "slots_per_worker",
        "suspend",
        "program",
        "base_manifest",
    } <= set(named)
    assert not {"args", "node_selector", "launcher", "worker", "worker_resources", "queue_name"} & set(named)
