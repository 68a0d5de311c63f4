"""Kubernetes rules for the pod templates of an MPIJob (launcher and worker).

The operators create the pods long after the API server accepted the MPIJob, so a pod the API
server would reject only shows up as a controller event while the job waits forever. These
checks mirror the pod validation (k8s.io/kubernetes/pkg/apis/core/validation) for the fields
this provider sets, plus the volumes and mounts the operators inject themselves.

Field paths use the parameter names: ``worker.image``, ``launcher.resources.limits.cpu``; a
container other than the main (first) one is ``worker.containers[sidecar].image``.
"""

from __future__ import annotations

from typing import Any, cast

from airflow_mpi.jobspec import rules
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.fields import MAIN, POD, REPLICA, Field, rows
from airflow_mpi.jobspec.quantity import parse_quantity, quantity_problem
from airflow_mpi.jobspec.redaction import is_sensitive

_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_VALUE_FROM_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef", "fileKeyRef")
_ENV_FROM_SOURCES = ("configMapRef", "secretRef")
_TOLERATION_OPERATORS = ("Equal", "Exists")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Container and pod keys -> the rows whose rule their values must pass (the other keys are checked below)
_CONTAINER_ROWS, _POD_ROWS = (
    {f.path[-1]: f for f in rows(REPLICA) if f.check and f.path[:-1] == parent} for parent in (MAIN, POD)
)


def check_pod_template(errors: ErrorList, role: str, template: Any, injected: dict[str, str]) -> None:
    """Pod template metadata and spec of one role (``role`` is "launcher" or "worker"); ``injected``: the volumes
    the operator adds to its pods (name -> mount path in the main container)."""
    if not isinstance(template, dict):
        errors.add(f"{role}.template", template, "must be a mapping with metadata and spec")
        return
    metadata = template.get("metadata") or {}
    if isinstance(metadata, dict):
        check_labels(errors, f"{role}.labels", metadata.get("labels"))
        check_annotations(errors, f"{role}.annotations", metadata.get("annotations"))
    else:
        errors.add(f"{role}.template.metadata", metadata, "must be a mapping")
    pod = template.get("spec")
    if not isinstance(pod, dict):
        errors.add(f"{role}.template.spec", pod, "must be a mapping (the pod spec)")
        return
    volumes = _check_volumes(errors, role, pod.get("volumes"), injected)
    _check_containers(errors, role, pod.get("containers"), volumes, injected)
    _check_pod_fields(errors, role, pod)


def check_labels(errors: ErrorList, path: str, labels: Any) -> None:
    errors.check_entries(
        path,
        labels,
        "must be a mapping of label keys to values",
        rules.qualified_name,
        rules.label_value,
        key_what="invalid label key",
        value_what="invalid label value",
    )


def _annotation_value_problem(value: Any) -> str | None:
    return None if isinstance(value, str) else "annotation values must be strings"


def check_annotations(errors: ErrorList, path: str, annotations: Any) -> None:
    errors.check_entries(
        path,
        annotations,
        "must be a mapping of annotation keys to string values",
        rules.annotation_key,
        _annotation_value_problem,
        key_what="invalid annotation key",
    )
    if isinstance(annotations, dict):
        size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
        if size > rules.ANNOTATIONS_TOTAL_MAX:
            errors.add(
                path, f"<{size} bytes>", f"total size must be at most {rules.ANNOTATIONS_TOTAL_MAX} bytes"
            )


def _check_volumes(errors: ErrorList, role: str, volumes: Any, injected: dict[str, str]) -> set[str]:
    """Checks pod volumes; returns the names a mount may refer to (incl. injected ones)."""
    names = set(injected)
    item_reason = "must be a mapping with a name and one volume source"
    for path, volume in errors.mappings(f"{role}.volumes", volumes, "must be a list of volumes", item_reason):
        name: Any = volume.get("name")
        if problem := rules.dns1123_label(name):
            errors.add(f"{path}.name", name, problem)
        elif name in injected:
            errors.add(
                f"{path}.name", name, "is reserved: the operator adds a volume of this name to the pod"
            )
        elif name in names:
            errors.add(f"{path}.name", name, "is a duplicate volume name")
        else:
            names.add(name)
        sources = [k for k in volume if k != "name"]
        if len(sources) != 1:
            errors.add(
                path,
                sources,
                "must specify exactly one volume source (e.g. persistentVolumeClaim, configMap)",
            )
    return names


def _check_containers(
    errors: ErrorList, role: str, containers: Any, volumes: set[str], injected: dict
) -> None:
    if not isinstance(containers, list) or not containers:
        errors.add(f"{role}.containers", containers, "must define at least one container")
        return
    seen: set[str] = set()
    for index, container in enumerate(containers):
        if not isinstance(container, dict):
            errors.add(f"{role}.containers[{index}]", container, "must be a mapping")
            continue
        name: Any = container.get("name")
        main = index == 0  # the operators inject into (and kubectl exec defaults to) the first container
        prefix = role if main else f"{role}.containers[{name if isinstance(name, str) else index}]"
        if problem := rules.dns1123_label(name):
            errors.add(f"{prefix}.container_name", name, problem)
        elif name in seen:
            errors.add(f"{prefix}.container_name", name, "is a duplicate container name")
        else:
            seen.add(name)
        _check_container(errors, prefix, container, volumes, injected if main else {})


def _check_container(
    errors: ErrorList, prefix: str, container: dict, volumes: set[str], injected: dict
) -> None:
    image = container.get("image")
    if not isinstance(image, str) or not image.strip():
        errors.add(f"{prefix}.image", image, "is required (a non-empty image reference)")
    elif image != image.strip() or any(c.isspace() for c in image):
        # the API server accepts it; the kubelet then fails the pull (InvalidImageName) after scheduling
        errors.add(f"{prefix}.image", image, "must not contain whitespace (an image reference has none)")
    if "env" in container:
        _check_env(errors, prefix, container["env"])
    if "envFrom" in container:
        _check_env_from(errors, prefix, container["envFrom"])
    if "resources" in container:
        check_resources(errors, f"{prefix}.resources", container["resources"])
    _check_mounts(errors, prefix, container.get("volumeMounts"), volumes, injected)
    _check_rows(errors, prefix, container, _CONTAINER_ROWS)


def _check_rows(errors: ErrorList, prefix: str, node: dict, checked: dict[str, Field]) -> None:
    """The rules of the rows (fields.py) whose values ``node`` (a container or a pod spec) holds."""
    for key, row in checked.items():
        if node.get(key) is not None and (problem := cast(rules.Rule, row.check)(node[key])):
            errors.add(f"{prefix}.{row.name}", node[key], problem)


def _check_env(errors: ErrorList, prefix: str, env: Any) -> None:
    reason = "must be a list of EnvVar mappings (or a dict of names to values)"
    item_reason = "must be a mapping with name and value or valueFrom"
    for path, var in errors.mappings(f"{prefix}.env", env, reason, item_reason, optional=False):
        if problem := rules.env_var_name(var.get("name")):
            errors.add(f"{path}.name", var.get("name"), f"invalid environment variable name: {problem}")
        value, value_from = var.get("value"), var.get("valueFrom")
        if value is not None and not isinstance(value, str):
            errors.add(
                f"{path}.value",
                value,
                "must be a string (quote numbers and booleans)",
                secret=is_sensitive(str(var.get("name"))),
            )
        if value and value_from is not None:
            errors.add(f"{path}.valueFrom", value_from, "may not be set together with a non-empty value")
        if value_from is not None:
            _check_value_from(errors, f"{path}.valueFrom", value_from)


def _check_value_from(errors: ErrorList, path: str, value_from: Any) -> None:
    if not isinstance(value_from, dict):
        errors.add(path, value_from, "must be a mapping (an EnvVarSource)")
        return
    sources = [k for k in value_from if k in _VALUE_FROM_SOURCES]
    unknown = [k for k in value_from if k not in _VALUE_FROM_SOURCES]
    if unknown or len(sources) != 1:
        errors.add(path, value_from, f"must specify exactly one of {', '.join(_VALUE_FROM_SOURCES)}")
        return
    source, ref = sources[0], value_from[sources[0]]
    if not isinstance(ref, dict):
        errors.add(f"{path}.{source}", ref, "must be a mapping")
    elif source in ("secretKeyRef", "configMapKeyRef"):
        if problem := rules.dns1123_subdomain(ref.get("name")):
            errors.add(f"{path}.{source}.name", ref.get("name"), problem)
        if problem := rules.config_map_key(ref.get("key")):
            errors.add(f"{path}.{source}.key", ref.get("key"), problem)
    elif source == "fieldRef" and not isinstance(ref.get("fieldPath"), str):
        errors.add(f"{path}.fieldRef.fieldPath", ref.get("fieldPath"), "is required")
    elif source == "resourceFieldRef" and not isinstance(ref.get("resource"), str):
        errors.add(f"{path}.resourceFieldRef.resource", ref.get("resource"), "is required")


def _check_env_from(errors: ErrorList, prefix: str, env_from: Any) -> None:
    reason = "must be a list of EnvFromSource mappings"
    item_reason = "must specify exactly one of configMapRef, secretRef"
    for path, item in errors.mappings(f"{prefix}.env_from", env_from, reason, item_reason, optional=False):
        sources = [k for k in _ENV_FROM_SOURCES if k in item]
        if len(sources) != 1:
            errors.add(path, item, item_reason)
            continue
        ref = item[sources[0]]
        name = ref.get("name") if isinstance(ref, dict) else None
        if problem := rules.dns1123_subdomain(name):
            errors.add(f"{path}.{sources[0]}.name", name, problem)
        if item.get("prefix") is not None and not isinstance(item["prefix"], str):
            errors.add(f"{path}.prefix", item["prefix"], "must be a string")


def _check_mounts(errors: ErrorList, prefix: str, mounts: Any, volumes: set[str], injected: dict) -> None:
    paths = {p: f"the operator mounts volume {v!r} there" for v, p in injected.items()}
    reason, item_reason = (
        "must be a list of VolumeMount mappings",
        "must be a mapping with name and mountPath",
    )
    for path, mount in errors.mappings(f"{prefix}.volume_mounts", mounts, reason, item_reason):
        name, mount_path = mount.get("name"), mount.get("mountPath")
        if not isinstance(name, str) or not name:
            errors.add(f"{path}.name", name, "is required")
        elif name not in volumes:
            errors.add(f"{path}.name", name, "refers to no volume of this pod (add it to volumes)")
        if not isinstance(mount_path, str) or not mount_path:
            errors.add(f"{path}.mountPath", mount_path, "is required")
        elif mount_path in paths:
            errors.add(f"{path}.mountPath", mount_path, f"must be unique: {paths[mount_path]}")
        else:
            paths[mount_path] = "another mount uses it"


def _check_pod_fields(errors: ErrorList, role: str, pod: dict) -> None:
    check_labels(errors, f"{role}.node_selector", pod.get("nodeSelector"))
    _check_tolerations(errors, role, pod.get("tolerations"))
    secrets = pod.get("imagePullSecrets")
    if secrets is not None:
        if not isinstance(secrets, list):
            errors.add(f"{role}.image_pull_secrets", secrets, "must be a list of secret names")
        else:
            for i, secret in enumerate(secrets):
                name = secret.get("name") if isinstance(secret, dict) else secret
                if problem := rules.dns1123_subdomain(name):
                    errors.add(f"{role}.image_pull_secrets[{i}]", name, f"must name a Secret: {problem}")
    _check_rows(errors, role, pod, _POD_ROWS)


def _check_tolerations(errors: ErrorList, role: str, tolerations: Any) -> None:
    reason = "must be a list of Toleration mappings"
    for path, toleration in errors.mappings(f"{role}.tolerations", tolerations, reason, "must be a mapping"):
        key, value = toleration.get("key") or "", toleration.get("value") or ""
        operator, effect = toleration.get("operator") or "Equal", toleration.get("effect") or ""
        if operator not in _TOLERATION_OPERATORS:
            errors.add(f"{path}.operator", operator, "must be Equal or Exists")
        if key and (problem := rules.qualified_name(key)):
            errors.add(f"{path}.key", key, problem)
        if not key and operator != "Exists":
            errors.add(f"{path}.operator", operator, "must be Exists when key is empty")
        if operator == "Exists" and value:
            errors.add(f"{path}.value", value, "must be empty when operator is Exists")
        elif value and (problem := rules.label_value(value)):
            errors.add(f"{path}.value", value, problem)
        if effect and effect not in _TAINT_EFFECTS:
            errors.add(
                f"{path}.effect", effect, f"must be one of {', '.join(_TAINT_EFFECTS)} (or empty for all)"
            )
        seconds = toleration.get("tolerationSeconds")
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, int):
                errors.add(f"{path}.tolerationSeconds", seconds, "must be an integer")
            elif effect != "NoExecute":
                errors.add(f"{path}.tolerationSeconds", seconds, "requires effect NoExecute")


def resource_name_problem(name: Any) -> str | None:
    if not isinstance(name, str):
        return "resource names must be strings"
    if "/" not in name:
        if name in _STANDARD_RESOURCES:
            return None
        if name.startswith("hugepages-") and quantity_problem(name[len("hugepages-") :]) is None:
            return None
        return (
            "is not a container resource: use cpu, memory, ephemeral-storage, hugepages-<size> or a "
            "domain-prefixed extended resource such as nvidia.com/gpu"
        )
    if problem := rules.qualified_name(name):
        return problem
    if "kubernetes.io/" not in name and (
        name.startswith("requests.") or rules.qualified_name("requests." + name)
    ):
        return "is not a valid extended resource name"
    return None


def _extended(name: str) -> bool:
    """Domain-prefixed resources outside kubernetes.io (GPUs, NICs, ...): integer, no overcommit."""
    return "/" in name and "kubernetes.io/" not in name


def check_resources(errors: ErrorList, path: str, resources: Any) -> None:
    """ResourceRequirements: valid names and quantities, integer extended resources, requests <= limits."""
    if not isinstance(resources, dict):
        errors.add(path, resources, "must be a mapping with requests and/or limits")
        return
    for key in resources:
        if key not in ("requests", "limits", "claims"):
            errors.add(f"{path}.{key}", resources[key], "unknown key (expected requests, limits)")
    parsed: dict[str, dict[str, Any]] = {"requests": {}, "limits": {}}
    for kind in ("requests", "limits"):
        amounts = resources.get(kind)
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            errors.add(f"{path}.{kind}", amounts, "must be a mapping of resource names to quantities")
            continue
        for name, amount in amounts.items():
            if problem := resource_name_problem(name):
                errors.add(f"{path}.{kind}", name, problem)
            elif problem := quantity_problem(amount, integer=_extended(name)):
                errors.add(f"{path}.{kind}.{name}", amount, problem)
            else:
                parsed[kind][name] = (parse_quantity(amount), amount)
    given_limits: Any = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
    for name, (request, raw) in parsed["requests"].items():
        no_overcommit = _extended(name) or name.startswith("hugepages-")
        if name not in parsed["limits"]:
            if no_overcommit and name not in given_limits:
                reason = "must be set (equal to the request): this resource cannot be overcommitted"
                errors.add(f"{path}.limits.{name}", None, reason)
            continue
        limit, raw_limit = parsed["limits"][name]
        if no_overcommit and request != limit:
            reason = f"must equal the limit {raw_limit!r}: this resource cannot be overcommitted"
            errors.add(f"{path}.requests.{name}", raw, reason)
        elif request > limit:
            errors.add(
                f"{path}.requests.{name}", raw, f"must be less than or equal to the limit {raw_limit!r}"
            )
