"""Launcher command lines for Open MPI, Intel MPI, MPICH and Horovod inside an MPIJob.

The operator writes the hosts to /etc/mpi/hostfile (one line per worker, ``slots`` each) and, for OpenMPI/Intel/MPICH,
points the launcher's MPI at it through environment variables. So the process count is workers x slots_per_worker
(+ one host's slots when the launcher also runs ranks), and the flags below only add what those variables do not cover.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.spec import (
    DISCOVER_HOSTS_SCRIPT,
    HOSTFILE,
    INTEL,
    MPI_IMPLEMENTATIONS,
    MPICH,
    OPENMPI,
)

# Open MPI (as in the kubeflow examples): containers often run as root; no core binding (pods share nodes and cgroups
# limit CPUs anyway); fill each host's slots in order; forward the paths to remote ranks; TCP/shared memory via ob1
# and no openib BTL (absent or noisy in containers).
OPENMPI_DEFAULT_FLAGS: tuple[str, ...] = (
    "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot",
    "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
)  # fmt: skip
# (no "-x LD_LIBRARY_PATH", unlike Flyte's flags: an image that does not set it gets a warning in every launcher
# log; an image whose ranks need it passes it in mpirun_args)
# Intel MPI: name the hostfile explicitly. mpi-operator v2beta1 also exports it as I_MPI_HYDRA_HOST_FILE, but
# -hostfile keeps the command correct when a user's env overrides I_MPI_* variables and makes the host list visible in
# the logged command. No "-bootstrap ssh": ssh is Hydra's default and is what v2beta1 sets up, while training-operator
# v1 sets I_MPI_HYDRA_BOOTSTRAP=rsh with its kubexec.sh, which an explicit "-bootstrap ssh" would break.
INTEL_DEFAULT_FLAGS: tuple[str, ...] = ("-hostfile", HOSTFILE)
# MPICH (Hydra): mpi-operator exports HYDRA_HOST_FILE and HYDRA_LAUNCH_EXTRA_ARGS; nothing to add.
MPICH_DEFAULT_FLAGS: tuple[str, ...] = ()
DEFAULT_FLAGS = {OPENMPI: OPENMPI_DEFAULT_FLAGS, INTEL: INTEL_DEFAULT_FLAGS, MPICH: MPICH_DEFAULT_FLAGS}
# MPICH's Hydra: the proxies on the workers connect back to mpiexec by the launcher's host name. Its DNS record
# can appear only after the proxies start (then each fails "unable to get host address" and mpiexec waits
# forever, seen on the real node); its IP (the pod's, from /etc/hosts) needs no DNS.
HYDRA_CONNECT_BY_IP = ("sh", "-c", 'exec "$0" -localhost "$(hostname -i)" "$@"')
# Each output line prefixed with its rank ("[1,0]<stdout>:" for Open MPI, "[0] " for Hydra's MPICH and Intel MPI).
TAG_OUTPUT_FLAGS = {OPENMPI: ("--tag-output",), INTEL: ("-prepend-rank",), MPICH: ("-prepend-rank",)}

HOROVOD_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")


def without_hydra_address(argv: list[str]) -> list[str]:
    """``argv`` without Mpirun's ``connect_by_ip`` wrapper (HYDRA_CONNECT_BY_IP), for a kind whose own launcher
    command gives Hydra the launcher's address (``JobKind.hydra_address_wired``)."""
    wrapper = list(HYDRA_CONNECT_BY_IP)
    return argv[len(wrapper) :] if argv[: len(wrapper)] == wrapper else argv


def _args(errors: ErrorList, field: str, value: str | Sequence[str], *, required: bool = False) -> list[str]:
    """A list of strings from a list or a shell string (shlex.split)."""
    if isinstance(value, str):
        try:
            args = shlex.split(value)
        except ValueError as exc:
            errors.add(field, value, f"is not a valid shell string: {exc}")
            return []
    elif isinstance(value, Sequence) and all(isinstance(a, str) for a in value):
        args = list(value)
    else:
        errors.add(field, value, "must be a list of strings or a shell string")
        return []
    if required and not args:
        errors.add(field, value, "must not be empty")
    return args


def _positive(errors: ErrorList, field: str, value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        errors.add(field, value, "must be an integer >= 1")
        return False
    return True


def mpirun_command(
    program: str | Sequence[str],
    *,
    workers: int,
    slots_per_worker: int = 1,
    implementation: str = OPENMPI,
    extra_args: str | Sequence[str] = (),
    default_flags: str | Sequence[str] | None = None,
    run_launcher_as_worker: bool = False,
) -> list[str]:
    """``mpirun <default flags> <process count> <extra_args> <program...>`` for the launcher.

    Open MPI: ``-np N``; Intel MPI and MPICH: ``-n N -ppn S``. N = (workers [+ 1 when the launcher runs as a worker])
    x slots_per_worker. ``default_flags`` replaces the implementation's defaults (pass ``()`` for none).
    """
    errors = ErrorList()
    _positive(errors, "workers", workers)
    _positive(errors, "slots_per_worker", slots_per_worker)
    if implementation not in MPI_IMPLEMENTATIONS:
        errors.add("implementation", implementation, f"must be one of {', '.join(MPI_IMPLEMENTATIONS)}")
    if not isinstance(run_launcher_as_worker, bool):
        errors.add("run_launcher_as_worker", run_launcher_as_worker, "must be a boolean")
    flags = DEFAULT_FLAGS.get(implementation, ()) if default_flags is None else default_flags
    flags = _args(errors, "default_flags", flags)
    extra = _args(errors, "extra_args", extra_args)
    argv = _args(errors, "program", program, required=True)
    errors.raise_if_any()
    np = str((workers + 1 if run_launcher_as_worker else workers) * slots_per_worker)
    count = ["-np", np] if implementation == OPENMPI else ["-n", np, "-ppn", str(slots_per_worker)]
    return ["mpirun", *flags, *count, *extra, *argv]


def horovodrun_command(
    program: str | Sequence[str],
    *,
    workers: int,
    slots_per_worker: int = 1,
    min_np: int | None = None,
    max_np: int | None = None,
    discovery_script: str = DISCOVER_HOSTS_SCRIPT,
    log_level: str | None = None,
    verbose: bool = False,
    elastic_timeout: int | None = None,
    network_interface: str | None = None,
    extra_args: str | Sequence[str] = (),
) -> list[str]:
    """``horovodrun -np N --slots-per-host S --hostfile /etc/mpi/hostfile ...`` (N = workers x slots).

    With ``min_np``/``max_np``, elastic Horovod instead: ``--min-np M --max-np X --host-discovery-script P``, the
    script the mpi-operator keeps up to date with the running workers, so training follows workers that come and
    go. Elastic mode needs Horovod built with Gloo; the static hostfile works with MPI or Gloo, as upstream's
    non-elastic examples run it.
    """
    errors = ErrorList()
    valid = _positive(errors, "workers", workers) & _positive(errors, "slots_per_worker", slots_per_worker)
    np = workers * slots_per_worker if valid else None
    for name, value in (("min_np", min_np), ("max_np", max_np)):
        if value is not None and _positive(errors, name, value) and np is not None:
            if name == "min_np" and value > np:
                errors.add(name, value, f"must be <= np ({np} = workers x slots_per_worker)")
            if name == "max_np" and value < np:
                errors.add(name, value, f"must be >= np ({np} = workers x slots_per_worker)")
    elastic = min_np is not None or max_np is not None
    if not isinstance(discovery_script, str) or not discovery_script:
        errors.add("discovery_script", discovery_script, "must be a non-empty path")
    if log_level is not None and log_level not in HOROVOD_LOG_LEVELS:
        errors.add("log_level", log_level, f"must be one of {', '.join(HOROVOD_LOG_LEVELS)}")
    if not isinstance(verbose, bool):
        errors.add("verbose", verbose, "must be a boolean")
    if elastic_timeout is not None and (
        isinstance(elastic_timeout, bool) or not isinstance(elastic_timeout, int) or elastic_timeout < 0
    ):
        errors.add("elastic_timeout", elastic_timeout, "must be an integer number of seconds >= 0")
    elif elastic_timeout is not None and not elastic:
        errors.add(
            "elastic_timeout", elastic_timeout, "applies to elastic mode only: set min_np and/or max_np"
        )
    if network_interface is not None and (not isinstance(network_interface, str) or not network_interface):
        reason = "must be a non-empty interface name (comma-separated for several)"
        errors.add("network_interface", network_interface, reason)
    extra = _args(errors, "extra_args", extra_args)
    argv = _args(errors, "program", program, required=True)
    errors.raise_if_any()
    hosts = ["--host-discovery-script", discovery_script] if elastic else ["--hostfile", HOSTFILE]
    return [
        "horovodrun", "-np", str(np), *_option("--min-np", min_np), *_option("--max-np", max_np),
        "--slots-per-host", str(slots_per_worker), *hosts, *_option("--log-level", log_level),
        *(["--verbose"] if verbose else []), *_option("--elastic-timeout", elastic_timeout),
        *_option("--network-interface", network_interface), *extra, *argv,
    ]  # fmt: skip


def _option(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, str(value)]


class _LauncherCommand:
    """``program`` plus extra arguments (both a list or a shell string), sized once the job is resolved."""

    program: str | Sequence[str]
    extra_name: ClassVar[str]  # the parameter holding the extra arguments
    # MPI implementations whose launcher command goes into the container's args, keeping the image's entrypoint
    # (upstream's MPICH and Intel images wait there for the hosts' DNS records, and their examples use args)
    in_args: ClassVar[tuple[str, ...]] = ()

    def _argv(self, errors: ErrorList) -> tuple[list[str], list[str]]:
        program = _args(errors, "program", self.program, required=True)
        return program, _args(errors, self.extra_name, getattr(self, self.extra_name) or ())

    def check(self, errors: ErrorList) -> None:
        self._argv(errors)

    def command(
        self, *, workers: int, slots_per_worker: int, implementation: str, run_launcher_as_worker: bool
    ) -> list[str]:
        errors = ErrorList()
        program, extra = self._argv(errors)
        errors.raise_if_any()
        job = {"workers": workers, "slots_per_worker": slots_per_worker}
        return self._build(program, extra, job, implementation, run_launcher_as_worker)

    def _build(
        self,
        program: list[str],
        extra: list[str],
        job: dict[str, Any],
        implementation: str,
        launcher_runs: bool,
    ) -> list[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class Mpirun(_LauncherCommand):
    """The ``program`` parameter: ``mpirun`` for the job's MPI implementation, sized from the resolved job."""

    program: str | Sequence[str]
    mpirun_args: str | Sequence[str] | None = None
    tag_output: bool = False  # prefix every output line with its rank (@task.mpi)
    connect_by_ip: bool = False  # MPICH: workers reach mpiexec by the launcher's IP (@task.mpi)
    extra_name: ClassVar[str] = "mpirun_args"
    in_args: ClassVar[tuple[str, ...]] = (INTEL, MPICH)

    def _build(
        self,
        program: list[str],
        extra: list[str],
        job: dict[str, Any],
        implementation: str,
        launcher_runs: bool,
    ) -> list[str]:
        if self.tag_output:
            extra = [*TAG_OUTPUT_FLAGS.get(implementation, ()), *extra]
        command = mpirun_command(
            program,
            **job,
            implementation=implementation,
            extra_args=extra,
            run_launcher_as_worker=launcher_runs,
        )
        return [*HYDRA_CONNECT_BY_IP, *command] if self.connect_by_ip and implementation == MPICH else command


@dataclass(frozen=True)
class Horovodrun(_LauncherCommand):
    """``horovodrun`` for the HorovodJobOperator (np = workers x slots of the resolved job); ``options`` are
    horovodrun_command's (min_np, max_np, log_level, ...)."""

    program: str | Sequence[str]
    horovod_args: str | Sequence[str] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    extra_name: ClassVar[str] = "horovod_args"

    def _build(
        self,
        program: list[str],
        extra: list[str],
        job: dict[str, Any],
        implementation: str,
        launcher_runs: bool,
    ) -> list[str]:
        return horovodrun_command(
            program, **job, **self.options, extra_args=extra
        )  # it counts no launcher slots
