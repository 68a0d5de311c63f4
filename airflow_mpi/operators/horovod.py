"""HorovodJobOperator: an MPIJob whose launcher runs ``horovodrun``.

``-np`` follows ``workers x slots_per_worker`` of the resolved job (parameters, else the base
manifest, else the defaults), on the hosts of the hostfile the mpi-operator mounts at ``/etc/mpi/hostfile``;
elastic training (``min_np``/``max_np``) uses its host discovery script ``/etc/mpi/discover_hosts.sh``
instead (Horovod built with Gloo).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_mpi.jobspec import Horovodrun
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.parameters import as_int
from airflow_mpi.jobspec.spec import DISCOVER_HOSTS_SCRIPT, LauncherCommand
from airflow_mpi.operators.mpijob import MPIJobOperator

HOROVOD_PARAMETERS = (
    "min_np", "max_np", "discovery_script", "log_level", "verbose", "elastic_timeout", "network_interface",
    "horovod_args",
)  # fmt: skip


class HorovodJobOperator(MPIJobOperator):
    """Run a Horovod program on an MPIJob.

    :param program: the training program (list, or a shell string), e.g. ``["python", "train.py"]``.
    :param min_np: / :param max_np: elastic bounds (elastic mode when either is set).
    :param discovery_script: the host discovery script of elastic mode.
    :param log_level: Horovod log level (TRACE, DEBUG, INFO, WARNING, ERROR, FATAL).
    """

    template_fields: Sequence[str] = (*MPIJobOperator.template_fields, "min_np", "max_np", "horovod_args")
    spec_parameters: Sequence[str] = (*MPIJobOperator.spec_parameters, *HOROVOD_PARAMETERS)

    def __init__(
        self,
        *,
        program: list[str] | str,
        min_np: int | str | None = None,
        max_np: int | str | None = None,
        discovery_script: str = DISCOVER_HOSTS_SCRIPT,
        log_level: str | None = "INFO",
        verbose: bool = False,
        elastic_timeout: int | None = None,
        network_interface: str | None = None,
        horovod_args: list[str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        self.min_np = min_np
        self.max_np = max_np
        self.discovery_script = discovery_script
        self.log_level = log_level
        self.verbose = verbose
        self.elastic_timeout = elastic_timeout
        self.network_interface = network_interface
        self.horovod_args = horovod_args
        super().__init__(program=program, **kwargs)

    def _launch(self, errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
        return Horovodrun(
            values["program"],
            min_np=as_int(errors, "min_np", values.get("min_np")),
            max_np=as_int(errors, "max_np", values.get("max_np")),
            discovery_script=values.get("discovery_script"),
            log_level=values.get("log_level"),
            verbose=values.get("verbose"),
            elastic_timeout=as_int(errors, "elastic_timeout", values.get("elastic_timeout")),
            network_interface=values.get("network_interface"),
            horovod_args=values.get("horovod_args"),
        )
