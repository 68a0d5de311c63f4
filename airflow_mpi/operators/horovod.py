"""HorovodJobOperator: an MPIJob whose launcher runs ``horovodrun``.

``-np`` follows ``workers x slots_per_worker`` of the resolved job (parameters, else the base manifest, else the
defaults), on the hosts of the hostfile the mpi-operator mounts at ``/etc/mpi/hostfile``; elastic training
(``min_np``/``max_np``) uses its host discovery script ``/etc/mpi/discover_hosts.sh`` instead (Horovod built with Gloo).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_mpi.jobspec import Horovodrun
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.fields import HOROVOD_FIELDS, PARAMETERS, Field, parameters
from airflow_mpi.jobspec.spec import LauncherCommand
from airflow_mpi.operators.callbacks import MPIJobCallbacks
from airflow_mpi.operators.mpijob import MPIJobOperator, template_fields_of
from airflow_mpi.operators.signatures import typed_init
from airflow_mpi.operators.task_params import init_signature

if TYPE_CHECKING:
    from airflow_mpi.operators.signatures import HorovodJobOperatorSignature as _Base
else:
    _Base = MPIJobOperator  # the parameters for type checkers: operators/signatures.py

_HOROVOD = parameters(HOROVOD_FIELDS)


def horovodrun_launch(errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
    """``program`` run by horovodrun, with the Horovod parameters (``values``: the resolved parameters)."""
    options = {name: values.get(name) for name in _HOROVOD if name != "horovod_args"}
    return Horovodrun(values["program"], values.get("horovod_args"), options)


class HorovodCallbacks(MPIJobCallbacks):
    """MPIJobOperator's callbacks but the launcher command: horovodrun."""

    def launch_command(self, errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
        return horovodrun_launch(errors, values)


class HorovodJobOperator(_Base):
    """Run a Horovod program on an MPIJob (its own parameters: jobspec/fields.py HOROVOD_FIELDS).

    :param program: the training program (list, or a shell string), e.g. ``["python", "train.py"]``.
    :param min_np: / :param max_np: elastic bounds (elastic mode when either is set).
    :param discovery_script: the host discovery script of elastic mode.
    :param log_level: Horovod log level (TRACE, DEBUG, INFO, WARNING, ERROR, FATAL).
    """

    parameters: ClassVar[dict[str, Field]] = {**MPIJobOperator.parameters, **_HOROVOD}
    template_fields: Sequence[str] = template_fields_of(parameters)

    @typed_init(_Base.__init__)
    def __init__(self, **kwargs: Any) -> None:
        for name, row in _HOROVOD.items():  # before MPIJobOperator's parse-time check, which reads them
            setattr(self, name, kwargs.pop(name, row.default))
        kwargs["callbacks"] = kwargs.get("callbacks") or HorovodCallbacks()  # else a decorator's
        super().__init__(**kwargs)

    __init__.__signature__ = init_signature(  # type: ignore[attr-defined]  # for Airflow's checks
        {"program": PARAMETERS["program"], **_HOROVOD}, required=("program",)
    )
