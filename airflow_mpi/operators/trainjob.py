"""TrainJobOperator: MPIJobOperator's parameters as a Kubeflow Trainer v2 TrainJob (``trainer.kubeflow.org/v1alpha1``).

The model builds it (jobspec/kinds/trainjob.py says which fields a TrainJob has and where: ``image``, ``command``,
``program``, ``env`` -> ``spec.trainer``, ``workers`` -> ``numNodes``, ``runtime`` -> ``spec.runtimeRef``) through
the same precedence rule, and refuses by name what a TrainJob does not have (its pods come from the runtime).
Submitting and waiting are MPIJobOperator's, unchanged: this class only fixes the API and narrows the signature.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.fields import Field, kind_parameters
from airflow_mpi.jobspec.kinds import API_TRAINJOB, TRAINJOB
from airflow_mpi.operators.links import TRAINJOB_LINKS, extra_links
from airflow_mpi.operators.mpijob import MPIJobOperator
from airflow_mpi.operators.signatures import typed_init
from airflow_mpi.operators.task_params import init_signature

if TYPE_CHECKING:
    from airflow_mpi.operators.signatures import TrainJobOperatorSignature as _Base
else:
    _Base = MPIJobOperator  # the parameters for type checkers: operators/signatures.py

# The parameters a TrainJob has (the signature Airflow's default_args and .partial() see); the others are still
# accepted as keywords and refused by name when the manifest is built, so none is silently dropped.
# (api_version's default: TrainJob's, the one value it takes)
TRAINJOB_PARAMETERS: dict[str, Field] = {
    **kind_parameters(TRAINJOB, MPIJobOperator.parameters),
    "api_version": replace(MPIJobOperator.parameters["api_version"], default=API_TRAINJOB),
}


class TrainJobOperator(_Base):
    """Run a program on a Kubeflow Trainer TrainJob from an MPI runtime and wait for it (docs/parameters.md).

    ``runtime`` names the runtime (default ``openmpi-mpiuser``: deploy/trainjob-mpi-runtime.yaml), ``runtime_kind``
    its kind; ``program`` makes the launcher run ``mpirun`` sized ``numNodes x numProcPerNode``.
    """

    parameters: ClassVar[dict[str, Field]] = (
        MPIJobOperator.parameters
    )  # every one: the refused ones are named
    operator_extra_links = extra_links(TRAINJOB_LINKS)  # MPIJobOperator's, labelled TrainJob

    @typed_init(_Base.__init__)
    def __init__(self, *, api_version: str = API_TRAINJOB, **kwargs: Any) -> None:
        if api_version != API_TRAINJOB:
            reason = f"TrainJobOperator builds {API_TRAINJOB} only (MPIJobOperator builds the MPIJob APIs)"
            raise MPIJobValidationError("api_version", api_version, reason)
        super().__init__(api_version=api_version, **kwargs)

    __init__.__signature__ = init_signature(TRAINJOB_PARAMETERS)  # type: ignore[attr-defined]  # Airflow's checks
