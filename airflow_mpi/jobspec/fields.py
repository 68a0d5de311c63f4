"""Every field of an MPIJob and every parameter that sets one, declared once: adding a field is adding a row.

A row names the field (its attribute on the spec class that holds it, and the parameter and error path users see)
and says where the manifest holds it, which operator parameter sets it, how a rendered template's text becomes its
type, the rule its value must pass, and one line for users. From the rows come the spec classes (generated below),
the operators' signatures and template fields, the parameters' translation into the spec (parameters.py), the layout
(layout.py), the base manifest's paths in the precedence rule (precedence.py), validation's field names and value
rules (validation.py, pod_validation.py), and the parameter reference (docs/parameters.md: parameter_reference.py).
Row order is the manifest's key order (the golden tests pin it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any, cast

from airflow_mpi.jobspec import rules
from airflow_mpi.jobspec.coerce import as_argv, as_bool, as_int
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.kinds.mpijob_v1 import API_V1
from airflow_mpi.jobspec.kinds.mpijob_v2beta1 import API_V2BETA1
from airflow_mpi.jobspec.kinds.trainjob import API_TRAINJOB, TRAINING_RUNTIMES
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.spec import (
    CLEAN_POD_POLICIES,
    DISCOVER_HOSTS_SCRIPT,
    GPU_RESOURCE,
    IMAGE_PULL_POLICIES,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    LAUNCHER_CREATION_POLICIES,
    MPI_IMPLEMENTATIONS,
    OPENMPI,
    Defaults,
    LauncherCommand,
)
from airflow_mpi.jobspec.vocabulary import LAUNCHER, LAUNCHER_REPLICA, ROLES, WORKER

# The class holding a row's field. LAUNCH rows build the launcher command and TASK rows (operators/task_params.py)
# say how the task waits: neither is part of the MPIJob.
JOB, REPLICA, RUN_POLICY, SCHEDULING = "MPIJobSpec", "ReplicaSpec", "RunPolicy", "SchedulingPolicy"
LAUNCH, TASK = "launch", "task"
NEW = object()  # a default: a new instance of the nested class
Coerce = Callable[[ErrorList, str, Any], Any]


def _ssh_path(value: object) -> str | None:
    ok = isinstance(value, str) and value.startswith("/")
    return None if ok else "must be an absolute path (the operator mounts the SSH keys there)"


def _label_named_object(value: object) -> str | None:
    """The name of a Kueue object (a DNS-1123 subdomain) that a label holds (so at most 63 characters)."""
    return rules.dns1123_subdomain(value) or rules.label_value(value)


def env_list(env: dict | list) -> list:
    """EnvVar dicts from the ``{"NAME": "value"}`` shorthand (values stringified) or a list as given."""
    if isinstance(env, dict):
        return [
            {"name": name, "value": value if isinstance(value, str) else str(value)}
            for name, value in env.items()
        ]
    return env


@dataclass(frozen=True)
class Field:
    name: str  # its attribute on the spec class, its parameter (unless ``param`` says otherwise), its error path
    owner: str  # JOB, REPLICA, RUN_POLICY, SCHEDULING, LAUNCH or TASK
    type: Any  # as users give it (the parameter's annotation; for ``nested`` rows a dict)
    path: tuple = ()  # where the manifest holds it: from the MPIJob's root, for REPLICA rows from the replica spec
    api: str | None = None  # the one API version that has it
    v1_path: tuple = ()  # where a kubeflow.org/v1 manifest holds it instead
    param: bool | dict[str, str] = True  # REPLICA rows: True for both roles, or the parameter of each role
    templated: bool | str = False  # a template field ("json"/"yaml": shown with that renderer)
    coerce: Coerce | None = None  # a rendered template's text -> the type
    default: Any = None  # the parameter's and the spec's (None: not given)
    stand_in: Any = None  # a valid value while unrendered at parse time (None: the default)
    check: rules.Rule | None = None  # the rule the manifest's value must pass
    to_manifest: Callable[[Any], Any] | None = None
    nested: str | None = None  # a dict parameter for the spec class of that name
    doc: str = ""  # one line for users: docs/parameters.md (parameter_reference.py) shows it

    def key(self, role: str | None = None) -> str:
        """The model's name of the row (errors', JobKind.field_paths'): ``slots_per_worker``, ``run_policy.suspend``,
        ``worker.image`` (a replica row without ``role``: "")."""
        if self.owner == REPLICA:
            return f"{ROLES[role]}.{self.name}" if role else ""
        return {RUN_POLICY: "run_policy.", SCHEDULING: "run_policy.scheduling_policy."}.get(
            self.owner, ""
        ) + self.name

    @property
    def parameter_default(self) -> Any:
        """The operator parameter's default: a nested class's row is "not given" (None), not a new instance."""
        return None if self.default is NEW else self.default


_RP = ("spec", "runPolicy")
_SP = (*_RP, "schedulingPolicy")
POD = ("template", "spec")
MAIN = (*POD, "containers", 0)  # the main container
V2, V1, TJ = API_V2BETA1, API_V1, API_TRAINJOB

FIELDS: tuple[Field, ...] = (
    Field("api_version", JOB, str, default=API_V2BETA1,
          doc="the API: `kubeflow.org/v2beta1` (the mpi-operator) or `kubeflow.org/v1` (the training-operator)"),
    Field("name", JOB, str, ("metadata", "name"), templated=True, stand_in="parse-time-name",
          doc="a prefix (the base manifest's name too): the task instance's hash is appended"),
    Field("namespace", JOB, str, ("metadata", "namespace"), templated=True, check=rules.dns1123_label,
          doc="the job's namespace"),
    Field("labels", JOB, dict[str, str], ("metadata", "labels"), templated="json",
          doc="labels of the MPIJob (the task instance's `airflow-mpi.io/*` labels are added)"),
    Field("annotations", JOB, dict[str, str], ("metadata", "annotations"), templated="json",
          doc="annotations of the MPIJob (the task instance's are added)"),
    # Kueue's labels: its MPIJob integration (kubeflow.org/mpijob) is v2beta1's; a v1 job would not be queued at all
    Field("queue_name", JOB, str, ("metadata", "labels", KUEUE_QUEUE_LABEL), V2, templated=True,
          check=_label_named_object,
          doc="Kueue's LocalQueue: the label `kueue.x-k8s.io/queue-name` (docs/kueue.md)"),
    Field("workload_priority_class", JOB, str, ("metadata", "labels", KUEUE_PRIORITY_LABEL), V2, templated=True,
          check=_label_named_object,
          doc="Kueue's WorkloadPriorityClass: the label `kueue.x-k8s.io/priority-class`"),
    # Kubeflow Trainer's runtimeRef (the TrainJob's own rows: jobspec/kinds/trainjob.py says where its others are)
    Field("runtime", JOB, str, ("spec", "runtimeRef", "name"), TJ, templated=True, check=rules.dns1123_subdomain,
          doc="TrainJob: the runtime it runs from (`spec.runtimeRef.name`; default `openmpi-mpiuser`, "
              "deploy/trainjob-mpi-runtime.yaml)"),
    Field("runtime_kind", JOB, str, ("spec", "runtimeRef", "kind"), TJ, check=rules.one_of(TRAINING_RUNTIMES),
          doc="TrainJob: `ClusterTrainingRuntime` (default) or `TrainingRuntime` (in the job's namespace)"),
    Field("runtime_api_group", JOB, str, ("spec", "runtimeRef", "apiGroup"), TJ, param=False,
          doc="TrainJob: the runtime's API group, `trainer.kubeflow.org`"),
    # not worker_resources: Trainer v2.3.0 gives resourcesPerNode to the trainer step's pods (the launcher of a runtime
    # whose launcher is no node) and to the node pods only with runLauncherAsNode (core/trainingruntime.go)
    Field("resources_per_node", JOB, dict, ("spec", "trainer", "resourcesPerNode"), TJ, templated="json",
          doc="TrainJob: `spec.trainer.resourcesPerNode`, requests and limits the Trainer gives the trainer step's "
              "`node` container (the launcher of `openmpi-mpiuser`), and the node pods too only where the runtime "
              "runs its launcher as a node (`runLauncherAsNode`); size node pods in the runtime otherwise"),
    Field("unique_name_suffix", JOB, bool, default=True, coerce=as_bool,
          doc="`False`: the job is named exactly `name` (one job of that name at a time)"),
    Field("base_manifest", JOB, dict | str | os.PathLike, templated="yaml",
          doc="a dict, YAML/JSON text, or a `.yaml`/`.yml`/`.json` template file; parameters are deep-merged onto "
              "it, it wins over defaults"),
    Field("slots_per_worker", JOB, int, ("spec", "slotsPerWorker"), templated=True, coerce=as_int,
          check=rules.integer(1),
          doc="MPI slots (ranks) per worker: `-np` is workers x slots"),
    Field("run_launcher_as_worker", JOB, bool, ("spec", "runLauncherAsWorker"), V2, coerce=as_bool,
          check=rules.boolean,
          doc="the launcher runs ranks too"),
    Field("ssh_auth_mount_path", JOB, str, ("spec", "sshAuthMountPath"), V2, check=_ssh_path,
          doc="where the job's SSH keys are mounted (docs/first-run.md)"),
    Field("launcher_creation_policy", JOB, str, ("spec", "launcherCreationPolicy"), V2,
          check=rules.one_of(LAUNCHER_CREATION_POLICIES),
          doc="`AtStartup`, or `WaitForWorkersReady`: the launcher once the workers are Ready"),
    Field("mpi_implementation", JOB, str, ("spec", "mpiImplementation"), V2, templated=True, stand_in=OPENMPI,
          check=rules.one_of(MPI_IMPLEMENTATIONS),
          doc="`OpenMPI`, `Intel` or `MPICH`; on v1 only with `program`, where it picks mpirun's flags"),
    Field("clean_pod_policy", RUN_POLICY, str, (*_RP, "cleanPodPolicy"), v1_path=("spec", "cleanPodPolicy"),
          check=rules.one_of(CLEAN_POD_POLICIES),
          doc="`None`, `Running` or `All`: the pods the controller deletes once the job ends"),
    Field("main_container", JOB, str, ("spec", "mainContainer"), V1,
          doc="the container the ranks run in"),
    Field("run_policy", JOB, dict, param=False, default=NEW, nested=RUN_POLICY),
    Field("ttl_seconds_after_finished", RUN_POLICY, int, (*_RP, "ttlSecondsAfterFinished"), coerce=as_int,
          check=rules.integer(),
          doc="seconds a finished job is kept (0 is refused on v2beta1: docs/limitations.md)"),
    Field("active_deadline_seconds", RUN_POLICY, int, (*_RP, "activeDeadlineSeconds"), coerce=as_int,
          check=rules.integer(maximum=rules.INT64_MAX),
          doc="seconds the job may run"),
    Field("backoff_limit", RUN_POLICY, int, (*_RP, "backoffLimit"), coerce=as_int, check=rules.integer(),
          doc="launcher attempts after the first; given, each Airflow retry runs a fresh job"),
    Field("scheduling_policy", RUN_POLICY, dict, _SP, nested=SCHEDULING,
          doc="gang scheduling (Volcano, scheduler-plugins): a dict of the fields below, snake_case or camelCase keys"),
    # scheduling_policy's keys, not parameters of their own: a top-level ``queue`` is Airflow's (BaseOperator's
    # executor queue), and another top-level name is refused by Airflow as an invalid argument
    Field("min_available", SCHEDULING, int, (*_SP, "minAvailable"), param=False, coerce=as_int,
          doc="the gang's least number of pods (at most workers + 1)"),  # <= workers + 1: validation.py
    Field("queue", SCHEDULING, str, (*_SP, "queue"), param=False, check=rules.non_empty,
          doc="the gang scheduler's queue"),
    Field("min_resources", SCHEDULING, dict, (*_SP, "minResources"), param=False,
          doc="the gang's least resources"),
    Field("priority_class", SCHEDULING, str, (*_SP, "priorityClass"), param=False, check=rules.dns1123_subdomain,
          doc="a Kubernetes PriorityClass for gang schedulers; Kueue takes the workload's priority from it too when "
              "`workload_priority_class` is not set"),
    Field("schedule_timeout_seconds", SCHEDULING, int, (*_SP, "scheduleTimeoutSeconds"), param=False, coerce=as_int,
          check=rules.integer(),
          doc="seconds the gang scheduler may take to schedule the gang"),
    Field("suspend", RUN_POLICY, bool, (*_RP, "suspend"), coerce=as_bool, check=rules.boolean,
          doc="the job is created suspended"),
    Field("managed_by", RUN_POLICY, str, (*_RP, "managedBy"),  # each API version's own values: validation.py
          doc="the controller managing the job (each API version's own values)"),
    Field("launcher", JOB, dict, templated="json", default=NEW, nested=REPLICA,
          doc="the launcher's overrides: any ReplicaSpec field below, e.g. `{\"image\": ...}`"),
    Field("worker", JOB, dict, templated="json", default=NEW, nested=REPLICA,
          doc="the workers' overrides: any ReplicaSpec field below"),
    Field("launch", JOB, LauncherCommand, param=False),  # from program (LAUNCH rows)
    Field("identity", JOB, TaskIdentity, param=False),
    Field("defaults", JOB, Defaults, param=False),
    Field("program", LAUNCH, list[str] | str, templated=True, stand_in=["true"],
          doc="the program the ranks run: the launcher's `mpirun` (or `horovodrun`) is built for it, sized from the "
              "resolved job; replaces the launcher's command and args"),
    Field("mpirun_args", LAUNCH, list[str] | str, templated=True, stand_in=[],
          doc="mpirun's own arguments, before the program (only with `program`)"),
    # each role's replica spec, pod template and main container
    Field("replicas", REPLICA, int, ("replicas",), param={WORKER: "workers"}, templated=True, coerce=as_int,
          doc="how many pods the role has"),
    Field("restart_policy", REPLICA, str, ("restartPolicy",), param=False,
          doc="the pods' `restartPolicy` (the launcher's: the retries mapping)"),
    Field("labels", REPLICA, dict[str, str], ("template", "metadata", "labels"), param=False,
          doc="labels of the role's pods"),
    Field("annotations", REPLICA, dict[str, str], ("template", "metadata", "annotations"), param=False,
          doc="annotations of the role's pods"),
    Field("container_name", REPLICA, str, (*MAIN, "name"), param=False,
          doc="the name of the main (first) container"),
    Field("image", REPLICA, str, (*MAIN, "image"), templated=True, stand_in="parse-time-image",
          doc="the main container's image (per role: `launcher={\"image\": ...}`)"),
    Field("command", REPLICA, list[str], (*MAIN, "command"), param={LAUNCHER: "command"}, templated=True,
          coerce=as_argv, stand_in=["true"], check=rules.strings,
          doc="the main container's command"),
    Field("args", REPLICA, list[str], (*MAIN, "args"), param={LAUNCHER: "args"}, templated=True,
          check=rules.strings,
          doc="the main container's args"),
    Field("env", REPLICA, dict[str, str] | list[dict], (*MAIN, "env"), templated="json", to_manifest=env_list,
          doc="the main container's environment: a dict, or EnvVar dicts (secretKeyRef, configMapKeyRef)"),
    Field("env_from", REPLICA, list[dict], (*MAIN, "envFrom"), templated=True,
          doc="the main container's `envFrom` (ConfigMaps, Secrets)"),
    Field("resources", REPLICA, dict, (*MAIN, "resources"), templated="json",
          param={LAUNCHER: "launcher_resources", WORKER: "worker_resources"},
          doc="the main container's requests and limits"),
    Field("gpus", REPLICA, int, (*MAIN, "resources", "limits", GPU_RESOURCE),
          param={WORKER: "gpus_per_worker"}, templated=True, coerce=as_int,
          doc="GPUs, as the main container's `nvidia.com/gpu` limit"),
    Field("volume_mounts", REPLICA, list[dict], (*MAIN, "volumeMounts"),
          doc="the main container's volume mounts"),
    Field("image_pull_policy", REPLICA, str, (*MAIN, "imagePullPolicy"), param=False,
          check=rules.one_of(IMAGE_PULL_POLICIES),
          doc="`Always`, `IfNotPresent` or `Never`"),
    Field("security_context", REPLICA, dict, (*MAIN, "securityContext"), param=False,
          check=rules.mapping("a SecurityContext"),
          doc="the main container's SecurityContext"),
    Field("readiness_probe", REPLICA, dict, (*MAIN, "readinessProbe"),
          param={WORKER: "worker_readiness_probe"}, check=rules.probe,
          doc="the main container's readiness probe (it replaces the default startup probe)"),
    Field("startup_probe", REPLICA, dict, (*MAIN, "startupProbe"), param=False, check=rules.probe,
          doc="the main container's startup probe"),
    Field("volumes", REPLICA, list[dict], (*POD, "volumes"),
          doc="the pods' volumes"),
    Field("node_selector", REPLICA, dict[str, str], (*POD, "nodeSelector"),
          doc="the pods' node selector"),
    Field("tolerations", REPLICA, list[dict], (*POD, "tolerations"),
          doc="the pods' tolerations"),
    Field("affinity", REPLICA, dict, (*POD, "affinity"), check=rules.mapping("an Affinity"),
          doc="the pods' affinity"),
    Field("service_account_name", REPLICA, str, (*POD, "serviceAccountName"), check=rules.dns1123_subdomain,
          doc="the pods' service account"),
    Field("image_pull_secrets", REPLICA, list[str], (*POD, "imagePullSecrets"),
          to_manifest=lambda names: [{"name": n} for n in names],
          doc="the names of the Secrets the pods pull their images with"),
    Field("pod_security_context", REPLICA, dict, (*POD, "securityContext"), param=False,
          check=rules.mapping("a PodSecurityContext"),
          doc="the pods' PodSecurityContext"),
    Field("priority_class_name", REPLICA, str, (*POD, "priorityClassName"), check=rules.dns1123_subdomain,
          doc="the pods' PriorityClass"),
    # the pods' dnsConfig.searches (MPICH/Intel launchers: precedence.py)
    Field("dns_searches", REPLICA, list[str], (*POD, "dnsConfig", "searches"), param=False,
          doc="the pods' DNS search domains (MPICH/Intel launchers: docs/first-run.md)"),
    # pod validation leaves schedulerName's text alone (k8s.io/kubernetes v1.35 ValidatePodSpec): the type only
    Field("scheduler_name", REPLICA, str, (*POD, "schedulerName"), check=rules.string,
          doc="the pods' scheduler, e.g. `volcano`: a string, as Kubernetes requires nothing more of it"),
)  # fmt: skip

HOROVOD_FIELDS: tuple[Field, ...] = (
    Field("min_np", LAUNCH, int, templated=True, coerce=as_int,
          doc="elastic mode's least number of processes (elastic when `min_np` or `max_np` is set)"),
    Field("max_np", LAUNCH, int, templated=True, coerce=as_int,
          doc="elastic mode's largest number of processes"),
    Field("discovery_script", LAUNCH, str, default=DISCOVER_HOSTS_SCRIPT,
          doc="elastic mode's host discovery script (the mpi-operator keeps it up to date)"),
    Field("log_level", LAUNCH, str, default="INFO",
          doc="horovodrun's `--log-level`: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL"),
    Field("verbose", LAUNCH, bool, default=False, coerce=as_bool,
          doc="horovodrun's `--verbose`"),
    Field("elastic_timeout", LAUNCH, int, coerce=as_int,
          doc="horovodrun's `--elastic-timeout`, in seconds (elastic mode only)"),
    Field("network_interface", LAUNCH, str,
          doc="horovodrun's `--network-interface` (comma-separated for several)"),
    Field("horovod_args", LAUNCH, list[str] | str, templated=True, stand_in=[],
          doc="more horovodrun arguments, before the program"),
)  # fmt: skip


def rows(owner: str) -> tuple[Field, ...]:
    return tuple(f for f in FIELDS if f.owner == owner)


def field_of(name: str, owner: str = JOB) -> Field:
    return next(f for f in FIELDS if (f.name, f.owner) == (name, owner))


def parameters(fields: tuple[Field, ...]) -> dict[str, Field]:
    """The parameters the rows declare, by name, with the row each sets (a REPLICA row may have one per role)."""
    named: dict[str, Field] = {}
    for row in fields:
        if isinstance(row.param, dict):
            named.update(dict.fromkeys(row.param.values(), row))
        elif row.param:
            named[row.name] = row
    return named


PARAMETERS = parameters(FIELDS)
# Each row by its key (Field.key; a replica row once per role): what a kind's field_paths name -> (row, role)
ROW_KEYS = {
    row.key(r): (row, r) for row in FIELDS for r in (tuple(ROLES) if row.owner == REPLICA else (None,))
}


def role_parameter(row: Field, role: str) -> str | None:
    """The parameter setting ``row`` of ``role`` ("launcher"/"worker"): its own, the shared one, or none."""
    return row.param.get(role) if isinstance(row.param, dict) else (row.name if row.param else None)


def kind_parameters(kind: Any, named: dict[str, Field]) -> dict[str, Field]:
    """The parameters of ``named`` that set a field ``kind`` has (a JobKind), and those that set no field (the task's:
    api_version, base_manifest, program...): an operator of that kind takes these (operators/trainjob.py)."""

    def has(name: str, row: Field) -> bool:
        if row.owner == REPLICA:
            return any(kind.has_row(row, r) for r, role in ROLES.items() if role_parameter(row, role) == name)
        return kind.has_row(row) if row.path or row.nested else True

    return {name: row for name, row in named.items() if has(name, row)}


def manifest_path(
    row: Field, role: str | None = None, api: str | None = None, *, own_path: bool = False
) -> tuple:
    """Where a manifest of ``api`` holds ``row`` (of the replica spec of ``role``, "Launcher"/"Worker", where the
    kind keeps that: ``JobKind.replica_path``): its kind's place (jobspec/kinds/). Without ``api`` (the default
    kind's replica specs) or with ``own_path``, at the row's own ``path`` (where a base manifest may hold it too)."""
    kind = kind_or_default(api)
    if api is not None and kind.field_paths is not None:  # its paths are from the root (own_path: the same)
        return kind.row_path(row, role)
    path = row.path if api is None or own_path else kind.row_path(row)
    return (*kind.replica_path(cast(str, role)), *path) if row.owner == REPLICA else path


def holder(spec: Any, row: Field, role: str | None = None) -> Any:
    """The spec object holding ``row`` (``role``: "Launcher"/"Worker" for REPLICA rows)."""
    if row.owner == RUN_POLICY:
        return spec.run_policy
    if row.owner == SCHEDULING:
        return spec.run_policy.scheduling_policy
    return spec.replica(role) if row.owner == REPLICA else spec


def _replica(self: Any, role: str) -> Any:
    """The ReplicaSpec of "Launcher" or "Worker"."""
    return self.launcher if role == LAUNCHER_REPLICA else self.worker


def _spec_class(owner: str, doc: str, **methods: Callable) -> type:
    """The dataclass of ``owner``'s rows (keyword-only: the rows' order is the manifest's, not an API)."""
    specs = []
    for row in rows(owner):
        nested = _CLASSES.get(row.nested) if row.nested else None
        annotation = nested or row.type if row.default is not None else (nested or row.type) | None
        new = field(default_factory=cast(type, nested))
        default = new if row.default is NEW else field(default=row.default)
        specs.append((row.name, annotation, default))
    cls = make_dataclass(owner, specs, namespace=methods, kw_only=True)
    cls.__module__, cls.__doc__ = __name__, doc
    _CLASSES[owner] = cls
    return cls


_CLASSES: dict[str, type] = {}
_JOB_DOC = """Everything needed to build one MPIJob manifest; a field left at None was not given.

    ``launch`` (e.g. commands.Mpirun) sets the launcher's command once the job is resolved (precedence.py).
    ``identity`` adds the task instance's labels and annotations and derives the default name. ``defaults``
    (None: none) fill what neither the parameters nor the base manifest set.
    """
if TYPE_CHECKING:  # the same classes as static tools see them (written from the rows: signature_writer.py)
    from airflow_mpi.jobspec.spec_classes import MPIJobSpec, ReplicaSpec, RunPolicy, SchedulingPolicy
else:
    SchedulingPolicy = _spec_class(SCHEDULING, "Gang scheduling (Volcano / scheduler-plugins PodGroup).")
    RunPolicy = _spec_class(
        RUN_POLICY, "The job's lifecycle; in v2beta1 all but cleanPodPolicy apply to the launcher Job."
    )
    ReplicaSpec = _spec_class(
        REPLICA, "One role (launcher or worker): its pod template and the main (first) container."
    )
    MPIJobSpec = _spec_class(JOB, _JOB_DOC, replica=_replica)
