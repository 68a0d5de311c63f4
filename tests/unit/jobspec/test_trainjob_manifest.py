"""The TrainJob (trainer.kubeflow.org/v1alpha1) the model builds from MPIJobOperator's parameters: golden manifests
(parameters only; onto a base manifest), the precedence rule both ways, the launcher command, the retries mapping,
what an MPIJob's defaults must not add, each refusal by name, and the Trainer v2.3.0 CRD's schema."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec import Defaults, MPIJobSpec, ReplicaSpec, resolve
from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.kinds import API_TRAINJOB, TRAINJOB, kind_for
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.parameters import resolve_parameters
from airflow_mpi.jobspec.redaction import MASK, redact_manifest
from airflow_mpi.jobspec.settings import BASE_MANIFEST, CONTROLLER_DEFAULT, DEFAULT, PARAMETER
from tests.unit.jobspec.test_manifest_golden import assert_golden
from tests.unit.upstream import trainjob_schema_errors

IMAGE = "airflow-mpi/mpi-pi:openmpi"
IDENTITY = TaskIdentity("train_dag", "pi", "manual__2026-11-28T10:00:00+00:00", -1, 1)
BASE = {
    "apiVersion": API_TRAINJOB,
    "kind": "TrainJob",
    "metadata": {"name": "pi", "labels": {"team": "hpc"}},
    "spec": {
        "runtimeRef": {"name": "team-mpi", "kind": "TrainingRuntime"},
        "trainer": {
            "image": "airflow-mpi/base:1",
            "numNodes": 3,
            "env": [
                {"name": "MODE", "value": "base"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
            ],
        },
        "runtimePatches": [
            {
                "manager": "example.com/ops",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": "node",
                                    "template": {
                                        "spec": {"template": {"spec": {"nodeSelector": {"pool": "mpi"}}}}
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ],
        "activeDeadlineSeconds": 7200,
    },
}


def build(**params):
    values = {"api_version": API_TRAINJOB, **params}
    return resolve_parameters(values, identity=IDENTITY, defaults=Defaults(retries=params.pop("retries", 2)))


def refusal(**params) -> MPIJobValidationError:
    with pytest.raises(MPIJobValidationError) as err:
        build(**params)
    return err.value


def test_trainjob_is_registered_under_its_api_version():
    assert kind_for(API_TRAINJOB) is TRAINJOB


def test_golden_trainjob_of_parameters_only():
    resolved = build(
        image=IMAGE, program=["/home/mpiuser/pi"], mpirun_args=["--tag-output"], workers=2, slots_per_worker=2,
        env={"PI_DIGITS": "12"},
        resources_per_node={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}},
        queue_name="team-queue", workload_priority_class="high", namespace="ml", labels={"team": "hpc"},
        annotations={"example.com/owner": "hpc"}, suspend=True, active_deadline_seconds=3600,
        managed_by="kueue.x-k8s.io/multikueue",
    )  # fmt: skip
    assert_golden(resolved.manifest, "trainjob_parameters.yaml")
    assert trainjob_schema_errors(resolved.manifest) == []
    assert resolved.settings["runtime"].source == DEFAULT
    assert resolved.settings["runtime_kind"].value == "ClusterTrainingRuntime"


def test_golden_trainjob_onto_a_base_manifest():
    resolved = build(base_manifest=BASE, image=IMAGE, workers=2, env={"TOKEN": "given"}, program=["/opt/app"])
    assert_golden(resolved.manifest, "trainjob_merged.yaml")
    assert trainjob_schema_errors(resolved.manifest) == []


def test_a_parameter_wins_over_the_base_manifest():
    resolved = build(
        base_manifest=BASE, workers=2, runtime="other-mpi", runtime_kind="ClusterTrainingRuntime"
    )
    trainer, ref = resolved.manifest["spec"]["trainer"], resolved.manifest["spec"]["runtimeRef"]
    assert trainer["numNodes"] == 2 and resolved.settings["workers"].source == PARAMETER
    assert ref == {"name": "other-mpi", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"}


def test_the_base_manifest_wins_over_the_defaults_and_keeps_what_no_parameter_sets():
    resolved = build(base_manifest=BASE, env={"TOKEN": "given"})
    spec = resolved.manifest["spec"]
    assert spec["runtimeRef"]["name"] == "team-mpi" and resolved.settings["runtime"].source == BASE_MANIFEST
    assert spec["runtimeRef"]["kind"] == "TrainingRuntime"
    assert spec["trainer"]["numNodes"] == 3 and resolved.settings["workers"].source == BASE_MANIFEST
    assert spec["runtimePatches"] == BASE["spec"]["runtimePatches"] and spec["activeDeadlineSeconds"] == 7200
    # an env var given replaces the base's of that name whole (no value beside its valueFrom), in the base's order
    assert spec["trainer"]["env"] == [{"name": "MODE", "value": "base"}, {"name": "TOKEN", "value": "given"}]


def test_program_becomes_the_trainers_mpirun_sized_from_the_resolved_job_without_a_hostfile():
    command = build(image=IMAGE, program="/home/mpiuser/pi", workers=3, slots_per_worker=2).manifest["spec"]
    command = command["trainer"]["command"]
    assert command[0] == "mpirun" and command[-1] == "/home/mpiuser/pi"
    assert command[command.index("-np") + 1] == "6"
    assert not {"-hostfile", "--hostfile"} & set(
        command
    )  # the Trainer names it: OMPI_MCA_orte_default_hostfile
    from_base = build(base_manifest=BASE, program="/opt/app").manifest["spec"]["trainer"]["command"]
    assert from_base[from_base.index("-np") + 1] == "3"  # numNodes of the base x the runtime's one slot


def test_retries_write_nothing_and_each_retry_is_a_fresh_trainjob():
    resolved = build(image=IMAGE, retries=3)
    assert "backoffLimit" not in str(resolved.manifest) and "restartPolicy" not in str(resolved.manifest)
    assert resolved.settings["backoff_limit"].value == 0
    assert resolved.settings["backoff_limit"].source == CONTROLLER_DEFAULT
    assert TRAINJOB.retries_mapping(3).mapped is False


def test_no_mpijob_default_reaches_a_trainjob():
    """The runtime owns the pods: no sshd, probes, mpiuser convention, DNS searches or launcher creation policy."""
    resolved = build(image=IMAGE, program="/home/mpiuser/pi", workers=2)
    manifest = resolved.manifest
    assert set(manifest["spec"]) == {"runtimeRef", "trainer"}
    assert set(resolved.settings) == {  # nothing the task log would report as filled in but the TrainJob's own
        "workers", "slots_per_worker", "backoff_limit", "launcher.restart_policy", "name",
        "runtime", "runtime_kind", "runtime_api_group",
    }  # fmt: skip
    assert set(manifest["spec"]["trainer"]) == {"image", "numNodes", "command"}
    text = str(manifest)
    for mpijob_default in (
        "sshd",
        "Probe",
        "dnsConfig",
        "sshAuthMountPath",
        "launcherCreationPolicy",
        "1000",
    ):
        assert mpijob_default not in text


def test_the_trainers_secrets_are_redacted_as_a_containers():
    manifest = build(image=IMAGE, env={"DB_PASSWORD": "hunter2"}).manifest
    assert redact_manifest(manifest)["spec"]["trainer"]["env"] == [{"name": "DB_PASSWORD", "value": MASK}]


INSTEAD = "runtimePatches"
REFUSED = [
    # (parameters, the field named, the value named, a word of the reason)
    (dict(launcher={"image": "x"}), "launcher", {"image": "x"}, INSTEAD),
    (dict(worker={"env": {"A": "1"}}), "worker", {"env": {"A": "1"}}, INSTEAD),
    (dict(node_selector={"pool": "gpu"}), "node_selector", {"pool": "gpu"}, INSTEAD),
    (dict(tolerations=[{"key": "k"}]), "tolerations", [{"key": "k"}], INSTEAD),
    (dict(volumes=[{"name": "v"}]), "volumes", [{"name": "v"}], INSTEAD),
    (dict(volume_mounts=[{"name": "v", "mountPath": "/v"}]), "volume_mounts", [{"name": "v", "mountPath": "/v"}],
     INSTEAD),
    (dict(affinity={"nodeAffinity": {}}), "affinity", {"nodeAffinity": {}}, INSTEAD),
    (dict(service_account_name="sa"), "service_account_name", "sa", INSTEAD),
    (dict(image_pull_secrets=["pull"]), "image_pull_secrets", ["pull"], INSTEAD),
    (dict(priority_class_name="high"), "priority_class_name", "high", INSTEAD),
    (dict(scheduler_name="volcano"), "scheduler_name", "volcano", INSTEAD),
    (dict(env_from=[{"secretRef": {"name": "s"}}]), "env_from", [{"secretRef": {"name": "s"}}], INSTEAD),
    (dict(worker_readiness_probe={"tcpSocket": {"port": 2222}}), "worker_readiness_probe",
     {"tcpSocket": {"port": 2222}}, INSTEAD),
    # resources and GPUs would reach the launcher only (Trainer v2.3.0): the refusal names what sizes a TrainJob
    (dict(launcher_resources={"limits": {"cpu": "1"}}), "launcher_resources", {"limits": {"cpu": "1"}},
     "`resources_per_node`"),
    (dict(worker_resources={"limits": {"cpu": "1"}}), "worker_resources", {"limits": {"cpu": "1"}},
     "node pods only where the runtime has runLauncherAsNode"),
    (dict(gpus_per_worker=1), "gpus_per_worker", 1, "`resources_per_node`"),
    (dict(resources_per_node={"limits": {"memory": "2 GB"}}), "resources_per_node.limits.memory", "2 GB", "quantity"),
    (dict(clean_pod_policy="All"), "clean_pod_policy", "All", INSTEAD),
    (dict(ttl_seconds_after_finished=60), "ttl_seconds_after_finished", 60, INSTEAD),
    (dict(backoff_limit=2), "backoff_limit", 2, INSTEAD),
    (dict(scheduling_policy={"queue": "q"}), "scheduling_policy", {"queue": "q"}, INSTEAD),
    (dict(ssh_auth_mount_path="/root/.ssh"), "ssh_auth_mount_path", "/root/.ssh", INSTEAD),
    (dict(launcher_creation_policy="AtStartup"), "launcher_creation_policy", "AtStartup", INSTEAD),
    (dict(run_launcher_as_worker=True), "run_launcher_as_worker", True, INSTEAD),
    (dict(main_container="mpi"), "main_container", "mpi", INSTEAD),
    (dict(program="/pi", mpi_implementation="Intel"), "mpi_implementation", "Intel", "OpenMPI only"),
    (dict(program="/pi", mpi_implementation="MPICH"), "mpi_implementation", "MPICH", "OpenMPI only"),
    (dict(mpi_implementation="OpenMPI"), "mpi_implementation", "OpenMPI", "only with program"),
    (dict(runtime="Team_MPI"), "runtime", "Team_MPI", "subdomain"),
    (dict(runtime_kind="Runtime"), "runtime_kind", "Runtime", "TrainingRuntime"),
    (dict(workers=0), "workers", 0, ">= 1"),
    (dict(active_deadline_seconds=0), "active_deadline_seconds", 0, ">= 1"),
    (dict(managed_by="kubeflow.org/mpi-operator"), "managed_by", "kubeflow.org/mpi-operator", "trainjob-controller"),
    (dict(env={"OMPI_MCA_orte_default_hostfile": "/h"}), "env", ["OMPI_MCA_orte_default_hostfile"], "Kubeflow Trainer"),
    (dict(base_manifest={**BASE, "kind": "MPIJob"}), "base_manifest.kind", "MPIJob", "TrainJob"),
    (dict(base_manifest={**BASE, "apiVersion": "kubeflow.org/v2beta1"}), "base_manifest.apiVersion",
     "kubeflow.org/v2beta1", "api_version"),
    (dict(base_manifest={**BASE, "spec": {"mpiReplicaSpecs": {}}}), "spec.mpiReplicaSpecs", {}, "runtimeRef"),
    (dict(base_manifest={**BASE, "spec": {"trainer": {"numWorkers": 2}}}), "spec.trainer.numWorkers", 2, "numNodes"),
]  # fmt: skip


@pytest.mark.parametrize(("params", "field", "value", "why"), REFUSED, ids=[r[1] for r in REFUSED])
def test_each_refusal_names_the_parameter_and_its_value_and_nothing_else(params, field, value, why):
    err = refusal(image=IMAGE, **params)
    assert [(e.field, e.value) for e in err.errors] == [(field, value)], str(err)
    assert why in err.errors[0].reason
    assert f"{field}=" in str(err)


@pytest.mark.parametrize("name", ["runtime", "runtime_kind"])
@pytest.mark.parametrize("api_version", ["kubeflow.org/v2beta1", "kubeflow.org/v1"])
def test_the_mpijob_kinds_refuse_the_trainjobs_rows_by_name(api_version, name):
    with pytest.raises(MPIJobValidationError) as err:
        resolve_parameters({"api_version": api_version, "image": IMAGE, name: "openmpi-mpiuser"})
    assert [e.field for e in err.value.errors] == [name]
    assert API_TRAINJOB in err.value.errors[0].reason


def test_a_spec_giving_the_trainer_two_images_is_refused():
    spec = MPIJobSpec(
        api_version=API_TRAINJOB, name="pi", namespace="ns",
        launcher=ReplicaSpec(image="a"), worker=ReplicaSpec(image="b"),
    )  # fmt: skip
    with pytest.raises(MPIJobValidationError) as err:
        resolve(spec)
    assert [(e.field, e.value) for e in err.value.errors] == [("worker.image", "b")]
    assert "spec.trainer.image" in err.value.errors[0].reason


def test_a_trainjob_name_leaves_room_for_its_node_pods_host_names():
    name = build(image=IMAGE, name="x" * 60, workers=100).manifest["metadata"]["name"]
    assert len(TRAINJOB.longest_name(name, 100)) <= 63
