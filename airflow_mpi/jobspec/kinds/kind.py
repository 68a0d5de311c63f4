"""What one MPI API ("kind") is, as data: the object the model, the request layer and the wait engine ask instead
of branching on the API version.

A JobKind says which resource it is (group, version, kind, plural), which field-table rows it has and where its
manifest holds them (its replica specs: ReplicaLayout; the rows themselves stay in fields.py), its defaults (the
retries mapping included), its own validation rules, the names its controller derives, how its state and its
"invalid" verdict are read, how its pods are selected and their roles told, what stands between the job and its
launcher pods (LauncherOwner), and what one launcher attempt is. Instances: mpijob_v2beta1.py, mpijob_v1.py; the
registry (registry.py) finds them, and others registered through an entry point. Pure: data and pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_mpi.jobspec.vocabulary import (
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    LAUNCHER,
    LAUNCHER_REPLICA,
    MPI_REPLICA_SPECS,
    REPLICA_INDEX_LABEL,
    WORKER,
    WORKER_REPLICA,
    JobCondition,
)


class Row(Protocol):
    """What a kind reads of a field-table row (fields.Field), without importing the table."""

    @property
    def path(self) -> tuple: ...

    @property
    def api(self) -> str | None: ...

    @property
    def v1_path(self) -> tuple: ...

    def key(self, role: str | None = None) -> str:
        """The model's name of the row (of ``role``'s replica spec): ``worker.image``, ``run_policy.suspend``."""
        ...


@dataclass(frozen=True)
class RetriesMapping:
    """What a task's ``retries`` becomes in the job, where neither a parameter nor the base manifest says:
    ``runPolicy.backoffLimit`` and the launcher's ``restartPolicy``. ``mapped``: the controller runs the launcher
    ``retries + 1`` times in one job, and a Failed job is final for the task; otherwise the job runs its launcher
    once and each Airflow retry submits a fresh job (a kind whose controller cannot count attempts exactly). Either
    way ``retries + 1`` attempts, never multiplied by a restarting pod."""

    backoff_limit: int
    launcher_restart_policy: str
    mapped: bool = True


# What one launcher attempt is: a new pod (a batch Job's retry) or a restart of the launcher pod's container.
ATTEMPT_IS_POD, ATTEMPT_IS_CONTAINER_RESTART = "pod", "container restart"


@dataclass(frozen=True)
class ReplicaLayout:
    """Where a kind's manifest holds its replica specs: one mapping at ``specs`` with a key per role of the model
    (LAUNCHER_REPLICA, WORKER_REPLICA -> ``keys``). Inside a replica spec the field table's replica rows hold their
    ``path``s (``replicas``, ``restartPolicy``, ``template``...). Both MPIJob APIs: ``spec.mpiReplicaSpecs``
    keyed ``Launcher``/``Worker``; the training-operator's other v1 jobs have the same shape under other names."""

    specs: tuple[str, ...] = ("spec", MPI_REPLICA_SPECS)
    keys: Mapping[str, str] = field(
        default_factory=lambda: {LAUNCHER_REPLICA: LAUNCHER_REPLICA, WORKER_REPLICA: WORKER_REPLICA}
    )

    def path(self, role: str) -> tuple[str, ...]:
        """Where the replica spec of ``role`` is (a role it has no key for is kept as given: the reference's
        ``*``, both roles)."""
        return (*self.specs, self.keys.get(role, role))

    def specs_in(self, manifest: Any) -> Any:
        """The replica specs' mapping as ``manifest`` has it, whatever its type (None when absent)."""
        if not self.present:
            return None
        node = manifest
        for key in self.specs:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def role_of(self, key: Any) -> str | None:
        """The model's role of a replica spec key, or None when the kind has no such replica."""
        return next((role for role, k in self.keys.items() if k == key), None)

    @property
    def present(self) -> bool:
        """The kind's manifest has replica specs at all (NO_REPLICAS: a TrainJob's pods come from its runtime)."""
        return bool(self.specs)

    @property
    def field(self) -> str:
        """The name errors give the replica specs (``mpi_replica_specs``), from the manifest's key."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.specs[-1]).lower()


MPIJOB_REPLICAS = ReplicaLayout()  # spec.mpiReplicaSpecs.{Launcher,Worker}: both MPIJob APIs
NO_REPLICAS = ReplicaLayout(
    specs=(), keys={}
)  # a kind whose manifest has no replica specs (its field_paths say all)


def _at(node: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in nested mappings, or None where one is missing or no mapping."""
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


@dataclass(frozen=True)
class RankPodsPatch:
    """Where a kind whose pods come from a runtime (no replica specs) adds a volume to the pods that run ranks: one
    entry of the manifest's ``patches`` list per ``manager`` (Trainer v2.3.0's ``spec.runtimePatches``, keyed by
    manager), patching the runtime's replicated job ``replicated_job`` (its pod spec's volumes) and its container
    ``container`` (the mount). Only that job: a launcher that runs no rank is another replicated job."""

    replicated_job: str
    container: str
    patches: tuple[str, ...] = ("spec", "runtimePatches")
    jobs: tuple[str, ...] = ("trainingRuntimeSpec", "template", "spec", "replicatedJobs")  # in one entry
    pod_spec: tuple[str, ...] = ("template", "spec", "template", "spec")  # in one replicated job's patch

    def entries(self, manifest: Any) -> list:
        """The manifest's patch entries (a list, or [] when absent or malformed)."""
        node = _at(manifest, self.patches)
        return node if isinstance(node, list) else []

    def entry(self, manager: str, volume: Mapping[str, Any], mount: Mapping[str, Any]) -> dict:
        """The patch of ``manager`` adding ``volume`` to the replicated job's pods and ``mount`` to its container."""
        pod: dict[str, Any] = {
            "volumes": [dict(volume)],
            "containers": [{"name": self.container, "volumeMounts": [dict(mount)]}],
        }
        for key in reversed(self.pod_spec):
            pod = {key: pod}
        patch: dict[str, Any] = {self.jobs[-1]: [{"name": self.replicated_job, **pod}]}
        for key in reversed(self.jobs[:-1]):
            patch = {key: patch}
        return {"manager": manager, **patch}

    def volumes(self, manifest: Any, manager: str) -> list:
        """The volumes ``manager``'s patch adds to the replicated job's pods ([] when it has none)."""
        for patch in self.entries(manifest):
            if isinstance(patch, dict) and patch.get("manager") == manager:
                for job in _at(patch, self.jobs) or []:
                    if isinstance(job, dict) and job.get("name") == self.replicated_job:
                        return list(_at(job, (*self.pod_spec, "volumes")) or [])
        return []


@dataclass(frozen=True)
class LauncherOwner:
    """The object a kind's controller puts between the job and its launcher pods: the pods' controller, itself
    controlled by the job, named ``JobKind.launcher_name(job)`` (mpi-operator v2beta1: the batch/v1 Job
    ``<job>-launcher``). hooks/ownership.py reads it once to tell whether a pod naming it is the job's."""

    kind: str  # its kind, as a pod's controller reference names it
    group: str
    version: str
    plural: str

    @property
    def resource(self) -> str:
        """``<plural>.<group>``, as RBAC names it."""
        return f"{self.plural}.{self.group}"


@dataclass(frozen=True)
class StateReading:
    """How a kind's status tells its state (jobspec/status.job_state): the condition types meaning succeeded and
    failed (terminal), the one meaning Created (None: a controller that writes none, whose acknowledgement is
    ``acknowledged``, a status field it fills once it made the job's objects, or any condition), whether Running
    comes from the launcher pod (a job without a Running condition), and which pods its controller deletes once
    the job finished (``clean_pod_policy``: None reads the MPIJob's ``runPolicy.cleanPodPolicy``)."""

    succeeded: str = JobCondition.SUCCEEDED
    failed: str = JobCondition.FAILED
    created: str | None = JobCondition.CREATED
    acknowledged: str | None = None
    running_from_pods: bool = False
    created_text: str = "Created condition"  # what a startup timeout says the job never got
    # a worker failing before the launcher fails the job (TrainJob: its node Job's failure fails the JobSet); the
    # mpi-operator neither replaces such a worker nor fails the job (wait/progress.py gives up on it itself)
    fails_on_failed_worker: bool = False
    clean_pod_policy: str | None = None
    # a status without startTime/completionTime (TrainJob): both read from its conditions (jobspec/status.py `_times`)
    times_from_conditions: bool = False


@dataclass(frozen=True)
class PodLabels:
    """How a kind's controller labels the pods of a job: the selectors of a role's pods (tried in order, the
    next only when the one before finds nothing), the labels whose value tells a pod's role, and the one that
    tells a worker's index."""

    job_name: str  # label holding the job's name (the watch hub watches the pods that have it)
    role: str  # label holding the role (launcher/worker)
    role_values: Mapping[str, str] = field(default_factory=dict)  # a role label value -> LAUNCHER/WORKER
    fallbacks: tuple[tuple[str, str], ...] = ()  # older controllers' (job-name label, role label)
    role_keys: tuple[str, ...] = ()  # every label that may tell the role, in the order to read them
    index: str = REPLICA_INDEX_LABEL  # label holding a worker's index (workers are listed in its order)
    selector_values: Mapping[str, str] = field(
        default_factory=dict
    )  # LAUNCHER/WORKER -> the role label's value

    def selectors(self, name: str, role: str) -> list[str]:
        """Label selectors of the ``role`` (``launcher``/``worker``) pods of job ``name``."""
        value = self.selector_values.get(role, role)
        return [
            f"{job}={name},{label}={value}" for job, label in ((self.job_name, self.role), *self.fallbacks)
        ]

    def told_role(self, labels: Mapping[str, str]) -> str | None:
        """``launcher`` or ``worker`` as a pod's labels tell it, or None when they do not."""
        for key in self.role_keys or (self.role,):
            value = (labels.get(key) or "").lower()
            if value in (LAUNCHER, WORKER):
                return value
            if value in self.role_values:
                return self.role_values[value]
        return None

    def role_of(self, labels: Mapping[str, str]) -> str:
        """``launcher`` or ``worker`` from a pod's labels (a pod the labels do not tell is a worker)."""
        return self.told_role(labels) or WORKER


@dataclass(frozen=True)
class JobKind:
    """One MPI API: everything that differs between APIs, in one place (see the module docstring)."""

    # ------------------------------------------------------------------ identity
    group: str
    version: str
    kind: str
    plural: str
    controller: str  # who runs it, as users know it (in messages)
    # ------------------------------------------------------------------ fields
    restart_policies: tuple[str, ...]  # the replicas' restartPolicy values the controller handles
    managed_by: tuple[str, ...]  # runPolicy.managedBy values it accepts
    # role (LAUNCHER_REPLICA/WORKER_REPLICA) -> its main container's default name
    container_names: Mapping[str, str]
    replica_layout: ReplicaLayout = MPIJOB_REPLICAS  # where the manifest holds each role's replica spec
    # A kind not shaped like an MPIJob: the only rows it has, by the model's name (Row.key: ``worker.image``), and
    # where its manifest holds each (from the root), in the manifest's key order. None: the MPIJob's shape (every
    # row without ``api``, at its ``path``, replica rows in the replica specs).
    field_paths: Mapping[str, tuple[str, ...]] | None = None
    # values of its own rows written where neither a parameter nor the base manifest sets them (row key -> value)
    field_defaults: Mapping[str, Any] = field(default_factory=dict)
    # spec keys a base manifest may hold that no row sets, kept verbatim (field_paths kinds)
    verbatim_spec_keys: tuple[str, ...] = ()
    # what to do instead of a parameter the kind does not have (field_paths kinds: in the refusal)
    instead: str = ""
    instead_of: Mapping[str, str] = field(
        default_factory=dict
    )  # a row key's own ``instead`` (its refusal says it)
    implementations: tuple[str, ...] | None = None  # the MPI implementations it runs (None: every one)
    # field_paths kinds: a row's rule where the kind's differs from the row's (row key -> rule: value -> problem)
    field_rules: Mapping[str, Callable[[Any], str | None]] = field(default_factory=dict)
    reserved_env: tuple[str, ...] = ()  # environment variables its controller sets, refused in the job's env
    # container-like objects outside replica specs (TrainJob: spec.trainer), redacted as containers are
    container_paths: tuple[tuple[str, ...], ...] = ()
    launcher_restart_policy: str = "Never"  # the controller's default for the launcher replica
    reads_v1_paths: bool = False  # a row's v1_path is where this kind's manifest holds it
    main_container_field: bool = False  # spec.mainContainer names the container the ranks run in
    launcher_command_in_args: bool = (
        False  # a command of LauncherCommand.in_args goes into args (entrypoint kept)
    )
    # (MPI implementation, the launcher command ``program`` built) -> the command this kind's launcher runs
    launcher_command: Callable[[str, list[str]], list[str]] = field(default=lambda implementation, argv: argv)
    # its launcher_command gives MPICH's Hydra proxies the launcher's address itself (v1: ``-localhost``), so a
    # launch's own way to do it (@task.mpi's commands.HYDRA_CONNECT_BY_IP) is taken off first
    hydra_address_wired: bool = False
    # a kind without replica specs: how a volume reaches the pods that run ranks (None: through the replica specs)
    rank_pods_patch: RankPodsPatch | None = None
    # ------------------------------------------------------------------ defaults
    retries_mapping: Callable[[int], RetriesMapping] = field(
        default=lambda retries: RetriesMapping(retries, "Never")
    )
    launcher_creation_policy: str | None = (
        None  # written where nothing sets it (None: the field is not the kind's)
    )
    mpiuser_convention: bool = (
        False  # a job of parameters only runs as the mpi-operator's unprivileged mpiuser
    )
    container_defaults: bool = (
        False  # worker startup probe, mpiuser sshd/uid (precedence._container_defaults)
    )
    # the workers' command where nothing gives one, for a kind whose ranks are exec'd into idle workers
    idle_worker_command: tuple[str, ...] = ()
    launcher_dns_search: bool = False  # the launcher's own short host name made resolvable (MPICH, Intel)
    implementation_field: bool = True  # spec.mpiImplementation exists (its controller default is reported)
    # ------------------------------------------------------------------ validation
    launcher_ttl_at_least_one: bool = False  # runPolicy.ttlSecondsAfterFinished belongs to a launcher Job
    creation_policy_needs_probe: bool = False  # WaitForWorkersReady needs a worker readiness/startup probe
    top_level_clean_pod_policy: bool = False  # a deprecated spec.cleanPodPolicy beside runPolicy's
    injected_volumes: Callable[[str, str], Mapping[str, str]] = field(default=lambda role, ssh: {})
    # ------------------------------------------------------------------ names, state, events, pods
    launcher_suffix: str = "-launcher"
    worker_infix: str = "-worker-"
    # the launcher pods' controller between them and the job (None: the job controls them itself, as the workers)
    launcher_owner: LauncherOwner | None = None
    # the names a pod's launcher_owner-kind controller may have (None: launcher_name(job) only; TrainJob: the batch
    # Jobs of its launcher and of its nodes)
    owner_suffixes: tuple[str, ...] | None = None
    # the object between those and the job, named as the job (TrainJob: its JobSet; None: they name the job itself)
    owner_parent: LauncherOwner | None = None
    state: StateReading = StateReading()
    # how its deletions propagate: Foreground keeps the job visible until its pods are gone (waiting for the job
    # waits for them); Background removes it at once, its dependents after (then owner_parent, named as the job, is
    # what a wait for the deletion waits for too: the next job of that name must not meet the old one's)
    delete_propagation: str = "Foreground"
    conditions: tuple[str, ...] = ()  # the status.conditions[].type values it writes
    invalid_reasons: tuple[str, ...] = ()  # Warning event reasons meaning "this job will never be created"
    pod_labels: PodLabels = field(default_factory=lambda: PodLabels(JOB_NAME_LABEL, JOB_ROLE_LABEL))
    launcher_attempt: str = ATTEMPT_IS_POD
    # how many launcher attempts a job of (backoffLimit, launcher restartPolicy or None: unknown) may make (None:
    # unknown); the task log numbers attempts "n of N"
    attempts_allowed: Callable[[int, str | None], int | None] = field(default=lambda limit, policy: limit + 1)
    # what its controller does to the job's pods when the job is suspended while it runs (Kueue's eviction), told
    # after "the <controller> " (the program starts over on new pods once the job is resumed)
    on_suspend: str = "stops its launcher and workers"

    # ------------------------------------------------------------------ derived
    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def has_row(self, row: Row, role: str | None = None) -> bool:
        """The kind has the field of ``row`` (a row naming one API belongs to that API only; a ``field_paths``
        kind has the rows it lists; a replica row without ``role``: of either role)."""
        if self.field_paths is None:
            return row.api in (None, self.api_version)
        roles = (role,) if role is not None or row.key() else tuple(self.container_names)
        return any(row.key(r) in self.field_paths for r in roles)

    def row_path(self, row: Row, role: str | None = None) -> tuple:
        """Where this kind's manifest holds ``row`` (from the replica spec for replica rows; for a ``field_paths``
        kind from the root, or the row's own path where it has no such row)."""
        if self.field_paths is not None:
            return self.field_paths.get(row.key(role), row.path)
        return row.v1_path if self.reads_v1_paths and row.v1_path else row.path

    def replica_path(self, role: str) -> tuple[str, ...]:
        """Where this kind's manifest holds the replica spec of ``role`` (LAUNCHER_REPLICA/WORKER_REPLICA)."""
        return self.replica_layout.path(role)

    def launcher_name(self, job: str) -> str:
        """The launcher's name (v2beta1: its Job; v1: its bare Pod)."""
        return job + self.launcher_suffix

    def worker_name(self, job: str, index: int) -> str:
        """Worker ``index``'s pod name (and host name)."""
        return f"{job}{self.worker_infix}{index}"

    def longest_name(self, job: str, workers: int) -> str:
        """The longest name the controller derives from ``job`` with ``workers`` workers (the last worker's,
        else the launcher's): it must stay a DNS label."""
        return max((self.worker_name(job, max(workers, 1) - 1), self.launcher_name(job)), key=len)

    def owner_names(self, job: str) -> tuple[str, ...]:
        """The names a pod's controller of the ``launcher_owner`` kind may have to be the job's."""
        if self.owner_suffixes is None:
            return (self.launcher_name(job),)
        return tuple(job + suffix for suffix in self.owner_suffixes)

    def event_selector(self, name: str) -> str:
        """The field selector of the events about the job ``name``."""
        return f"involvedObject.kind={self.kind},involvedObject.name={name}"

    def is_invalid_event(self, reason: Any) -> bool:
        """The event's reason says the controller rejected the job's spec (it will never run)."""
        return reason in self.invalid_reasons
