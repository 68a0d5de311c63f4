"""Golden manifests: the exact YAML build_manifest produces for each API version.

Regenerate after an intended change with UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from airflow_mpi.jobspec import (
    API_V1,
    API_V2BETA1,
    Defaults,
    MPIJobSpec,
    Mpirun,
    ReplicaSpec,
    RunPolicy,
    SchedulingPolicy,
    build_manifest,
)

GOLDEN = Path(__file__).parent / "golden"
IMAGE = "registry.example.com/mpi/train:1.0"


def dump(manifest: dict) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


def assert_golden(manifest: dict, name: str) -> None:
    path = GOLDEN / name
    text = dump(manifest)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def full_v2beta1() -> MPIJobSpec:
    return MPIJobSpec(
        name="train-resnet",
        namespace="ml",
        labels={"team": "vision", "app.kubernetes.io/managed-by": "airflow-mpi"},
        annotations={"example.com/owner": "alice@example.com"},
        slots_per_worker=2,
        run_launcher_as_worker=False,
        ssh_auth_mount_path="/home/mpiuser/.ssh",
        launcher_creation_policy="WaitForWorkersReady",
        mpi_implementation="OpenMPI",
        run_policy=RunPolicy(
            clean_pod_policy="Running",
            ttl_seconds_after_finished=3600,
            active_deadline_seconds=86400,
            backoff_limit=0,
            scheduling_policy=SchedulingPolicy(
                min_available=5,
                queue="research",
                min_resources={"cpu": "20", "nvidia.com/gpu": 8},
                priority_class="high-priority",
                schedule_timeout_seconds=300,
            ),
            suspend=False,
            managed_by="kubeflow.org/mpi-operator",
        ),
        launcher=ReplicaSpec(
            image=IMAGE,
            command=["mpirun"],
            args=["-np", "8", "python", "train.py"],
            env={"LOG_LEVEL": "debug", "EPOCHS": 10},
            resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "2Gi"}},
            restart_policy="Never",
            service_account_name="mpi-launcher",
            image_pull_secrets=["regcred"],
            image_pull_policy="IfNotPresent",
            labels={"role": "launcher"},
            annotations={"sidecar.istio.io/inject": "false"},
            priority_class_name="high-priority",
            security_context={"runAsUser": 1000},
            pod_security_context={"fsGroup": 1000},
        ),
        worker=ReplicaSpec(
            replicas=4,
            image=IMAGE,
            env=[
                {"name": "NCCL_DEBUG", "value": "INFO"},
                {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "api"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
            ],
            env_from=[{"configMapRef": {"name": "common-env"}}],
            resources={
                "requests": {"cpu": "4", "memory": "16Gi"},
                "limits": {"cpu": "4", "memory": "16Gi", "example.com/nic": 1},
            },
            gpus=2,
            volumes=[
                {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
            volume_mounts=[
                {"name": "data", "mountPath": "/data", "readOnly": True},
                {"name": "shm", "mountPath": "/dev/shm"},
            ],
            node_selector={"gpu": "a100"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            affinity={
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {
                                    "matchLabels": {"training.kubeflow.org/job-name": "train-resnet"}
                                },
                            },
                        }
                    ]
                }
            },
            service_account_name="mpi-worker",
            image_pull_secrets=["regcred", "mirror"],
            readiness_probe={"tcpSocket": {"port": 2222}, "initialDelaySeconds": 2},
            restart_policy="OnFailure",
            security_context={"capabilities": {"add": ["IPC_LOCK"]}},
            labels={"role": "worker"},
        ),
    )


def full_v1() -> MPIJobSpec:
    return MPIJobSpec(
        name="train-v1",
        namespace="training",
        api_version=API_V1,
        slots_per_worker=4,
        main_container="trainer",
        labels={"team": "nlp"},
        run_policy=RunPolicy(
            clean_pod_policy="All",
            ttl_seconds_after_finished=600,
            active_deadline_seconds=7200,
            backoff_limit=3,
            scheduling_policy=SchedulingPolicy(min_available=3, queue="default"),
            suspend=True,
            managed_by="kueue.x-k8s.io/multikueue",
        ),
        launcher=ReplicaSpec(
            image=IMAGE,
            command=["mpirun", "-np", "8", "python", "train.py"],
            resources={"limits": {"cpu": "1", "memory": "1Gi"}},
            restart_policy="OnFailure",
        ),
        worker=ReplicaSpec(
            replicas=2,
            image=IMAGE,
            env={"OMP_NUM_THREADS": "4"},
            gpus=4,
            restart_policy="ExitCode",
            volumes=[{"name": "scratch", "emptyDir": {}}],
            volume_mounts=[{"name": "scratch", "mountPath": "/scratch"}],
        ),
    )


def test_golden_v2beta1_full():
    assert_golden(build_manifest(full_v2beta1()), "v2beta1_full.yaml")


def test_golden_v1_full():
    assert_golden(build_manifest(full_v1()), "v1_full.yaml")


def test_golden_v2beta1_minimal():
    spec = MPIJobSpec(
        name="pi",
        launcher=ReplicaSpec(image="mpioperator/mpi-pi"),
        worker=ReplicaSpec(replicas=2, image="mpioperator/mpi-pi"),
    )
    assert_golden(build_manifest(spec), "v2beta1_minimal.yaml")


def test_golden_v2beta1_merged_onto_base_file():
    spec = MPIJobSpec(
        name=None,  # from the base manifest
        base_manifest=str(GOLDEN / "base_v2beta1.yaml"),
        launcher=ReplicaSpec(image=IMAGE, command=["mpirun", "python", "train.py"]),
        worker=ReplicaSpec(replicas=8, image=IMAGE, env={"NCCL_DEBUG": "WARN"}, gpus=1),
        run_policy=RunPolicy(backoff_limit=2),
    )
    assert_golden(build_manifest(spec), "v2beta1_merged.yaml")


def test_golden_v2beta1_with_the_task_defaults():
    """What the operator submits for parameters only: the defaults filled in, the launcher's init container waiting
    for its workers as long as the task's schedule_timeout (+ a minute for their sshd) says."""
    spec = MPIJobSpec(
        name="pi",
        namespace="ml",
        launcher=ReplicaSpec(image="mpioperator/mpi-pi"),
        worker=ReplicaSpec(replicas=2, image="mpioperator/mpi-pi"),
        launch=Mpirun(["/home/mpiuser/pi"]),
        defaults=Defaults(retries=0, schedule_timeout=900),
    )
    assert_golden(build_manifest(spec), "v2beta1_task_defaults.yaml")


@pytest.mark.parametrize("factory", [full_v2beta1, full_v1])
def test_build_manifest_does_not_mutate_the_spec(factory):
    spec, pristine = factory(), factory()
    build_manifest(spec)
    build_manifest(spec)
    assert spec == pristine


def test_v1_layout_puts_clean_pod_policy_top_level_and_names_containers_after_main_container():
    manifest = build_manifest(full_v1())
    assert manifest["apiVersion"] == API_V1
    assert manifest["spec"]["cleanPodPolicy"] == "All"
    assert "cleanPodPolicy" not in manifest["spec"]["runPolicy"]
    assert manifest["spec"]["mainContainer"] == "trainer"
    for role in ("Launcher", "Worker"):
        assert (
            manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]["name"]
            == "trainer"
        )


def test_v2beta1_layout_without_defaults_writes_only_what_is_given():
    manifest = build_manifest(
        MPIJobSpec(name="pi", launcher=ReplicaSpec(image="i"), worker=ReplicaSpec(replicas=1, image="i"))
    )
    assert manifest["apiVersion"] == API_V2BETA1
    assert manifest["kind"] == "MPIJob"
    assert "slotsPerWorker" not in manifest["spec"] and "mpiImplementation" not in manifest["spec"]
    assert "runPolicy" not in manifest["spec"]
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert launcher["replicas"] == 1
    assert "restartPolicy" not in launcher  # the operator's default (OnFailure) applies
    assert launcher["template"]["spec"]["containers"] == [{"name": "launcher", "image": "i"}]
    assert (
        manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] == "worker"
    )


def test_gpus_shorthand_sets_the_nvidia_limit_and_keeps_other_limits():
    manifest = build_manifest(
        MPIJobSpec(
            name="pi",
            launcher=ReplicaSpec(image="i"),
            worker=ReplicaSpec(replicas=1, image="i", gpus=8, resources={"limits": {"memory": "8Gi"}}),
        )
    )
    limits = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ]
    assert limits == {"memory": "8Gi", "nvidia.com/gpu": 8}


def test_env_shorthand_and_image_pull_secrets_shapes():
    manifest = build_manifest(
        MPIJobSpec(
            name="pi",
            launcher=ReplicaSpec(
                image="i", env={"A": "1", "B": 2, "C": 0.5}, image_pull_secrets=["one", "two"]
            ),
            worker=ReplicaSpec(replicas=1, image="i"),
        )
    )
    pod = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert pod["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
        {"name": "C", "value": "0.5"},
    ]
    assert pod["imagePullSecrets"] == [{"name": "one"}, {"name": "two"}]
