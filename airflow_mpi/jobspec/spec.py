"""The MPIJob spec's values: the enums both operator versions accept, the controllers' conventions, the
operator's Defaults, and what a launcher command builder provides (the API's names: vocabulary.py; the spec
classes: fields.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from airflow_mpi.jobspec.errors import ErrorList

OPENMPI, INTEL, MPICH = "OpenMPI", "Intel", "MPICH"
MPI_IMPLEMENTATIONS = (OPENMPI, INTEL, MPICH)
AT_STARTUP, WAIT_FOR_WORKERS_READY = "AtStartup", "WaitForWorkersReady"
LAUNCHER_CREATION_POLICIES = (AT_STARTUP, WAIT_FOR_WORKERS_READY)
# runPolicy.cleanPodPolicy: which pods the controller deletes once the job finished
CLEAN_NONE, CLEAN_RUNNING, CLEAN_ALL = "None", "Running", "All"
CLEAN_POD_POLICIES = (CLEAN_NONE, CLEAN_RUNNING, CLEAN_ALL)
IMAGE_PULL_POLICIES = ("Always", "IfNotPresent", "Never")

# What differs between the APIs (restart policies, managedBy values, default container names, the retries mapping):
# their kinds (jobspec/kinds/).

# Kueue (kueue.x-k8s.io): the LocalQueue an MPIJob waits in, and its WorkloadPriorityClass (labels Kueue reads)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"  # the controllers' (root runs sshd and mpirun)
# The mpi-operator's unprivileged convention (its build/base image and examples/v2beta1/pi): user mpiuser (uid 1000)
# runs mpirun on the launcher and its own sshd on the workers, with the job's SSH Secret at ~mpiuser/.ssh.
MPIUSER_SSH_AUTH_MOUNT_PATH = "/home/mpiuser/.ssh"
MPIUSER_UID = 1000
# The cluster DNS domain the mpi-operator itself assumes (v0.8.2 adds "<job>.<ns>.svc.cluster.local" to the
# workers' DNS search path so that MPICH's and Intel MPI's proxies find the launcher by its short host name).
CLUSTER_DOMAIN = "cluster.local"
MPIUSER_SSHD_COMMAND = ("/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config")
# A worker is started once a TCP socket listens in its pod (its sshd; on whatever port the image chose: upstream's
# images use 2222, older root images 22). Shell builtins only: any image that runs sshd for MPI has /bin/sh.
SSHD_LISTENING_CHECK = (
    "sh", "-c",
    'for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] || continue; '
    'while read -r _ _ _ st _; do [ "$st" = 0A ] && exit 0; done < "$f"; done; exit 1',
)  # fmt: skip
CONFIG_MOUNT_PATH = "/etc/mpi"  # ConfigMap <name>-config, mounted by both operators
HOSTFILE = CONFIG_MOUNT_PATH + "/hostfile"
DISCOVER_HOSTS_SCRIPT = CONFIG_MOUNT_PATH + "/discover_hosts.sh"
# The launcher of a job stored suspended (Kueue queues it) is created before its workers, and once resumed starts at
# once, whatever WaitForWorkersReady says (mpi-operator v0.8.2, kubeflow/mpi-operator#615): its ssh would race the
# workers' DNS records. An init container waits for them: a worker's record exists once the worker is Ready, i.e.
# its sshd listens (the job's Service does not publish addresses that are not ready). Hosts from the hostfile the
# mpi-operator mounts; an image with neither getent nor nslookup is not held (as before). How long it waits is the
# task's to say (workers_dns_wait_seconds): the launcher fails for good when it gives up (backoffLimit 0).
WORKERS_DNS_WAIT = "wait-for-workers"
# Once scheduled, a worker's sshd gets this long to listen (the startup probe's failureThreshold x periodSeconds,
# jobspec/precedence.py STARTUP_PROBE) before its container is restarted.
WORKER_SSHD_START_SECONDS = 60


def workers_dns_wait_seconds(schedule_timeout: float | None) -> int | None:
    """How long the launcher waits for its workers' names: as long as the task lets a worker stay unscheduled
    (``schedule_timeout``: past it, the task itself fails and deletes the job), plus the minute its sshd gets to start
    once scheduled; the launcher's own image pull, which comes first, covers the workers' pull of the same image.
    None (the task lets workers wait unscheduled for ever): no deadline either."""
    return None if schedule_timeout is None else int(-(-schedule_timeout // 1)) + WORKER_SSHD_START_SECONDS


def workers_dns_wait_script(deadline_seconds: int | None) -> str:
    """The init container's shell script: until every hostfile host resolves; with ``deadline_seconds``, exit 1
    naming the first host still unresolved once they have passed."""
    lines = [
        "command -v getent >/dev/null || command -v nslookup >/dev/null || "
        f'{{ echo "{WORKERS_DNS_WAIT}: no getent or nslookup in the image: not waiting"; exit 0; }}',
        *([] if deadline_seconds is None else [f"deadline=$(( $(date +%s) + {deadline_seconds} ))"]),
        f"for host in $(sed 's/[ :].*//' {HOSTFILE} 2>/dev/null); do",
        '  until getent hosts "$host" >/dev/null 2>&1 || nslookup "$host" >/dev/null 2>&1; do',
        *(
            []
            if deadline_seconds is None
            else [
                '    if [ "$(date +%s)" -ge "$deadline" ]; then',
                f'      echo "{WORKERS_DNS_WAIT}: worker $host not resolvable (not Ready) after '
                f"{deadline_seconds} s (the "
                f"task's schedule_timeout + {WORKER_SSHD_START_SECONDS} s for its sshd)\" >&2; exit 1",
                "    fi",
            ]
        ),
        "    sleep 1",
        "  done",
        "done",
    ]
    return "\n".join(lines) + "\n"


CONFIG_VOLUME = "mpi-job-config"  # the mpi-operator's volume of CONFIG_MOUNT_PATH


@dataclass(frozen=True)
class Defaults:
    """The operator's defaults: used only where neither a parameter nor the base manifest sets the field.

    ``retries`` turns on the retries mapping (precedence.py): unless ``backoff_limit`` is given as a parameter,
    ``runPolicy.backoffLimit`` and the launcher's ``restartPolicy`` default to the kind's mapping of it
    (kinds/: v2beta1 ``retries`` and ``Never``). ``namespace``
    is the connection's, or a function that looks it up (called only when needed). The name's default is the identity's.
    ``schedule_timeout``: the task's, which bounds the launcher's wait for its workers (None: no bound).
    """

    workers: int | None = 1
    clean_pod_policy: str | None = CLEAN_RUNNING  # the controllers' is None: idle workers would hold nodes
    retries: int | None = None
    namespace: str | Callable[[], str | None] | None = None
    schedule_timeout: float | None = (
        300.0  # the task's (seconds a worker may stay unscheduled): the launcher's
    )
    # init container waits for the workers that long and their sshd's start (workers_dns_wait_seconds)


class LauncherCommand(Protocol):
    """A launcher command line built from the resolved job (workers, slots, MPI implementation)."""

    # implementations whose command goes into the container's args (the image's entrypoint kept)
    in_args: ClassVar[tuple[str, ...]]

    def check(self, errors: ErrorList) -> None:
        """Report its own parameters' problems (those that do not depend on the job)."""

    def command(
        self, *, workers: int, slots_per_worker: int, implementation: str, run_launcher_as_worker: bool
    ) -> list[str]:
        """The command; raises MPIJobValidationError naming the parameter at fault."""
