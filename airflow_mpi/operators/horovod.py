"""HorovodJobOperator: an MPIJob whose launcher runs ``horovodrun``.

``-np`` follows ``workers x slots_per_worker``; elastic training (``min_np``/``max_np``) uses the
host discovery script the mpi-operator mounts at ``/etc/mpi/discover_hosts.sh``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_mpi.models import horovodrun_command
from airflow_mpi.operators.mpijob import MPIJobOperator

DEFAULT_DISCOVERY_SCRIPT = "/etc/mpi/discover_hosts.sh"


class HorovodJobOperator(MPIJobOperator):
    """Run a Horovod program on an MPIJob.

    :param program: the training program (list, or a shell string), e.g. ``["python", "train.py"]``.
    :param min_np: / :param max_np: elastic bounds (elastic mode when either is set).
    :param log_level: Horovod log level (TRACE, DEBUG, INFO, WARNING, ERROR, FATAL).
    """

    template_fields: Sequence[str] = (*MPIJobOperator.template_fields, "min_np", "max_np", "horovod_args")

    def __init__(
        self,
        *,
        program: list[str] | str,
        min_np: int | None = None,
        max_np: int | None = None,
        discovery_script: str = DEFAULT_DISCOVERY_SCRIPT,
        log_level: str | None = "INFO",
        verbose: bool = False,
        elastic_timeout: int | None = None,
        network_interface: str | None = None,
        horovod_args: list[str] | None = None,
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
        kwargs.setdefault("mpi_implementation", "OpenMPI")
        super().__init__(program=program, **kwargs)

    def _launcher_command(self, values: dict[str, Any]) -> list[str] | None:
        if values.get("command") is not None:
            return super()._launcher_command(values)
        return horovodrun_command(
            values["program"],
            workers=int(values["workers"]),
            slots_per_worker=int(values.get("slots_per_worker") or 1),
            min_np=_int_or_none(values.get("min_np")),
            max_np=_int_or_none(values.get("max_np")),
            discovery_script=self.discovery_script,
            log_level=self.log_level,
            verbose=self.verbose,
            elastic_timeout=self.elastic_timeout,
            network_interface=self.network_interface,
            extra_args=tuple(values.get("horovod_args") or ()),
        )


def _int_or_none(value: Any) -> int | None:
    """Rendered templates give strings; unset (or not rendered yet, at parse time) gives None."""
    return None if value is None or value == "" else int(value)
