"""The rules an MPIJob must pass, checked (by manifest.validate / build_manifest) before anything is sent.

Neither operator has an admission webhook. mpi-operator v0.8.2 validates in its controller
(pkg/apis/kubeflow/validation/validation.go, after the v2beta1 defaults) and answers an invalid
MPIJob only with a Warning event (reason ValidationError): no status, no requeue, so a waiter
would hang. training-operator v1 (ValidateV1MpiJobSpec) also answers with events only. On
top of their rules come the Kubernetes rules for what they derive from the MPIJob: the service
and pod names (``<name>``, ``<name>-launcher``, ``<name>-worker-<i>``) and the pod templates.

check_manifest runs on the manifest *after* merging with the base manifest, so the base's content
is checked too; every check collects all violations into one MPIJobValidationError.
"""

from __future__ import annotations

from typing import Any

from airflow_mpi.jobspec import rules
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.layout import pod_spec
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.pod_validation import Injected, check_annotations, check_labels, check_pod_template
from airflow_mpi.jobspec.quantity import QuantityError, parse_quantity, quantity_problem
from airflow_mpi.jobspec.spec import (
    API_V1,
    API_V2BETA1,
    API_VERSIONS,
    CLEAN_POD_POLICIES,
    CONFIG_MOUNT_PATH,
    DEFAULT_SSH_AUTH_MOUNT_PATH,
    GPU_RESOURCE,
    KIND,
    LAUNCHER_REPLICA,
    LAUNCHER_CREATION_POLICIES,
    MANAGED_BY,
    MPI_IMPLEMENTATIONS,
    RESTART_POLICIES,
    ROLES,
    WAIT_FOR_WORKERS_READY,
    WORKER_REPLICA,
    Defaults,
    MPIJobSpec,
    ReplicaSpec,
    RunPolicy,
    SchedulingPolicy,
)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# spec fields of each version -> parameter name used in error paths
_SPEC_FIELDS = {"slotsPerWorker": "slots_per_worker", "runPolicy": "run_policy", "mpiReplicaSpecs": "mpi_replica_specs"}
_V2_ONLY = {
    "runLauncherAsWorker": "run_launcher_as_worker",
    "sshAuthMountPath": "ssh_auth_mount_path",
    "launcherCreationPolicy": "launcher_creation_policy",
    "mpiImplementation": "mpi_implementation",
}
_V1_ONLY = {"cleanPodPolicy": "spec.cleanPodPolicy", "mainContainer": "main_container"}
_RUN_POLICY_FIELDS = {
    "cleanPodPolicy": "clean_pod_policy",
    "ttlSecondsAfterFinished": "ttl_seconds_after_finished",
    "activeDeadlineSeconds": "active_deadline_seconds",
    "backoffLimit": "backoff_limit",
    "schedulingPolicy": "scheduling_policy",
    "suspend": "suspend",
    "managedBy": "managed_by",
}
_SCHEDULING_FIELDS = {
    "minAvailable": "min_available",
    "queue": "queue",
    "minResources": "min_resources",
    "priorityClass": "priority_class",
    "scheduleTimeoutSeconds": "schedule_timeout_seconds",
}
_REPLICA_FIELDS = ("replicas", "restartPolicy", "template")


def _int(errors: ErrorList, field: str, value: Any, *, minimum: int = 0, maximum: int = INT32_MAX) -> bool:
    """Integer within [minimum, maximum] (int32 by default, as in the CRD); False if not."""
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(field, value, "must be an integer")
    elif value < minimum:
        errors.add(field, value, f"must be >= {minimum}")
    elif value > maximum:
        errors.add(field, value, f"must be <= {maximum}")
    else:
        return True
    return False


def _one_of(errors: ErrorList, field: str, value: Any, allowed: tuple[str, ...]) -> bool:
    if value in allowed and isinstance(value, str):
        return True
    errors.add(field, value, f"must be one of {', '.join(allowed)}")
    return False


# ---------------------------------------------------------------- parameters (before merging)


def check_parameters(errors: ErrorList, spec: Any) -> None:
    """Types the manifest layout relies on, and fields the chosen API version lacks."""
    if not isinstance(spec, MPIJobSpec):
        errors.add("spec", spec, "must be an MPIJobSpec")
        return
    if spec.api_version not in API_VERSIONS:
        errors.add("api_version", spec.api_version, f"must be one of {', '.join(API_VERSIONS)}")
    if spec.name is not None and not isinstance(spec.name, str):
        errors.add("name", spec.name, "must be a string")
    if spec.unique_name_suffix is not None and not isinstance(spec.unique_name_suffix, bool):
        errors.add("unique_name_suffix", spec.unique_name_suffix, "must be a boolean")
    for attr, cls in (("launcher", ReplicaSpec), ("worker", ReplicaSpec), ("run_policy", RunPolicy)):
        if not isinstance(getattr(spec, attr), cls):
            errors.add(attr, getattr(spec, attr), f"must be a {cls.__name__}")
    if isinstance(spec.run_policy, RunPolicy) and not isinstance(
        spec.run_policy.scheduling_policy, SchedulingPolicy | None
    ):
        errors.add("run_policy.scheduling_policy", spec.run_policy.scheduling_policy, "must be a SchedulingPolicy")
    for attr, cls in (("identity", TaskIdentity), ("defaults", Defaults)):
        if not isinstance(getattr(spec, attr), cls | None):
            errors.add(attr, getattr(spec, attr), f"must be a {cls.__name__} (or None)")
    for attr in ("labels", "annotations"):  # merged with the identity's before the manifest is checked
        if not isinstance(getattr(spec, attr), dict | None):
            errors.add(attr, getattr(spec, attr), f"must be a mapping of {attr[:-1]} keys to values")
    if len(errors):
        return
    if spec.launch is not None:
        spec.launch.check(errors)
        if spec.launcher.command is not None:
            errors.add("command", spec.launcher.command, "cannot be combined with program (which builds the command)")
    if spec.api_version == API_V1:
        for attr in _V2_ONLY.values():
            value = getattr(spec, attr)
            if attr == "mpi_implementation" and value is not None and spec.launch is not None:
                _one_of(errors, attr, value, MPI_IMPLEMENTATIONS)  # not written: it picks the launch flags
            elif value is not None:
                hint = " without program (with program it picks mpirun's flags)" if attr == "mpi_implementation" else ""
                errors.add(attr, value, f"is not supported by {API_V1} (training-operator){hint}: {API_V2BETA1} only")
    elif spec.main_container is not None:
        errors.add(
            "main_container",
            spec.main_container,
            f"is a {API_V1} field; in {API_V2BETA1} the first container is the main one",
        )
    for role in (LAUNCHER_REPLICA, WORKER_REPLICA):
        _check_replica_parameters(errors, ROLES[role], spec.replica(role))


def _check_replica_parameters(errors: ErrorList, role: str, rs: ReplicaSpec) -> None:
    if isinstance(rs.env, dict):
        for name, value in rs.env.items():
            if not isinstance(name, str):
                errors.add(f"{role}.env", name, "names must be strings")
            elif isinstance(value, bool) or not isinstance(value, str | int | float):
                errors.add(f"{role}.env.{name}", value, "must be a string (or a number)")
    elif rs.env is not None and not isinstance(rs.env, list):
        errors.add(f"{role}.env", rs.env, "must be a dict of names to values or a list of EnvVar mappings")
    limits = None
    if isinstance(rs.resources, dict):
        limits = rs.resources.get("limits")
    elif rs.resources is not None:
        errors.add(f"{role}.resources", rs.resources, "must be a mapping with requests and/or limits")
    if rs.gpus is not None and _int(errors, f"{role}.gpus", rs.gpus):
        if limits is not None and not isinstance(limits, dict):
            errors.add(f"{role}.resources.limits", limits, "must be a mapping of resource names to quantities")
        elif limits and GPU_RESOURCE in limits:
            try:
                same = parse_quantity(limits[GPU_RESOURCE]) == rs.gpus
            except QuantityError:
                same = False
            if not same:
                errors.add(
                    f"{role}.gpus",
                    rs.gpus,
                    f"conflicts with resources.limits[{GPU_RESOURCE!r}]={limits[GPU_RESOURCE]!r}",
                )
    pull = rs.image_pull_secrets
    if pull is not None and (not isinstance(pull, list) or not all(isinstance(n, str) and n for n in pull)):
        errors.add(f"{role}.image_pull_secrets", pull, "must be a list of Secret names")
    if rs.container_name is not None and not isinstance(rs.container_name, str):
        errors.add(f"{role}.container_name", rs.container_name, "must be a string")


def check_base_manifest(errors: ErrorList, spec: MPIJobSpec, base: dict) -> None:
    """The base manifest is an MPIJob of the chosen version, with the containers parameters refer to."""
    for key, expected in (("apiVersion", spec.api_version), ("kind", KIND)):
        if key in base and base[key] != expected:
            hint = "set api_version to the base manifest's version" if key == "apiVersion" else "must be an MPIJob"
            errors.add(f"base_manifest.{key}", base[key], f"differs from {expected!r}: {hint}")
    for role, name in ROLES.items():
        wanted = spec.replica(role).container_name
        containers = pod_spec(base, role).get("containers")
        if wanted is None or not isinstance(containers, list) or not containers:
            continue
        names = [c.get("name") for c in containers if isinstance(c, dict)]
        if wanted not in names:
            errors.add(
                f"{name}.container_name",
                wanted,
                f"names no {name} container of the base manifest (containers: {names}); "
                "leave it unset to use the first one",
            )


# ---------------------------------------------------------------- the merged manifest


def check_manifest(errors: ErrorList, manifest: dict) -> None:
    """Operator and Kubernetes rules on a complete (merged) MPIJob manifest."""
    api = manifest.get("apiVersion")
    if not _one_of(errors, "api_version", api, API_VERSIONS):
        return
    metadata = manifest.get("metadata")
    if not isinstance(metadata, dict):
        errors.add("metadata", metadata, "must be a mapping with at least a name")
        metadata = {}
    job = manifest.get("spec")
    if not isinstance(job, dict):
        errors.add("spec", job, "must be a mapping")
        return
    workers = _worker_count(job.get("mpiReplicaSpecs"))
    _check_name(errors, metadata.get("name"), workers)
    namespace = metadata.get("namespace")
    if namespace is not None and (problem := rules.dns1123_label(namespace)):
        errors.add("namespace", namespace, problem)
    check_labels(errors, "labels", metadata.get("labels"))
    check_annotations(errors, "annotations", metadata.get("annotations"))
    _check_spec_fields(errors, manifest, api)
    _check_run_policy(errors, job, api, workers)
    _check_replica_specs(errors, job, api)


def _worker_count(replica_specs: Any) -> int:
    """Worker replicas as the operator counts them for pod names (1 when unset or invalid)."""
    worker = replica_specs.get(WORKER_REPLICA) if isinstance(replica_specs, dict) else None
    replicas = worker.get("replicas") if isinstance(worker, dict) else None
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 0 else 1


def _check_name(errors: ErrorList, name: Any, workers: int) -> None:
    if name is None:
        errors.add("name", None, "is required (set name, or metadata.name in the base manifest)")
        return
    if problem := rules.dns1035_label(name):
        errors.add("name", name, f"{problem} (the operator uses it as a Service name)")
        return
    # mpi-operator validateMPIJobName: the last worker's hostname must be a DNS-1035 label. It is never
    # shorter than "<name>-launcher" (v2beta1 launcher Job, its pods' hostname and job-name label), so
    # this also covers the launcher.
    host = f"{name}-worker-{workers - 1}"
    if len(host) > rules.LABEL_MAX:
        errors.add(
            "name", name, f"is too long: the operator derives {host!r} ({len(host)} characters, max {rules.LABEL_MAX})"
        )


def _check_spec_fields(errors: ErrorList, manifest: dict, api: str) -> None:
    job = manifest["spec"]
    own, other, other_api = (_V2_ONLY, _V1_ONLY, API_V1) if api == API_V2BETA1 else (_V1_ONLY, _V2_ONLY, API_V2BETA1)
    for key, value in job.items():
        if key in other:
            errors.add(other[key], value, f"is not supported by {api}: spec.{key} exists only in {other_api}")
        elif key not in own and key not in _SPEC_FIELDS:
            errors.add(f"spec.{key}", value, f"is not a field of {api} MPIJob")
    if "slotsPerWorker" in job:
        _int(errors, "slots_per_worker", job["slotsPerWorker"], minimum=1)
    if api == API_V1:
        _check_v1_fields(errors, manifest)
        return
    if "runLauncherAsWorker" in job and not isinstance(job["runLauncherAsWorker"], bool):
        errors.add("run_launcher_as_worker", job["runLauncherAsWorker"], "must be a boolean")
    if "sshAuthMountPath" in job:
        path = job["sshAuthMountPath"]
        if not isinstance(path, str) or not path.startswith("/"):
            errors.add("ssh_auth_mount_path", path, "must be an absolute path (the operator mounts the SSH keys there)")
    if "mpiImplementation" in job:
        _one_of(errors, "mpi_implementation", job["mpiImplementation"], MPI_IMPLEMENTATIONS)
    policy = job.get("launcherCreationPolicy")
    if policy is not None and _one_of(errors, "launcher_creation_policy", policy, LAUNCHER_CREATION_POLICIES):
        containers = pod_spec(manifest, WORKER_REPLICA).get("containers")
        main = containers[0] if isinstance(containers, list) and containers and isinstance(containers[0], dict) else {}
        if policy == WAIT_FOR_WORKERS_READY and not (main.get("readinessProbe") or main.get("startupProbe")):
            errors.add(
                "launcher_creation_policy",
                policy,
                "requires a worker readiness or startup probe: without one a worker counts as Ready as soon as it "
                "starts, before sshd accepts connections",
            )


def _check_v1_fields(errors: ErrorList, manifest: dict) -> None:
    job = manifest["spec"]
    clean = job.get("cleanPodPolicy")
    if clean is not None and _one_of(errors, "run_policy.clean_pod_policy", clean, CLEAN_POD_POLICIES):
        run_policy = job.get("runPolicy")
        other = run_policy.get("cleanPodPolicy") if isinstance(run_policy, dict) else None
        if other is not None and other != clean:
            errors.add(
                "run_policy.clean_pod_policy",
                clean,
                f"conflicts with spec.runPolicy.cleanPodPolicy={other!r} (the training-operator lets runPolicy win)",
            )
    main = job.get("mainContainer")
    if main is not None:
        containers = pod_spec(manifest, WORKER_REPLICA).get("containers")
        names = [c.get("name") for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []
        if not isinstance(main, str) or main not in names:
            errors.add(
                "main_container", main, f"must name a worker container (kubexec.sh runs there); containers: {names}"
            )


def _check_run_policy(errors: ErrorList, job: dict, api: str, workers: int) -> None:
    policy = job.get("runPolicy")
    if policy is None:
        return
    if not isinstance(policy, dict):
        errors.add("run_policy", policy, "must be a mapping")
        return
    for key, value in policy.items():
        field = f"run_policy.{_RUN_POLICY_FIELDS.get(key, key)}"
        if value is None:
            continue
        if key not in _RUN_POLICY_FIELDS:
            errors.add(f"spec.runPolicy.{key}", value, f"is not a runPolicy field of {api}")
        elif key == "cleanPodPolicy":
            if api == API_V2BETA1 or "cleanPodPolicy" not in job:  # v1 top-level conflicts: _check_v1_fields
                _one_of(errors, field, value, CLEAN_POD_POLICIES)
        elif key == "activeDeadlineSeconds":
            _int(errors, field, value, maximum=INT64_MAX)
        elif key in ("ttlSecondsAfterFinished", "backoffLimit"):
            _int(errors, field, value)
        elif key == "suspend" and not isinstance(value, bool):
            errors.add(field, value, "must be a boolean")
        elif key == "managedBy":
            _one_of(errors, field, value, MANAGED_BY[api])
        elif key == "schedulingPolicy":
            _check_scheduling(errors, value, workers)


def _check_scheduling(errors: ErrorList, policy: Any, workers: int) -> None:
    prefix = "run_policy.scheduling_policy"
    if not isinstance(policy, dict):
        errors.add(prefix, policy, "must be a mapping")
        return
    for key, value in policy.items():
        field = f"{prefix}.{_SCHEDULING_FIELDS.get(key, key)}"
        if value is None:
            continue
        if key not in _SCHEDULING_FIELDS:
            errors.add(f"spec.runPolicy.schedulingPolicy.{key}", value, "is not a schedulingPolicy field")
        elif key == "minAvailable":
            # The gang is the launcher + the workers: a larger minimum can never be scheduled.
            _int(errors, field, value, minimum=1, maximum=workers + 1)
        elif key == "scheduleTimeoutSeconds":
            _int(errors, field, value)
        elif key == "queue" and not (isinstance(value, str) and value):
            errors.add(field, value, "must be a non-empty string")
        elif key == "priorityClass" and (problem := rules.dns1123_subdomain(value)):
            errors.add(field, value, problem)
        elif key == "minResources":
            reason = "must be a mapping of resource names to quantities"
            errors.check_entries(
                field, value, reason, rules.qualified_name, quantity_problem, key_what="invalid resource name"
            )


def _injected(api: str, role: str, ssh_path: str) -> Injected:
    """Volumes the operator adds to the role's pods (name -> mount path in the first container)."""
    if api == API_V2BETA1:
        volumes = {"ssh-auth": ssh_path}
        if role == LAUNCHER_REPLICA:
            volumes["mpi-job-config"] = CONFIG_MOUNT_PATH
    else:
        volumes = {"mpi-job-config": CONFIG_MOUNT_PATH}
        if role == LAUNCHER_REPLICA:
            volumes["mpi-job-kubectl"] = "/opt/kube"
    return Injected(volumes)


def _check_replica_specs(errors: ErrorList, job: dict, api: str) -> None:
    specs = job.get("mpiReplicaSpecs")
    if not isinstance(specs, dict):
        errors.add("mpi_replica_specs", specs, "must be a mapping with Launcher and Worker")
        return
    for key in specs:
        if key not in ROLES:
            errors.add(f"mpi_replica_specs.{key}", specs[key], "unknown replica type (expected Launcher, Worker)")
    ssh_path = (
        job.get("sshAuthMountPath") if isinstance(job.get("sshAuthMountPath"), str) else DEFAULT_SSH_AUTH_MOUNT_PATH
    )
    for role, name in ROLES.items():
        replica = specs.get(role)
        if not isinstance(replica, dict):
            errors.add(name, replica, f"the {role} replica spec is required")
            continue
        for key in replica:
            if key not in _REPLICA_FIELDS:
                errors.add(f"mpi_replica_specs.{role}.{key}", replica[key], "is not a replica spec field")
        replicas = replica.get("replicas")
        if role == LAUNCHER_REPLICA:
            if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas != 1):
                errors.add("launcher.replicas", replicas, "must be 1")
        elif replicas is None:
            errors.add("worker.replicas", None, "is required (the number of worker pods, >= 1)")
        else:
            _int(errors, "worker.replicas", replicas, minimum=1)
        restart = replica.get("restartPolicy")
        valid = restart is None or _one_of(errors, f"{name}.restart_policy", restart, RESTART_POLICIES[api])
        if valid and role == LAUNCHER_REPLICA and restart == "Always":  # only v1 accepts Always at all
            errors.add(
                "launcher.restart_policy", restart, "restarts the launcher even after success: the job never completes"
            )
        check_pod_template(errors, name, replica.get("template"), _injected(api, role, ssh_path))
