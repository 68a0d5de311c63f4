"""Spec -> manifest dict for either API version, merged onto the base manifest (no validation).

The operators inject their environment, volumes and SSH setup into the *first* container of
each pod template, so the container built from the parameters (the "main" container) is kept
first after merging.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from airflow_mpi.jobspec.merge import deep_merge, load_base_manifest
from airflow_mpi.jobspec.spec import (
    API_V1,
    API_V2BETA1,
    DEFAULT_CONTAINER_NAMES,
    GPU_RESOURCE,
    KIND,
    LAUNCHER_REPLICA,
    WORKER_REPLICA,
    MPIJobSpec,
    ReplicaSpec,
    RunPolicy,
)

# Named lists whose items a parameter replaces whole (not merged key by key), so that e.g. an env
# var given as a parameter with "value" does not keep the base's "valueFrom" of the same name.
_REPLACED_POD_LISTS = ("volumes",)
_REPLACED_CONTAINER_LISTS = ("env", "volumeMounts")


def assemble(spec: MPIJobSpec, base: dict | None = None) -> dict:
    """The manifest for ``spec``: parameters (those not None) deep-merged onto the base manifest.

    ``base`` is the already loaded ``spec.base_manifest`` (loaded here when not given).
    """
    if base is None:
        base = load_base_manifest(spec.base_manifest) if spec.base_manifest is not None else {}
    names = {role: main_container_name(spec, role, base) for role in (LAUNCHER_REPLICA, WORKER_REPLICA)}
    override = _parameters(spec, base, names)
    merged = deep_merge(_without_replaced(base, override), override)
    replicas = merged["spec"]["mpiReplicaSpecs"]
    launcher = replicas.get(LAUNCHER_REPLICA)
    if isinstance(launcher, dict) and "replicas" not in launcher:
        replicas[LAUNCHER_REPLICA] = {"replicas": 1, **launcher}  # the only valid count; first, as written by hand
    for role, name in names.items():
        containers = pod_spec(merged, role).get("containers")
        if isinstance(containers, list):
            containers.sort(key=lambda c: not (isinstance(c, dict) and c.get("name") == name))
    return merged


def pod_spec(manifest: Any, role: str) -> dict:
    """``spec.mpiReplicaSpecs[role].template.spec`` or {} (never raises on malformed input)."""
    node = manifest
    for key in ("spec", "mpiReplicaSpecs", role, "template", "spec"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def main_container_name(spec: MPIJobSpec, role: str, base: dict) -> str:
    """container_name, else the base manifest's first container, else the version's default.

    For v1 the default is ``main_container`` when set: kubexec.sh runs in the container of that name.
    """
    if spec.replica(role).container_name:
        return spec.replica(role).container_name
    containers = pod_spec(base, role).get("containers")
    first = containers[0] if isinstance(containers, list) and containers else None
    if isinstance(first, dict) and isinstance(first.get("name"), str):
        return first["name"]
    if spec.api_version == API_V1 and spec.main_container:
        return spec.main_container
    return DEFAULT_CONTAINER_NAMES[API_V1 if spec.api_version == API_V1 else API_V2BETA1][role]


def _compact(mapping: dict) -> dict | None:
    """Drop None values and empty dicts (they would not override anything); None if nothing is left."""
    kept = {k: v for k, v in mapping.items() if v is not None and v != {}}
    return kept or None


def _parameters(spec: MPIJobSpec, base: dict, names: dict[str, str]) -> dict:
    v1 = spec.api_version == API_V1
    rp = spec.run_policy
    run_policy = _run_policy(rp, include_clean_pod_policy=not v1)
    base_run_policy = base.get("spec", {}).get("runPolicy") if isinstance(base.get("spec"), dict) else None
    if (
        v1
        and rp.clean_pod_policy is not None
        and isinstance(base_run_policy, dict)
        and "cleanPodPolicy" in base_run_policy
    ):
        # training-operator lets runPolicy.cleanPodPolicy win over the top-level field: keep them equal.
        run_policy = {**(run_policy or {}), "cleanPodPolicy": rp.clean_pod_policy}
    job_spec: dict[str, Any] = {"slotsPerWorker": spec.slots_per_worker}
    if v1:
        job_spec |= {"cleanPodPolicy": rp.clean_pod_policy, "mainContainer": spec.main_container}
    else:
        job_spec |= {
            "runLauncherAsWorker": spec.run_launcher_as_worker,
            "sshAuthMountPath": spec.ssh_auth_mount_path,
            "launcherCreationPolicy": spec.launcher_creation_policy,
            "mpiImplementation": spec.mpi_implementation,
        }
    job_spec |= {
        "runPolicy": run_policy,
        "mpiReplicaSpecs": {role: _replica(spec.replica(role), names[role]) for role in (LAUNCHER_REPLICA, WORKER_REPLICA)},
    }
    metadata = {"name": spec.name, "namespace": spec.namespace, "labels": spec.labels, "annotations": spec.annotations}
    return {"apiVersion": spec.api_version, "kind": KIND, "metadata": _compact(metadata), "spec": _compact(job_spec)}


def _run_policy(rp: RunPolicy, *, include_clean_pod_policy: bool) -> dict | None:
    sp = rp.scheduling_policy
    scheduling = None
    if sp is not None:
        scheduling = _compact(
            {
                "minAvailable": sp.min_available,
                "queue": sp.queue,
                "minResources": deepcopy(sp.min_resources),
                "priorityClass": sp.priority_class,
                "scheduleTimeoutSeconds": sp.schedule_timeout_seconds,
            }
        )
    return _compact(
        {
            "cleanPodPolicy": rp.clean_pod_policy if include_clean_pod_policy else None,
            "ttlSecondsAfterFinished": rp.ttl_seconds_after_finished,
            "activeDeadlineSeconds": rp.active_deadline_seconds,
            "backoffLimit": rp.backoff_limit,
            "schedulingPolicy": scheduling,
            "suspend": rp.suspend,
            "managedBy": rp.managed_by,
        }
    )


def _replica(rs: ReplicaSpec, container_name: str) -> dict | None:
    container = _compact(
        {
            "name": container_name,
            "image": rs.image,
            "command": deepcopy(rs.command),
            "args": deepcopy(rs.args),
            "env": env_list(rs.env),
            "envFrom": deepcopy(rs.env_from),
            "resources": _resources(rs),
            "volumeMounts": deepcopy(rs.volume_mounts),
            "imagePullPolicy": rs.image_pull_policy,
            "securityContext": deepcopy(rs.security_context),
            "readinessProbe": deepcopy(rs.readiness_probe),
            "startupProbe": deepcopy(rs.startup_probe),
        }
    )
    pull_secrets = None if rs.image_pull_secrets is None else [{"name": n} for n in rs.image_pull_secrets]
    pod = _compact(
        {
            "containers": [container],
            "volumes": deepcopy(rs.volumes),
            "nodeSelector": deepcopy(rs.node_selector),
            "tolerations": deepcopy(rs.tolerations),
            "affinity": deepcopy(rs.affinity),
            "serviceAccountName": rs.service_account_name,
            "imagePullSecrets": pull_secrets,
            "securityContext": deepcopy(rs.pod_security_context),
            "priorityClassName": rs.priority_class_name,
            "dnsConfig": None if rs.dns_searches is None else {"searches": list(rs.dns_searches)},
        }
    )
    pod_metadata = _compact({"labels": deepcopy(rs.labels), "annotations": deepcopy(rs.annotations)})
    return _compact(
        {
            "replicas": rs.replicas,
            "restartPolicy": rs.restart_policy,
            "template": _compact({"metadata": pod_metadata, "spec": pod}),
        }
    )


def env_list(env: dict | list | None) -> list | None:
    """EnvVar dicts from the ``{"NAME": "value"}`` shorthand (values stringified) or a list as given."""
    if isinstance(env, dict):
        return [{"name": name, "value": value if isinstance(value, str) else str(value)} for name, value in env.items()]
    return deepcopy(env)


def _resources(rs: ReplicaSpec) -> dict | None:
    resources = deepcopy(rs.resources) if isinstance(rs.resources, dict) else {}
    if rs.gpus is not None:
        resources["limits"] = {**(resources.get("limits") or {}), GPU_RESOURCE: rs.gpus}
    return resources or None


def _without_replaced(base: dict, override: dict) -> dict:
    """A copy of ``base`` whose named items that ``override`` replaces wholesale are already replaced.

    Replacing in place keeps the base's order, which matters for env vars that refer to
    earlier ones with $(NAME).
    """
    base = deepcopy(base)
    for role in (LAUNCHER_REPLICA, WORKER_REPLICA):
        new_pod, old_pod = pod_spec(override, role), pod_spec(base, role)
        _replace_named(old_pod, new_pod, _REPLACED_POD_LISTS)
        new_main = new_pod["containers"][0]
        old_containers = old_pod.get("containers")
        for old in old_containers if isinstance(old_containers, list) else []:
            if isinstance(old, dict) and old.get("name") == new_main["name"]:
                _replace_named(old, new_main, _REPLACED_CONTAINER_LISTS)
    return base


def _name(item: dict) -> str | None:
    return item["name"] if isinstance(item.get("name"), str) else None


def _replace_named(old: dict, new: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if isinstance(old.get(key), list) and isinstance(new.get(key), list):
            by_name = {i["name"]: i for i in new[key] if isinstance(i, dict) and isinstance(i.get("name"), str)}
            old[key] = [
                deepcopy(by_name[i["name"]]) if isinstance(i, dict) and _name(i) in by_name else i for i in old[key]
            ]
