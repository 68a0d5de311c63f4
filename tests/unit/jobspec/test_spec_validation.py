"""validate(): every rule, one bad value at a time, plus values that must stay accepted."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import pytest

from airflow_mpi.jobspec import (
    API_V1,
    API_V2BETA1,
    MPIJobSpec,
    MPIJobValidationError,
    ReplicaSpec,
    SchedulingPolicy,
    build_manifest,
    validate,
)
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.validation import check_manifest

V2, V1 = API_V2BETA1, API_V1


def valid_spec(api: str = V2) -> MPIJobSpec:
    return MPIJobSpec(
        name="job",
        api_version=api,
        launcher=ReplicaSpec(image="img"),
        worker=ReplicaSpec(replicas=2, image="img"),
    )


# Mutators: each returns a function that changes one part of a valid spec.
def s(**kw):
    return lambda spec: spec.__dict__.update(kw)


def launcher(**kw):
    return lambda spec: spec.launcher.__dict__.update(kw)


def worker(**kw):
    return lambda spec: spec.worker.__dict__.update(kw)


def run(**kw):
    return lambda spec: spec.run_policy.__dict__.update(kw)


def sched(**kw):
    return lambda spec: setattr(spec.run_policy, "scheduling_policy", SchedulingPolicy(**kw))


def base(manifest: dict):
    return lambda spec: setattr(spec, "base_manifest", manifest)


def base_worker_pod(pod: dict, api: str = V2):
    return base({"apiVersion": api, "spec": {"mpiReplicaSpecs": {"Worker": {"template": {"spec": pod}}}}})


NAME_54 = "a" * 54  # v2beta1 maximum with one worker: "<name>-launcher" and "<name>-worker-0" are 63
NAME_53 = "b" * 53

# (id, api, mutation, expected field, expected value)
CASES = [
    # --- names (mpi-operator validateMPIJobName + Service/launcher names)
    ("name-not-dns1035", V2, s(name="Bad_Name"), "name", "Bad_Name"),
    ("name-starts-with-digit", V2, s(name="1job"), "name", "1job"),
    ("name-with-dot", V1, s(name="my.job"), "name", "my.job"),
    ("name-missing", V2, s(name=None), "name", None),
    ("name-not-str", V2, s(name=5), "name", 5),
    ("name-too-long-for-launcher-and-worker", V2, s(name="a" * 55), "name", "a" * 55),
    (
        "name-worker-index-too-long",
        V2,
        lambda sp: (s(name=NAME_53)(sp), worker(replicas=101)(sp)),
        "name",
        NAME_53,
    ),
    ("name-worker-too-long-v1", V1, s(name="c" * 55), "name", "c" * 55),
    ("namespace", V2, s(namespace="Team A"), "namespace", "Team A"),
    # --- replicas
    ("launcher-replicas-2", V2, launcher(replicas=2), "launcher.replicas", 2),
    ("launcher-replicas-0", V1, launcher(replicas=0), "launcher.replicas", 0),
    ("launcher-replicas-true", V2, launcher(replicas=True), "launcher.replicas", True),
    ("worker-replicas-0", V2, worker(replicas=0), "worker.replicas", 0),
    ("worker-replicas-negative", V1, worker(replicas=-1), "worker.replicas", -1),
    ("worker-replicas-missing", V2, worker(replicas=None), "worker.replicas", None),
    ("worker-replicas-str", V2, worker(replicas="2"), "worker.replicas", "2"),
    ("worker-replicas-bool", V2, worker(replicas=True), "worker.replicas", True),
    ("worker-replicas-int32", V2, worker(replicas=2**31), "worker.replicas", 2**31),
    # --- slots
    ("slots-0", V2, s(slots_per_worker=0), "slots_per_worker", 0),
    ("slots-negative", V1, s(slots_per_worker=-2), "slots_per_worker", -2),
    ("slots-float", V2, s(slots_per_worker=1.5), "slots_per_worker", 1.5),
    # --- restart policies
    ("v2-launcher-always", V2, launcher(restart_policy="Always"), "launcher.restart_policy", "Always"),
    ("v2-worker-exitcode", V2, worker(restart_policy="ExitCode"), "worker.restart_policy", "ExitCode"),
    ("v2-lowercase", V2, worker(restart_policy="never"), "worker.restart_policy", "never"),
    ("v1-unknown", V1, worker(restart_policy="Sometimes"), "worker.restart_policy", "Sometimes"),
    ("v1-launcher-always", V1, launcher(restart_policy="Always"), "launcher.restart_policy", "Always"),
    # --- enums and v2beta1 spec fields
    ("mpi-implementation", V2, s(mpi_implementation="openmpi"), "mpi_implementation", "openmpi"),
    (
        "launcher-creation-policy",
        V2,
        s(launcher_creation_policy="Eventually"),
        "launcher_creation_policy",
        "Eventually",
    ),
    (
        "wait-without-probe",
        V2,
        s(launcher_creation_policy="WaitForWorkersReady"),
        "launcher_creation_policy",
        "WaitForWorkersReady",
    ),
    ("ssh-path-relative", V2, s(ssh_auth_mount_path="home/.ssh"), "ssh_auth_mount_path", "home/.ssh"),
    ("ssh-path-empty", V2, s(ssh_auth_mount_path=""), "ssh_auth_mount_path", ""),
    ("run-launcher-as-worker-str", V2, s(run_launcher_as_worker="yes"), "run_launcher_as_worker", "yes"),
    # --- fields the chosen version lacks
    ("v1-ssh-auth-mount-path", V1, s(ssh_auth_mount_path="/root/.ssh"), "ssh_auth_mount_path", "/root/.ssh"),
    ("v1-mpi-implementation", V1, s(mpi_implementation="Intel"), "mpi_implementation", "Intel"),
    (
        "v1-launcher-creation-policy",
        V1,
        s(launcher_creation_policy="AtStartup"),
        "launcher_creation_policy",
        "AtStartup",
    ),
    ("v1-run-launcher-as-worker", V1, s(run_launcher_as_worker=True), "run_launcher_as_worker", True),
    ("v2-main-container", V2, s(main_container="mpi"), "main_container", "mpi"),
    (
        "v1-main-container-unknown",
        V1,
        s(main_container="trainer", worker=ReplicaSpec(replicas=1, image="i", container_name="mpi")),
        "main_container",
        "trainer",
    ),
    ("v1-base-ssh-path", V1, base({"spec": {"sshAuthMountPath": "/x"}}), "ssh_auth_mount_path", "/x"),
    ("v2-base-top-level-clean", V2, base({"spec": {"cleanPodPolicy": "All"}}), "spec.cleanPodPolicy", "All"),
    ("base-unknown-spec-field", V2, base({"spec": {"slots": 2}}), "spec.slots", 2),
    ("base-unknown-run-policy-field", V2, base({"spec": {"runPolicy": {"ttl": 5}}}), "spec.runPolicy.ttl", 5),
    (
        "base-unknown-replica-type",
        V2,
        base({"spec": {"mpiReplicaSpecs": {"PS": {"replicas": 1}}}}),
        "mpi_replica_specs.PS",
        {"replicas": 1},
    ),
    (
        "base-unknown-replica-field",
        V2,
        base({"spec": {"mpiReplicaSpecs": {"Worker": {"count": 3}}}}),
        "mpi_replica_specs.Worker.count",
        3,
    ),
    ("base-api-version-mismatch", V2, base({"apiVersion": V1}), "base_manifest.apiVersion", V1),
    ("base-kind", V2, base({"kind": "Job"}), "base_manifest.kind", "Job"),
    (
        "base-replica-specs-not-mapping",
        V2,
        base({"spec": {"mpiReplicaSpecs": None, "runPolicy": []}}),
        "run_policy",
        [],
    ),
    # --- run policy
    ("clean-pod-policy", V2, run(clean_pod_policy="Always"), "run_policy.clean_pod_policy", "Always"),
    (
        "clean-pod-policy-v1",
        V1,
        run(clean_pod_policy="Succeeded"),
        "run_policy.clean_pod_policy",
        "Succeeded",
    ),
    (
        "v1-clean-conflict",
        V1,
        base({"spec": {"cleanPodPolicy": "None", "runPolicy": {"cleanPodPolicy": "All"}}}),
        "run_policy.clean_pod_policy",
        "None",
    ),
    ("ttl-negative", V2, run(ttl_seconds_after_finished=-1), "run_policy.ttl_seconds_after_finished", -1),
    (
        "active-deadline-negative",
        V1,
        run(active_deadline_seconds=-5),
        "run_policy.active_deadline_seconds",
        -5,
    ),
    (
        "active-deadline-str",
        V2,
        run(active_deadline_seconds="60"),
        "run_policy.active_deadline_seconds",
        "60",
    ),
    ("backoff-negative", V2, run(backoff_limit=-1), "run_policy.backoff_limit", -1),
    ("backoff-float", V1, run(backoff_limit=2.0), "run_policy.backoff_limit", 2.0),
    ("suspend-str", V2, run(suspend="no"), "run_policy.suspend", "no"),
    (
        "managed-by-v2-other",
        V2,
        run(managed_by="example.com/ctl"),
        "run_policy.managed_by",
        "example.com/ctl",
    ),
    (
        "managed-by-v2-training-operator",
        V2,
        run(managed_by="kubeflow.org/training-operator"),
        "run_policy.managed_by",
        "kubeflow.org/training-operator",
    ),
    (
        "managed-by-v1-mpi-operator",
        V1,
        run(managed_by="kubeflow.org/mpi-operator"),
        "run_policy.managed_by",
        "kubeflow.org/mpi-operator",
    ),
    (
        "schedule-timeout-negative",
        V2,
        sched(schedule_timeout_seconds=-1),
        "run_policy.scheduling_policy.schedule_timeout_seconds",
        -1,
    ),
    ("min-available-0", V2, sched(min_available=0), "run_policy.scheduling_policy.min_available", 0),
    ("min-available-above-gang", V2, sched(min_available=4), "run_policy.scheduling_policy.min_available", 4),
    ("queue-empty", V1, sched(queue=""), "run_policy.scheduling_policy.queue", ""),
    (
        "priority-class",
        V2,
        sched(priority_class="High_Pri"),
        "run_policy.scheduling_policy.priority_class",
        "High_Pri",
    ),
    (
        "min-resources-quantity",
        V2,
        sched(min_resources={"cpu": "lots"}),
        "run_policy.scheduling_policy.min_resources.cpu",
        "lots",
    ),
    (
        "min-resources-negative",
        V2,
        sched(min_resources={"memory": "-1Gi"}),
        "run_policy.scheduling_policy.min_resources.memory",
        "-1Gi",
    ),
    (
        "scheduling-policy-type",
        V2,
        run(scheduling_policy={"queue": "q"}),
        "run_policy.scheduling_policy",
        {"queue": "q"},
    ),
    # --- resources
    (
        "cpu-with-space",
        V2,
        launcher(resources={"limits": {"cpu": "2 GB"}}),
        "launcher.resources.limits.cpu",
        "2 GB",
    ),
    (
        "memory-garbage",
        V2,
        worker(resources={"requests": {"memory": "abc"}}),
        "worker.resources.requests.memory",
        "abc",
    ),
    ("cpu-negative", V1, worker(resources={"limits": {"cpu": "-1"}}), "worker.resources.limits.cpu", "-1"),
    ("cpu-bool", V2, worker(resources={"limits": {"cpu": True}}), "worker.resources.limits.cpu", True),
    ("cpu-float", V2, worker(resources={"limits": {"cpu": 0.5}}), "worker.resources.limits.cpu", 0.5),
    (
        "request-above-limit",
        V2,
        worker(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}),
        "worker.resources.requests.cpu",
        "2",
    ),
    (
        "memory-request-above-limit",
        V2,
        worker(resources={"requests": {"memory": "1Gi"}, "limits": {"memory": "1000Mi"}}),
        "worker.resources.requests.memory",
        "1Gi",
    ),
    (
        "gpu-fraction",
        V2,
        worker(resources={"limits": {"nvidia.com/gpu": "0.5"}}),
        "worker.resources.limits.nvidia.com/gpu",
        "0.5",
    ),
    (
        "extended-request-without-limit",
        V2,
        worker(resources={"requests": {"nvidia.com/gpu": 1}}),
        "worker.resources.limits.nvidia.com/gpu",
        None,
    ),
    (
        "extended-request-not-equal",
        V2,
        worker(resources={"requests": {"example.com/fpga": 1}, "limits": {"example.com/fpga": 2}}),
        "worker.resources.requests.example.com/fpga",
        1,
    ),
    (
        "hugepages-not-equal",
        V2,
        worker(resources={"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "2Gi"}}),
        "worker.resources.requests.hugepages-2Mi",
        "1Gi",
    ),
    (
        "resource-name-unprefixed",
        V2,
        worker(resources={"limits": {"gpu": 1}}),
        "worker.resources.limits",
        "gpu",
    ),
    (
        "resource-name-invalid",
        V2,
        worker(resources={"limits": {"example.com/bad name": 1}}),
        "worker.resources.limits",
        "example.com/bad name",
    ),
    (
        "resources-unknown-key",
        V2,
        worker(resources={"limit": {"cpu": "1"}}),
        "worker.resources.limit",
        {"cpu": "1"},
    ),
    ("resources-not-mapping", V2, worker(resources="4cpu"), "worker.resources", "4cpu"),
    ("limits-not-mapping", V2, launcher(resources={"limits": ["cpu"]}), "launcher.resources.limits", ["cpu"]),
    ("gpus-float", V2, worker(gpus=1.5), "worker.gpus", 1.5),
    ("gpus-negative", V2, worker(gpus=-1), "worker.gpus", -1),
    ("gpus-bool", V1, worker(gpus=True), "worker.gpus", True),
    ("gpus-conflict", V2, worker(gpus=2, resources={"limits": {"nvidia.com/gpu": 4}}), "worker.gpus", 2),
    # --- images, commands, env
    ("launcher-image-missing", V2, launcher(image=None), "launcher.image", None),
    ("worker-image-empty", V1, worker(image=""), "worker.image", ""),
    ("worker-image-blank", V2, worker(image="  "), "worker.image", "  "),
    ("command-str", V2, launcher(command="mpirun -np 2 app"), "launcher.command", "mpirun -np 2 app"),
    ("args-not-strings", V2, launcher(args=["-np", 2]), "launcher.args", ["-np", 2]),
    ("env-name-digit", V2, worker(env={"1BAD": "x"}), "worker.env[0].name", "1BAD"),
    ("env-name-equals", V1, worker(env=[{"name": "A=B", "value": "x"}]), "worker.env[0].name", "A=B"),
    ("env-name-dotdot", V2, worker(env={"..x": "1"}), "worker.env[0].name", "..x"),
    ("env-shorthand-bool", V2, worker(env={"FLAG": True}), "worker.env.FLAG", True),
    ("env-shorthand-none", V2, worker(env={"FLAG": None}), "worker.env.FLAG", None),
    ("env-not-list", V2, worker(env="A=B"), "worker.env", "A=B"),
    ("env-value-int", V2, worker(env=[{"name": "N", "value": 3}]), "worker.env[0].value", 3),
    (
        "env-value-and-value-from",
        V2,
        worker(env=[{"name": "N", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        "worker.env[0].valueFrom",
        {"fieldRef": {"fieldPath": "metadata.name"}},
    ),
    (
        "env-two-sources",
        V2,
        worker(
            env=[
                {
                    "name": "N",
                    "valueFrom": {
                        "secretKeyRef": {"name": "s", "key": "k"},
                        "configMapKeyRef": {"name": "c", "key": "k"},
                    },
                }
            ]
        ),
        "worker.env[0].valueFrom",
        {"secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}},
    ),
    (
        "env-secret-key-missing",
        V2,
        worker(env=[{"name": "N", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
        "worker.env[0].valueFrom.secretKeyRef.key",
        None,
    ),
    (
        "env-configmap-name-invalid",
        V1,
        worker(env=[{"name": "N", "valueFrom": {"configMapKeyRef": {"name": "Bad_Name", "key": "k"}}}]),
        "worker.env[0].valueFrom.configMapKeyRef.name",
        "Bad_Name",
    ),
    (
        "env-field-ref-path-missing",
        V2,
        launcher(env=[{"name": "N", "valueFrom": {"fieldRef": {}}}]),
        "launcher.env[0].valueFrom.fieldRef.fieldPath",
        None,
    ),
    (
        "env-from-two-sources",
        V2,
        worker(env_from=[{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]),
        "worker.env_from[0]",
        {"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}},
    ),
    ("env-from-no-name", V2, worker(env_from=[{"secretRef": {}}]), "worker.env_from[0].secretRef.name", None),
    # --- labels and annotations
    ("label-key-space", V2, s(labels={"bad key": "v"}), "labels", "bad key"),
    ("label-key-uppercase-prefix", V2, s(labels={"Example.com/team": "v"}), "labels", "Example.com/team"),
    ("label-key-name-too-long", V2, s(labels={"k" * 64: "v"}), "labels", "k" * 64),
    ("label-key-two-slashes", V2, s(labels={"a/b/c": "v"}), "labels", "a/b/c"),
    ("label-value-too-long", V2, s(labels={"team": "v" * 64}), "labels.team", "v" * 64),
    ("label-value-edge", V1, s(labels={"team": "-vision"}), "labels.team", "-vision"),
    ("label-value-not-str", V2, s(labels={"n": 1}), "labels.n", 1),
    ("pod-label-value", V2, worker(labels={"role": "a b"}), "worker.labels.role", "a b"),
    ("annotation-key", V2, s(annotations={"bad key": "v"}), "annotations", "bad key"),
    ("annotation-value-not-str", V2, launcher(annotations={"n": 3}), "launcher.annotations.n", 3),
    ("node-selector-value", V2, worker(node_selector={"gpu": "a 100"}), "worker.node_selector.gpu", "a 100"),
    ("node-selector-key", V2, worker(node_selector={"a b": "x"}), "worker.node_selector", "a b"),
    # --- volumes and mounts
    (
        "mount-without-volume",
        V2,
        worker(volume_mounts=[{"name": "data", "mountPath": "/data"}]),
        "worker.volume_mounts[0].name",
        "data",
    ),
    (
        "mount-volume-of-other-role",
        V2,
        lambda sp: (
            launcher(volumes=[{"name": "data", "emptyDir": {}}])(sp),
            worker(volume_mounts=[{"name": "data", "mountPath": "/d"}])(sp),
        ),
        "worker.volume_mounts[0].name",
        "data",
    ),
    (
        "mount-path-missing",
        V2,
        worker(volumes=[{"name": "d", "emptyDir": {}}], volume_mounts=[{"name": "d"}]),
        "worker.volume_mounts[0].mountPath",
        None,
    ),
    (
        "mount-path-duplicate",
        V2,
        worker(
            volumes=[{"name": "d", "emptyDir": {}}, {"name": "e", "emptyDir": {}}],
            volume_mounts=[{"name": "d", "mountPath": "/x"}, {"name": "e", "mountPath": "/x"}],
        ),
        "worker.volume_mounts[1].mountPath",
        "/x",
    ),
    (
        "mount-on-ssh-path",
        V2,
        worker(
            volumes=[{"name": "d", "emptyDir": {}}], volume_mounts=[{"name": "d", "mountPath": "/root/.ssh"}]
        ),
        "worker.volume_mounts[0].mountPath",
        "/root/.ssh",
    ),
    (
        "mount-on-custom-ssh-path",
        V2,
        lambda sp: (
            s(ssh_auth_mount_path="/home/u/.ssh")(sp),
            worker(
                volumes=[{"name": "d", "emptyDir": {}}],
                volume_mounts=[{"name": "d", "mountPath": "/home/u/.ssh"}],
            )(sp),
        ),
        "worker.volume_mounts[0].mountPath",
        "/home/u/.ssh",
    ),
    (
        "mount-on-etc-mpi",
        V2,
        launcher(
            volumes=[{"name": "d", "emptyDir": {}}], volume_mounts=[{"name": "d", "mountPath": "/etc/mpi"}]
        ),
        "launcher.volume_mounts[0].mountPath",
        "/etc/mpi",
    ),
    (
        "mount-on-opt-kube-v1",
        V1,
        launcher(
            volumes=[{"name": "d", "emptyDir": {}}], volume_mounts=[{"name": "d", "mountPath": "/opt/kube"}]
        ),
        "launcher.volume_mounts[0].mountPath",
        "/opt/kube",
    ),
    (
        "volume-reserved-ssh",
        V2,
        worker(volumes=[{"name": "ssh-auth", "emptyDir": {}}]),
        "worker.volumes[0].name",
        "ssh-auth",
    ),
    (
        "volume-reserved-config-v1",
        V1,
        worker(volumes=[{"name": "mpi-job-config", "emptyDir": {}}]),
        "worker.volumes[0].name",
        "mpi-job-config",
    ),
    (
        "volume-name-invalid",
        V2,
        worker(volumes=[{"name": "Data_1", "emptyDir": {}}]),
        "worker.volumes[0].name",
        "Data_1",
    ),
    (
        "volume-duplicate",
        V2,
        worker(volumes=[{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]),
        "worker.volumes[1].name",
        "d",
    ),
    (
        "volume-two-sources",
        V2,
        worker(volumes=[{"name": "d", "emptyDir": {}, "hostPath": {"path": "/x"}}]),
        "worker.volumes[0]",
        ["emptyDir", "hostPath"],
    ),
    ("volume-no-source", V2, worker(volumes=[{"name": "d"}]), "worker.volumes[0]", []),
    # --- pod fields
    (
        "toleration-operator",
        V2,
        worker(tolerations=[{"key": "k", "operator": "Maybe"}]),
        "worker.tolerations[0].operator",
        "Maybe",
    ),
    (
        "toleration-effect",
        V2,
        worker(tolerations=[{"key": "k", "operator": "Exists", "effect": "NoRun"}]),
        "worker.tolerations[0].effect",
        "NoRun",
    ),
    (
        "toleration-exists-with-value",
        V2,
        worker(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        "worker.tolerations[0].value",
        "v",
    ),
    (
        "toleration-seconds-without-noexecute",
        V2,
        worker(
            tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]
        ),
        "worker.tolerations[0].tolerationSeconds",
        30,
    ),
    (
        "toleration-empty-key-equal",
        V2,
        worker(tolerations=[{"operator": "Equal", "value": "v"}]),
        "worker.tolerations[0].operator",
        "Equal",
    ),
    ("service-account", V2, worker(service_account_name="Bad_SA"), "worker.service_account_name", "Bad_SA"),
    ("pull-secrets-str", V2, worker(image_pull_secrets="regcred"), "worker.image_pull_secrets", "regcred"),
    ("pull-secrets-empty-name", V2, worker(image_pull_secrets=[""]), "worker.image_pull_secrets", [""]),
    (
        "pull-secrets-invalid-name",
        V2,
        launcher(image_pull_secrets=["Reg Cred"]),
        "launcher.image_pull_secrets[0]",
        "Reg Cred",
    ),
    ("pull-policy", V2, launcher(image_pull_policy="always"), "launcher.image_pull_policy", "always"),
    ("priority-class-name", V1, worker(priority_class_name="High"), "worker.priority_class_name", "High"),
    (
        "container-name",
        V2,
        worker(container_name="Main_Container"),
        "worker.container_name",
        "Main_Container",
    ),
    ("container-name-type", V2, worker(container_name=3), "worker.container_name", 3),
    ("security-context", V2, worker(security_context="privileged"), "worker.security_context", "privileged"),
    ("pod-security-context", V2, worker(pod_security_context=[]), "worker.pod_security_context", []),
    ("affinity", V2, worker(affinity="zone-a"), "worker.affinity", "zone-a"),
    (
        "probe-without-handler",
        V2,
        worker(readiness_probe={"initialDelaySeconds": 2}),
        "worker.readiness_probe",
        {"initialDelaySeconds": 2},
    ),
    (
        "probe-two-handlers",
        V2,
        worker(readiness_probe={"exec": {"command": ["true"]}, "tcpSocket": {"port": 22}}),
        "worker.readiness_probe",
        {"exec": {"command": ["true"]}, "tcpSocket": {"port": 22}},
    ),
    # --- base manifest pods and containers
    (
        "base-sidecar-without-image",
        V2,
        base_worker_pod({"containers": [{"name": "worker"}, {"name": "sidecar"}]}),
        "worker.containers[sidecar].image",
        None,
    ),
    (
        "base-duplicate-container-names",
        V2,
        base_worker_pod(
            {"containers": [{"name": "worker"}, {"name": "x", "image": "i"}, {"name": "x", "image": "j"}]}
        ),
        "worker.containers[x].container_name",
        "x",
    ),
    # --- top-level parameter types
    ("api-version", V2, s(api_version="kubeflow.org/v1alpha1"), "api_version", "kubeflow.org/v1alpha1"),
    ("launcher-as-dict", V2, s(launcher={"image": "i"}), "launcher", {"image": "i"}),
    ("run-policy-as-dict", V2, s(run_policy={"backoff_limit": 1}), "run_policy", {"backoff_limit": 1}),
]


@pytest.mark.parametrize("api, mutate, field, value", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule_rejects_a_bad_value(api, mutate, field, value):
    spec = valid_spec(api)
    mutate(spec)
    with pytest.raises(MPIJobValidationError) as info:
        validate(spec)
    error = info.value
    assert (field, value) in [(e.field, e.value) for e in error.errors], str(error)
    assert f"{field}={value!r}: " in str(error)
    with pytest.raises(MPIJobValidationError):
        build_manifest(spec)


def test_the_valid_specs_used_above_are_valid():
    for api in (V2, V1):
        validate(valid_spec(api))


ACCEPTED = [
    ("name-at-v2-limit", V2, s(name=NAME_54)),
    ("name-at-worker-limit", V2, lambda sp: (s(name=NAME_53)(sp), worker(replicas=100)(sp))),
    ("v1-no-launcher-name-rule", V1, s(name="d" * 54)),
    (
        "quantities",
        V2,
        worker(
            resources={
                "requests": {"cpu": "500m", "memory": "1.5Gi", "ephemeral-storage": "1e3"},
                "limits": {"cpu": 1, "memory": "2Gi", "ephemeral-storage": "+1E"},
            }
        ),
    ),
    ("gpu-as-millis", V2, worker(resources={"limits": {"nvidia.com/gpu": "1000m"}})),
    (
        "gpu-request-equal-limit",
        V2,
        worker(resources={"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": "2"}}),
    ),
    ("gpus-equal-to-limit", V2, worker(gpus=2, resources={"limits": {"nvidia.com/gpu": "2"}})),
    ("gpus-zero", V2, worker(gpus=0)),
    (
        "hugepages",
        V2,
        worker(resources={"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "1Gi"}}),
    ),
    ("native-prefixed", V2, worker(resources={"limits": {"kubernetes.io/batch-cpu": "100m"}})),
    ("request-without-limit", V2, worker(resources={"requests": {"cpu": "2"}})),
    (
        "v1-restart-policies",
        V1,
        lambda sp: (launcher(restart_policy="ExitCode")(sp), worker(restart_policy="Always")(sp)),
    ),
    (
        "v2-restart-policies",
        V2,
        lambda sp: (launcher(restart_policy="OnFailure")(sp), worker(restart_policy="Never")(sp)),
    ),
    ("managed-by-multikueue-v2", V2, run(managed_by="kueue.x-k8s.io/multikueue")),
    ("managed-by-multikueue-v1", V1, run(managed_by="kueue.x-k8s.io/multikueue")),
    ("managed-by-v2-own", V2, run(managed_by="kubeflow.org/mpi-operator")),
    ("managed-by-v1-own", V1, run(managed_by="kubeflow.org/training-operator")),
    ("v1-suspend", V1, run(suspend=True)),
    ("zero-run-policy", V2, run(ttl_seconds_after_finished=1, active_deadline_seconds=0, backoff_limit=0)),
    (
        "v1-ttl-zero",
        V1,
        run(ttl_seconds_after_finished=0),
    ),  # training-operator deletes the whole job: no rerun
    (
        "min-available-whole-gang",
        V2,
        sched(min_available=3, schedule_timeout_seconds=0, min_resources={"cpu": 4, "nvidia.com/gpu": "8"}),
    ),
    (
        "wait-with-probe",
        V2,
        lambda sp: (
            s(launcher_creation_policy="WaitForWorkersReady")(sp),
            worker(readiness_probe={"tcpSocket": {"port": 22}})(sp),
        ),
    ),
    ("intel-mpich", V2, s(mpi_implementation="MPICH", slots_per_worker=8, run_launcher_as_worker=True)),
    ("labels", V2, s(labels={"app.kubernetes.io/name": "x", "empty": "", "a_b.c-d": "A_b.C-9"})),
    ("annotation-uppercase-prefix", V2, s(annotations={"Example.com/Owner": "any value: with spaces"})),
    (
        "env-forms",
        V2,
        worker(
            env=[
                {"name": "my.env-name", "value": ""},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
                {"name": "EMPTY"},
            ]
        ),
    ),
    (
        "env-from",
        V2,
        worker(
            env_from=[
                {"secretRef": {"name": "s"}, "prefix": "S_"},
                {"configMapRef": {"name": "c", "optional": True}},
            ]
        ),
    ),
    (
        "tolerations",
        V2,
        worker(
            tolerations=[
                {"operator": "Exists"},
                {"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 60},
            ]
        ),
    ),
    (
        "mount-operator-volume",
        V2,
        worker(volume_mounts=[{"name": "ssh-auth", "mountPath": "/home/other/.ssh"}]),
    ),
    (
        "same-volume-two-mounts",
        V2,
        worker(
            volumes=[{"name": "d", "emptyDir": {}}],
            volume_mounts=[
                {"name": "d", "mountPath": "/a", "subPath": "a"},
                {"name": "d", "mountPath": "/b", "subPath": "b"},
            ],
        ),
    ),
    ("v1-main-container", V1, s(main_container="trainer")),
    ("all-probe-handlers", V2, worker(readiness_probe={"grpc": {"port": 9000}})),
]


@pytest.mark.parametrize("api, mutate", [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_valid_values_are_accepted(api, mutate):
    spec = valid_spec(api)
    mutate(spec)
    validate(spec)
    assert build_manifest(spec)["apiVersion"] == api


def test_all_violations_are_reported_together_first_one_in_the_attributes():
    spec = valid_spec()
    spec.name = "Bad"
    spec.worker.replicas = 0
    spec.launcher.resources = {"limits": {"cpu": "2 GB"}}
    with pytest.raises(MPIJobValidationError) as info:
        validate(spec)
    error = info.value
    assert [e.field for e in error.errors] == ["name", "launcher.resources.limits.cpu", "worker.replicas"]
    assert (error.field, error.value) == ("name", "Bad")
    assert "worker.replicas=0: must be >= 1" in str(error)
    assert str(error).count("; ") == 2


def test_single_violation_message_matches_the_contract():
    spec = valid_spec()
    spec.worker.replicas = 0
    with pytest.raises(MPIJobValidationError) as info:
        validate(spec)
    assert str(info.value) == "worker.replicas=0: must be >= 1"
    assert (info.value.field, info.value.value, info.value.reason) == ("worker.replicas", 0, "must be >= 1")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("count", [1, 3])
def test_error_pickles(count):
    errors = [MPIJobValidationError(f"f{i}", i, "bad") for i in range(count)]
    error = MPIJobValidationError.from_errors(errors)
    clone = pickle.loads(pickle.dumps(error))
    assert str(clone) == str(error)
    assert [(e.field, e.value) for e in clone.errors] == [(e.field, e.value) for e in error.errors]


def test_validate_does_not_mutate_the_spec():
    spec = valid_spec()
    spec.worker = replace(spec.worker, env={"A": 1}, gpus=1)
    before = copy.deepcopy(spec)
    validate(spec)
    assert spec == before


def test_spec_without_parameters_for_a_role_uses_the_base_manifest():
    spec = MPIJobSpec(
        name="job",
        base_manifest={
            "spec": {
                "mpiReplicaSpecs": {
                    "Launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "i"}]}}},
                    "Worker": {
                        "replicas": 1,
                        "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}},
                    },
                }
            }
        },
    )
    validate(spec)


def raw_manifest() -> dict:
    return build_manifest(valid_spec())


@pytest.mark.parametrize(
    "edit, field, value",
    [
        (
            lambda m: m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[]),
            "worker.containers",
            [],
        ),
        (
            lambda m: m["spec"]["mpiReplicaSpecs"]["Worker"]["template"].update(spec=None),
            "worker.template.spec",
            None,
        ),
        (lambda m: m["spec"]["mpiReplicaSpecs"]["Launcher"].update(template=[]), "launcher.template", []),
        (lambda m: m["spec"]["mpiReplicaSpecs"].pop("Launcher"), "launcher", None),
        (lambda m: m["spec"].update(mpiReplicaSpecs=[]), "mpi_replica_specs", []),
        (lambda m: m.update(spec="x"), "spec", "x"),
        (lambda m: m.update(metadata=None), "name", None),
        (lambda m: m.update(apiVersion="v1"), "api_version", "v1"),
        (
            lambda m: m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append("x"),
            "worker.containers[1]",
            "x",
        ),
    ],
)
def test_structural_rules_on_a_raw_manifest(edit, field, value):
    manifest = raw_manifest()
    edit(manifest)
    errors = ErrorList()
    check_manifest(errors, manifest)
    assert (field, value) in [(e.field, e.value) for e in errors.items], [str(e) for e in errors.items]


def test_a_built_manifest_passes_check_manifest():
    errors = ErrorList()
    check_manifest(errors, raw_manifest())
    assert not len(errors)


def test_a_v2beta1_launcher_ttl_of_zero_is_refused_with_why():
    """mpi-operator v0.8.2 recreates a launcher Job deleted before it recorded the job's success: with TTL 0 the program
    ran twice in a CI run (tests/faults, the cleanPodPolicy All scenario)."""
    from airflow_mpi.jobspec import MPIJobSpec, MPIJobValidationError, ReplicaSpec, RunPolicy, build_manifest

    spec = MPIJobSpec(
        name="pi",
        launcher=ReplicaSpec(image="img"),
        worker=ReplicaSpec(image="img"),
        run_policy=RunPolicy(ttl_seconds_after_finished=0),
    )
    with pytest.raises(
        MPIJobValidationError,
        match=r"ttl_seconds_after_finished=0: must be at least 1 on "
        r"kubeflow.org/v2beta1: .*the program runs twice",
    ):
        build_manifest(spec)
    base = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "spec": {"runPolicy": {"ttlSecondsAfterFinished": 0}},
    }
    with pytest.raises(MPIJobValidationError, match="ttl_seconds_after_finished=0"):
        build_manifest(
            MPIJobSpec(
                name="pi",
                base_manifest=base,
                launcher=ReplicaSpec(image="img"),
                worker=ReplicaSpec(image="img"),
            )
        )


# ---------------------------------------------------------------- redacted errors, whole-value validators


def error_of(mutate) -> MPIJobValidationError:
    spec = valid_spec()
    mutate(spec)
    with pytest.raises(MPIJobValidationError) as info:
        validate(spec)
    return info.value


SECRET = "hunter2-Zq"


@pytest.mark.parametrize(
    "mutate, field",
    [
        (
            s(labels={"api_token": f"{SECRET} x"}),
            "labels.api_token",
        ),  # invalid label value under a sensitive key
        (s(labels={"example.com/vault-token": f"{SECRET}!"}), "labels.example.com/vault-token"),
        (worker(labels={"db_password": f"{SECRET}\n"}), "worker.labels.db_password"),
        (worker(env={"DB_PASSWORD": [SECRET]}), "worker.env.DB_PASSWORD"),
        (
            worker(env=[{"name": "HF_TOKEN", "value": {"v": SECRET}}]),
            "worker.env[0].value",
        ),  # no name in the path
        (run(scheduling_policy={"api_key": SECRET}), "run_policy.scheduling_policy"),
        (launcher(args=["--token", SECRET, 2]), "launcher.args"),
        (base({"apiVersion": V2, "kind": "MPIJob", "spec": {"apiKey": SECRET}}), "spec.apiKey"),
    ],
)
def test_validation_errors_never_show_a_sensitive_keys_value(mutate, field):
    """MPIJobValidationError messages reach the UI's DAG import errors: a value under a sensitive-looking key (the
    masker's notion) is masked before the error is raised, in the message, in .value and when pickled."""
    error = error_of(mutate)
    text = str(error) + repr([e.value for e in error.errors]) + str(pickle.loads(pickle.dumps(error)))
    assert "Zq" not in text, text
    assert f"{field}=" in str(error) and "***" in str(error), str(error)


def test_the_value_of_a_key_that_only_looks_like_a_schema_name_is_kept():
    """Kubernetes' own field names (a toleration's key, secretKeyRef.name) are not secrets: the error shows them."""
    error = error_of(worker(tolerations=[{"key": "Bad Key", "operator": "Exists"}]))
    assert "worker.tolerations[0].key='Bad Key'" in str(error)
    error = error_of(
        worker(env=[{"name": "N", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}}])
    )
    assert "worker.env[0].valueFrom.secretKeyRef.name='Bad_Name'" in str(error)


def test_a_base_manifest_that_does_not_parse_is_shown_redacted():
    text = f"spec:\n  password: {SECRET}\n  runPolicy: [\n"
    with pytest.raises(MPIJobValidationError) as info:
        build_manifest(
            MPIJobSpec(
                name="j", base_manifest=text, launcher=ReplicaSpec(image="i"), worker=ReplicaSpec(image="i")
            )
        )
    assert "Zq" not in str(info.value) and "base_manifest=" in str(info.value)


@pytest.mark.parametrize(
    "mutate, field, value",
    [
        (s(namespace="team-a\n"), "namespace", "team-a\n"),
        (s(labels={"team": "hpc\n"}), "labels.team", "hpc\n"),
        (worker(node_selector={"pool": "gpu\n"}), "worker.node_selector.pool", "gpu\n"),
        (worker(resources={"limits": {"cpu": "2\n"}}), "worker.resources.limits.cpu", "2\n"),
        (worker(service_account_name="runner\n"), "worker.service_account_name", "runner\n"),  # not masked
        (worker(env=[{"name": "EPOCHS\n", "value": "2"}]), "worker.env[0].name", "EPOCHS\n"),
    ],
)
def test_a_value_with_a_trailing_newline_is_refused_before_any_api_call(mutate, field, value):
    """An upstream XCom rendered from check_output ends in a newline; re.match with "$" let it through."""
    error = error_of(mutate)
    assert (field, value) in [(e.field, e.value) for e in error.errors], str(error)


def test_micro_and_nano_quantities_are_accepted():
    spec = valid_spec()
    worker(resources={"requests": {"cpu": "100u", "memory": "5n"}, "limits": {"cpu": "1", "memory": "1Gi"}})(
        spec
    )
    validate(spec)


def test_a_huge_exponent_is_refused_naming_the_parameter_and_the_value():
    error = error_of(worker(resources={"limits": {"cpu": "1e999999999"}}))
    assert str(error) == (
        "worker.resources.limits.cpu='1e999999999': is larger than the largest Kubernetes quantity "
        "(2^63-1 = 9223372036854775807)"
    )
