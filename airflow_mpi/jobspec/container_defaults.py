"""What the operator's defaults put into the pods where neither a parameter nor the base manifest says: what
upstream's examples spell out in their containers (the workers' sshd and startup probe, the mpiuser uid), the
launcher's own name resolvable for Hydra, the launcher's wait for its workers' DNS names, and the command of a v1
worker left idle for ``kubectl exec``. Each is reported in the settings as a DEFAULT (precedence.py applies them)."""

from __future__ import annotations

from copy import deepcopy

from airflow_mpi.jobspec.fields import MPIJobSpec, ReplicaSpec
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.layout import pod_spec
from airflow_mpi.jobspec.settings import DEFAULT, Setting
from airflow_mpi.jobspec.spec import (
    CLUSTER_DOMAIN,
    CONFIG_MOUNT_PATH,
    CONFIG_VOLUME,
    INTEL,
    MPICH,
    MPIUSER_SSH_AUTH_MOUNT_PATH,
    MPIUSER_SSHD_COMMAND,
    MPIUSER_UID,
    SSHD_LISTENING_CHECK,
    WAIT_FOR_WORKERS_READY,
    WORKER_SSHD_START_SECONDS,
    WORKERS_DNS_WAIT,
    Defaults,
    workers_dns_wait_script,
    workers_dns_wait_seconds,
)
from airflow_mpi.jobspec.vocabulary import LAUNCHER_REPLICA, ROLES, WORKER_REPLICA

# Until a worker's sshd listens, it is not Ready (checked every second, given a minute to start).
STARTUP_PROBE = {
    "exec": {"command": list(SSHD_LISTENING_CHECK)},
    "periodSeconds": 1,
    "failureThreshold": WORKER_SSHD_START_SECONDS,
}


def _base_pod(spec: MPIJobSpec, base: dict, role: str) -> dict:
    """The base manifest's pod spec of ``role``, where the job's kind keeps it ({} if none)."""
    return pod_spec(base, role, kind_or_default(spec.api_version))


def _main(spec: MPIJobSpec, base: dict, role: str) -> dict:
    """The base manifest's main container of ``role`` ({} if none)."""
    name = spec.replica(role).container_name
    containers = _base_pod(spec, base, role).get("containers")
    containers = containers if isinstance(containers, list) else []
    return next((c for c in containers if isinstance(c, dict) and c.get("name") == name), {})


def _sets_uid(replica: ReplicaSpec, main: dict, pod: dict) -> bool:
    contexts = (
        replica.security_context,
        replica.pod_security_context,
        main.get("securityContext"),
        pod.get("securityContext"),
    )
    return any(isinstance(c, dict) and c.get("runAsUser") is not None for c in contexts)


def container_defaults(filled: MPIJobSpec, base: dict, settings: dict[str, Setting]) -> None:
    """What upstream's examples spell out in the containers, where neither a parameter nor the base manifest does:
    the workers' startup probe behind WaitForWorkersReady, and in the mpiuser convention the workers' sshd
    command and the uid both roles run as."""
    worker, worker_main = filled.worker, _main(filled, base, WORKER_REPLICA)
    policy = settings.get("launcher_creation_policy")
    probed = (
        worker.readiness_probe
        or worker.startup_probe
        or worker_main.get("readinessProbe")
        or worker_main.get("startupProbe")
    )
    if policy is not None and policy.value == WAIT_FOR_WORKERS_READY and not probed:
        worker.startup_probe = deepcopy(STARTUP_PROBE)
        settings["worker.startup_probe"] = Setting("a TCP socket listens (sshd)", DEFAULT)
    path = settings.get("ssh_auth_mount_path")
    if path is None or path.value != MPIUSER_SSH_AUTH_MOUNT_PATH:
        return
    _default_worker_command(filled, base, settings, MPIUSER_SSHD_COMMAND)
    for role in (LAUNCHER_REPLICA, WORKER_REPLICA):
        replica = filled.replica(role)
        if not _sets_uid(replica, _main(filled, base, role), _base_pod(filled, base, role)):
            replica.security_context = {**(replica.security_context or {}), "runAsUser": MPIUSER_UID}
            settings[f"{ROLES[role]}.run_as_user"] = Setting(MPIUSER_UID, DEFAULT)


def launcher_dns_search(filled: MPIJobSpec, base: dict, settings: dict[str, Setting]) -> None:
    """MPICH and Intel MPI: the launcher's own short host name resolvable in the launcher, as the mpi-operator makes
    it in the workers (its ``<job>.<ns>.svc.cluster.local`` search domain). Upstream's MPICH/Intel images wait in
    their entrypoint until ``nslookup $HOSTNAME`` answers, which without that domain never happens: each job
    started about 100 s late (measured on the real node). Left alone when the pod sets a ``dnsConfig``."""
    implementation = settings.get("mpi_implementation")
    namespace = settings.get("namespace")
    launcher = filled.launcher
    if (
        implementation is None
        or implementation.value not in (MPICH, INTEL)
        or namespace is None
        or not isinstance(filled.name, str)
        or launcher.dns_searches is not None
        or _base_pod(filled, base, LAUNCHER_REPLICA).get("dnsConfig") is not None
    ):
        return
    launcher.dns_searches = [f"{filled.name}.{namespace.value}.svc.{CLUSTER_DOMAIN}"]
    settings["launcher.dns_searches"] = Setting(launcher.dns_searches[0], DEFAULT)


def launcher_waits_for_workers(manifest: dict, settings: dict[str, Setting], defaults: Defaults) -> None:
    """Under the default WaitForWorkersReady the launcher gets an init container that waits until every worker's
    name resolves (spec.workers_dns_wait_script: as long as the task lets its workers start): the policy holds the
    launcher until the workers are Ready, but not until the cluster DNS knows them. CoreDNS lags behind after an API
    server restart (seen on the real node: the launcher's ssh failed "Could not resolve hostname" in 1 of 4 jobs
    created then), and a job stored suspended (Kueue) gets its launcher at once when resumed (mpi-operator v0.8.2,
    kubeflow/mpi-operator#615)."""
    policy = settings.get("launcher_creation_policy")
    job = manifest["spec"]
    pod = pod_spec(manifest, LAUNCHER_REPLICA)
    init = pod.get("initContainers") or []
    if (
        policy is None
        or policy.source != DEFAULT
        or policy.value != WAIT_FOR_WORKERS_READY
        or job.get("runLauncherAsWorker") is True
        or any(c.get("name") == WORKERS_DNS_WAIT for c in init)
    ):
        return
    main = pod["containers"][0]
    deadline = workers_dns_wait_seconds(defaults.schedule_timeout)
    script = workers_dns_wait_script(deadline)
    waiter = {
        "name": WORKERS_DNS_WAIT,
        "image": main.get("image"),
        "command": ["/bin/sh", "-c", script],
        **{
            key: deepcopy(main[key])
            for key in ("imagePullPolicy", "resources", "securityContext")
            if key in main
        },
        "volumeMounts": [{"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH}],
    }
    pod["initContainers"] = [waiter, *init]
    settings["launcher.wait_for_workers"] = Setting(
        "an init container waits until every worker's name resolves (WaitForWorkersReady does not wait for DNS), "
        + (
            "without a deadline (schedule_timeout=None)"
            if deadline is None
            else f"for up to {deadline} s (schedule_timeout + {WORKER_SSHD_START_SECONDS} s for the workers' sshd)"
        ),
        DEFAULT,
    )


def _default_worker_command(
    filled: MPIJobSpec, base: dict, settings: dict[str, Setting], command: tuple[str, ...]
) -> None:
    """``command`` for the workers' main container where neither a parameter nor the base manifest gives it a
    command or args."""
    worker, main = filled.worker, _main(filled, base, WORKER_REPLICA)
    if worker.command is None and worker.args is None and not main.get("command") and not main.get("args"):
        worker.command = list(command)
        settings["worker.command"] = Setting(" ".join(command), DEFAULT)


def idle_workers(
    filled: MPIJobSpec, base: dict, settings: dict[str, Setting], command: tuple[str, ...]
) -> None:
    """A kind whose ranks are ``kubectl exec``'d into workers that otherwise idle (v1): ``command`` idles and ends
    on SIGTERM. The training-operator's own default, ``sleep 365d`` as the container's first process, ignores
    SIGTERM, so every deletion of a job waited the grace period (30 s) for its workers."""
    _default_worker_command(filled, base, settings, command)
