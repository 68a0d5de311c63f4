"""The rules an MPIJob must pass, checked (by precedence.resolve) before anything is sent.

Neither operator has an admission webhook. mpi-operator v0.8.2 validates in its controller
(pkg/apis/kubeflow/validation/validation.go, after the v2beta1 defaults) and answers an invalid MPIJob only with a
Warning event (reason ValidationError): no status, no requeue, so a waiter would hang. training-operator v1
(ValidateV1MpiJobSpec) also answers with events only. On top of their rules come the Kubernetes rules for what they
derive from the MPIJob: the service and pod names (``<name>``, ``<name>-launcher``, ``<name>-worker-<i>``: its kind's)
and the pod templates; the replica specs are read where the kind keeps them (``JobKind.replica_layout``). check_manifest
runs on the manifest *after* merging with the base manifest, so the base's content is checked too; every check
collects all violations into one MPIJobValidationError. Which fields a kind has at all, and the checks of a kind not
shaped like an MPIJob (TrainJob), are row_validation.py's.
"""

from __future__ import annotations

from typing import Any, cast

from airflow_mpi.jobspec import rules
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.fields import (
    FIELDS,
    JOB,
    REPLICA,
    RUN_POLICY,
    SCHEDULING,
    Field,
    MPIJobSpec,
    ReplicaSpec,
    RunPolicy,
    SchedulingPolicy,
    field_of,
    manifest_path,
)
from airflow_mpi.jobspec.kinds import MPIJOB_V1, JobKind, api_versions, kind_for, kind_or_default
from airflow_mpi.jobspec.layout import pod_spec, replica_specs, value_at
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.pod_validation import check_annotations, check_labels, check_pod_template
from airflow_mpi.jobspec.quantity import QuantityError, parse_quantity, quantity_problem
from airflow_mpi.jobspec.row_validation import check_job_name, check_kind_rows, check_rows_manifest
from airflow_mpi.jobspec.spec import (
    DEFAULT_SSH_AUTH_MOUNT_PATH,
    GPU_RESOURCE,
    WAIT_FOR_WORKERS_READY,
    Defaults,
)
from airflow_mpi.jobspec.vocabulary import LAUNCHER, LAUNCHER_REPLICA, ROLES, WORKER, WORKER_REPLICA

_PREFIXES = {JOB: "", RUN_POLICY: "run_policy.", SCHEDULING: "run_policy.scheduling_policy."}
# The keys of spec, spec.runPolicy and spec.runPolicy.schedulingPolicy -> their rows (fields.py)
_SPEC, _RUN_POLICY, _SCHEDULING = (
    {f.path[-1]: f for f in FIELDS if f.path[:-1] == parent}
    for parent in (("spec",), ("spec", "runPolicy"), ("spec", "runPolicy", "schedulingPolicy"))
)
_CLEAN_POD_POLICY = field_of("clean_pod_policy", RUN_POLICY)
_WORKERS = field_of("replicas", REPLICA)
# rows held in one label each (Kueue's): their values are checked under the parameter's name
_LABEL_ROWS = tuple(f for f in FIELDS if f.path[:2] == ("metadata", "labels") and len(f.path) == 3)
# spec keys -> (the name errors use, the one API version that has it); the replica specs' key is the kind's
_SPEC_KEYS = {
    "runPolicy": ("run_policy", None),
    **{key: (f.name, f.api) for key, f in _SPEC.items()},
    **{f.v1_path[1]: (f"spec.{f.v1_path[1]}", MPIJOB_V1.api_version) for f in FIELDS if len(f.v1_path) == 2},
}
_REPLICA_FIELDS = ("replicas", "restartPolicy", "template")


def _check(errors: ErrorList, field: str, value: Any, rule: rules.Rule) -> bool:
    """``value`` passes ``rule``; a problem is reported under ``field``."""
    problem = rule(value)
    if problem:
        errors.add(field, value, problem)
    return not problem


def _passes(errors: ErrorList, row: Field, value: Any, rule: rules.Rule | None = None) -> bool:
    """``value`` passes ``rule`` (by default its row's), reported under the row's name."""
    return _check(errors, _PREFIXES[row.owner] + row.name, value, cast(rules.Rule, rule or row.check))


# ---------------------------------------------------------------- parameters (before merging)


def check_parameters(errors: ErrorList, spec: Any) -> None:
    """Types the manifest layout relies on, and fields the chosen API version lacks."""
    if not isinstance(spec, MPIJobSpec):
        errors.add("spec", spec, "must be an MPIJobSpec")
        return
    _check(errors, "api_version", spec.api_version, rules.one_of(api_versions()))
    if spec.name is not None:
        _check(errors, "name", spec.name, rules.string)
    if spec.unique_name_suffix is not None:
        _check(errors, "unique_name_suffix", spec.unique_name_suffix, rules.boolean)
    cls: type
    for attr, cls in ((LAUNCHER, ReplicaSpec), (WORKER, ReplicaSpec), ("run_policy", RunPolicy)):
        if not isinstance(getattr(spec, attr), cls):
            errors.add(attr, getattr(spec, attr), f"must be a {cls.__name__}")
    policy = getattr(spec.run_policy, "scheduling_policy", None)
    if not isinstance(policy, SchedulingPolicy | None):
        errors.add("run_policy.scheduling_policy", policy, "must be a SchedulingPolicy")
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
            errors.add(
                "command", spec.launcher.command, "cannot be combined with program (which builds the command)"
            )
    check_kind_rows(errors, spec, cast(JobKind, kind_for(spec.api_version)))  # api_version: checked above
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
    limits = rs.resources.get("limits") if isinstance(rs.resources, dict) else None
    if rs.resources is not None and not isinstance(rs.resources, dict):
        errors.add(f"{role}.resources", rs.resources, "must be a mapping with requests and/or limits")
    if rs.gpus is not None and _check(errors, f"{role}.gpus", rs.gpus, rules.integer()):
        if limits is not None and not isinstance(limits, dict):
            errors.add(
                f"{role}.resources.limits", limits, "must be a mapping of resource names to quantities"
            )
        elif limits and GPU_RESOURCE in limits:
            try:
                same = parse_quantity(limits[GPU_RESOURCE]) == rs.gpus
            except QuantityError:
                same = False
            if not same:
                reason = f"conflicts with resources.limits[{GPU_RESOURCE!r}]={limits[GPU_RESOURCE]!r}"
                errors.add(f"{role}.gpus", rs.gpus, reason)
    pull = rs.image_pull_secrets
    if pull is not None and (not isinstance(pull, list) or not all(isinstance(n, str) and n for n in pull)):
        errors.add(f"{role}.image_pull_secrets", pull, "must be a list of Secret names")
    if rs.container_name is not None:
        _check(errors, f"{role}.container_name", rs.container_name, rules.string)


def check_base_manifest(errors: ErrorList, spec: MPIJobSpec, base: dict) -> None:
    """The base manifest is a job of the chosen kind and version, with the containers parameters refer to."""
    kind = kind_or_default(spec.api_version)
    for key, expected in (("apiVersion", spec.api_version), ("kind", kind.kind)):
        if key in base and base[key] != expected:
            hint = (
                "set api_version to the base manifest's version"
                if key == "apiVersion"
                else f"must be {'an' if kind.kind[:1] in 'AEIOU' else 'a'} {kind.kind}"
            )
            errors.add(f"base_manifest.{key}", base[key], f"differs from {expected!r}: {hint}")
    for role, name in ROLES.items():
        wanted = spec.replica(role).container_name
        containers = pod_spec(base, role, kind).get("containers")
        if wanted is None or not isinstance(containers, list) or not containers:
            continue
        names = [c.get("name") for c in containers if isinstance(c, dict)]
        if wanted not in names:
            reason = f"names no {name} container of the base manifest (containers: {names}); leave it unset to use the "
            errors.add(f"{name}.container_name", wanted, reason + "first one")


# ---------------------------------------------------------------- the merged manifest


def check_manifest(errors: ErrorList, manifest: dict) -> None:
    """Operator and Kubernetes rules on a complete (merged) MPIJob manifest."""
    api: Any = manifest.get("apiVersion")
    if not _check(errors, "api_version", api, rules.one_of(api_versions())):
        return
    kind = cast(JobKind, kind_for(api))
    metadata = manifest.get("metadata")
    if not isinstance(metadata, dict):
        errors.add("metadata", metadata, "must be a mapping with at least a name")
        metadata = {}
    job = manifest.get("spec")
    if not isinstance(job, dict):
        errors.add("spec", job, "must be a mapping")
        return
    workers = _worker_count(value_at(manifest, manifest_path(_WORKERS, WORKER_REPLICA, api)))
    check_job_name(errors, metadata.get("name"), workers, kind)
    if metadata.get("namespace") is not None:
        _passes(errors, field_of("namespace"), metadata["namespace"])
    check_labels(errors, "labels", metadata.get("labels"))
    labels: Any = metadata.get("labels")
    for row in _LABEL_ROWS if isinstance(labels, dict) else ():
        if labels.get(row.path[-1]) is not None:
            _passes(errors, row, labels[row.path[-1]])
    check_annotations(errors, "annotations", metadata.get("annotations"))
    if kind.field_paths is not None:  # not shaped like an MPIJob: its rows where it keeps them
        check_rows_manifest(errors, manifest, kind)
        return
    _check_spec_fields(errors, manifest, kind)
    policy: Any = job.get("runPolicy")
    if _is_mapping(errors, "run_policy", policy):
        # a deprecated spec.cleanPodPolicy beside it: their conflicts are _check_spec_fields'
        top_level = kind.top_level_clean_pod_policy and "cleanPodPolicy" in job
        _check_keys(errors, policy, _RUN_POLICY, "spec.runPolicy", f"is not a runPolicy field of {api}", {
            "managedBy": rules.one_of(kind.managed_by),
            **({"ttlSecondsAfterFinished": _launcher_ttl(kind)} if kind.launcher_ttl_at_least_one else {}),
            "cleanPodPolicy": (lambda value: None) if top_level
                              else cast(rules.Rule, _CLEAN_POD_POLICY.check),
        })  # fmt: skip
        scheduling: Any = policy.get("schedulingPolicy")
        if _is_mapping(errors, "run_policy.scheduling_policy", scheduling):
            # The gang is the launcher + the workers: a larger minimum can never be scheduled.
            _check_keys(
                errors,
                scheduling,
                _SCHEDULING,
                "spec.runPolicy.schedulingPolicy",
                "is not a schedulingPolicy field",
                {"minAvailable": rules.integer(1, workers + 1)},
            )
    _check_replica_specs(errors, manifest, kind)


def _launcher_ttl(kind: JobKind) -> rules.Rule:
    """A kind whose ttlSecondsAfterFinished is the launcher Job's (v2beta1). At 0 the Job controller deletes the
    finished Job at once, and mpi-operator v0.8.2, when it has not recorded the job's success yet, finds no launcher
    Job and creates it again: the program runs twice (seen in a CI run of tests/faults, 2026-11-25)."""

    def rule(value: Any) -> str | None:
        if problem := rules.integer()(value):
            return problem
        return (
            (
                f"must be at least 1 on {kind.api_version}: it is the launcher Job's, and a launcher Job deleted the "
                f"moment it finishes can be created again by the {kind.controller} (the program runs twice)"
            )
            if value == 0
            else None
        )

    return rule


def _is_mapping(errors: ErrorList, field: str, value: Any) -> bool:
    if value is not None and not isinstance(value, dict):
        errors.add(field, value, "must be a mapping")
    return isinstance(value, dict)


def _check_keys(
    errors: ErrorList,
    node: dict,
    known: dict[str, Field],
    path: str,
    unknown: str,
    special: dict[str, rules.Rule],
) -> None:
    """Every key of ``node`` (at ``path``) known, every value passing its row's rule (or the ``special`` one: what
    depends on the API version or the rest of the job)."""
    for key, value in node.items():
        row = known.get(key)
        if value is None:
            continue
        if row is None:
            errors.add(f"{path}.{key}", value, unknown)
        elif row.nested is None and (rule := special.get(key, row.check)) is not None:
            _passes(errors, row, value, rule)
        elif key == "minResources":
            reason = "must be a mapping of resource names to quantities"
            errors.check_entries(
                _PREFIXES[row.owner] + row.name,
                value,
                reason,
                rules.qualified_name,
                quantity_problem,
                key_what="invalid resource name",
            )


def _worker_count(replicas: Any) -> int:
    """Worker replicas as the operator counts them for pod names (1 when unset or invalid)."""
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 0 else 1


def _check_spec_fields(errors: ErrorList, manifest: dict, kind: JobKind) -> None:
    api, job = kind.api_version, manifest["spec"]
    known = {**_SPEC_KEYS, kind.replica_layout.specs[-1]: (kind.replica_layout.field, None)}
    for key, value in job.items():
        name, only = known.get(key, (None, None))
        if name is None:
            errors.add(f"spec.{key}", value, f"is not a field of {api} {kind.kind}")
        elif only not in (None, api):
            errors.add(name, value, f"is not supported by {api}: spec.{key} exists only in {only}")
        elif key in _SPEC and _SPEC[key].check is not None:
            _passes(errors, _SPEC[key], value)
    containers = pod_spec(manifest, WORKER_REPLICA, kind).get("containers")
    worker = (
        containers[0]
        if isinstance(containers, list) and containers and isinstance(containers[0], dict)
        else {}
    )
    names = [c.get("name") for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []
    policy, clean, main = (
        job.get("launcherCreationPolicy"),
        job.get("cleanPodPolicy"),
        job.get("mainContainer"),
    )
    if (
        kind.creation_policy_needs_probe
        and policy == WAIT_FOR_WORKERS_READY
        and not (worker.get("readinessProbe") or worker.get("startupProbe"))
    ):
        errors.add(
            "launcher_creation_policy",
            policy,
            "requires a worker readiness or startup probe: without one a "
            "worker counts as Ready as soon as it starts, before sshd accepts connections",
        )
    if kind.top_level_clean_pod_policy and clean is not None and _passes(errors, _CLEAN_POD_POLICY, clean):
        other = job["runPolicy"].get("cleanPodPolicy") if isinstance(job.get("runPolicy"), dict) else None
        if other is not None and other != clean:
            errors.add(
                "run_policy.clean_pod_policy",
                clean,
                f"conflicts with spec.runPolicy.cleanPodPolicy={other!r} "
                "(the training-operator lets runPolicy win)",
            )
    if kind.main_container_field and main is not None and (not isinstance(main, str) or main not in names):
        errors.add(
            "main_container",
            main,
            f"must name a worker container (kubexec.sh runs there); containers: {names}",
        )


def _check_replica_specs(errors: ErrorList, manifest: dict, kind: JobKind) -> None:
    job, layout = manifest["spec"], kind.replica_layout
    specs, keys = replica_specs(manifest, kind), [layout.keys[role] for role in ROLES]
    if not isinstance(specs, dict):
        errors.add(layout.field, specs, f"must be a mapping with {' and '.join(keys)}")
        return
    for key in specs:
        if layout.role_of(key) is None:
            errors.add(
                f"{layout.field}.{key}", specs[key], f"unknown replica type (expected {', '.join(keys)})"
            )
    ssh_path = (
        job["sshAuthMountPath"]
        if isinstance(job.get("sshAuthMountPath"), str)
        else DEFAULT_SSH_AUTH_MOUNT_PATH
    )
    for role, name in ROLES.items():
        replica = specs.get(layout.keys[role])
        if not isinstance(replica, dict):
            errors.add(name, replica, f"the {layout.keys[role]} replica spec is required")
            continue
        for key in replica:
            if key not in _REPLICA_FIELDS:
                errors.add(
                    f"{layout.field}.{layout.keys[role]}.{key}", replica[key], "is not a replica spec field"
                )
        replicas = replica.get("replicas")
        if role == LAUNCHER_REPLICA:
            if replicas is not None and (
                isinstance(replicas, bool) or not isinstance(replicas, int) or replicas != 1
            ):
                errors.add("launcher.replicas", replicas, "must be 1")
        elif replicas is None:
            errors.add("worker.replicas", None, "is required (the number of worker pods, >= 1)")
        else:
            _check(errors, "worker.replicas", replicas, rules.integer(1))
        restart = replica.get("restartPolicy")
        restarts = rules.one_of(kind.restart_policies)
        valid = restart is None or _check(errors, f"{name}.restart_policy", restart, restarts)
        if valid and role == LAUNCHER_REPLICA and restart == "Always":  # only v1 accepts Always at all
            reason = "restarts the launcher even after success: the job never completes"
            errors.add("launcher.restart_policy", restart, reason)
        check_pod_template(errors, name, replica.get("template"), dict(kind.injected_volumes(role, ssh_path)))
