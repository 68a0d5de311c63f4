"""The ``mpiJob`` OpenLineage run facet (operators/lineage.py makes it). Imports the openlineage client: imported
only when the openlineage provider asks a task for its lineage, never at DAG parse time."""

from __future__ import annotations

from typing import ClassVar

from airflow.providers.common.compat.openlineage.facet import RunFacet
from attrs import define, field


@define
class MPIJobRunFacet(RunFacet):
    """One try's Kubeflow MPIJob: where it ran, what it ran, how it ended (docs/openlineage.md)."""

    cluster: str | None = field(default=None)  # the Kubernetes API server's URL
    namespace: str | None = field(default=None)
    kind: str | None = field(default=None)  # MPIJob
    apiVersion: str | None = field(default=None)  # kubeflow.org/v2beta1 or kubeflow.org/v1
    name: str | None = field(default=None)
    uid: str | None = field(default=None)  # the incarnation the try followed
    image: str | None = field(default=None)  # the launcher's
    workerImage: str | None = field(default=None)
    workers: int | None = field(default=None)
    slotsPerWorker: int | None = field(default=None)
    queue: str | None = field(default=None)  # the Kueue LocalQueue
    launcherAttempts: int | None = field(default=None)
    launcherExitCodes: list[int] = field(factory=list)
    outcome: str | None = field(default=None)  # how the wait ended (wait/contract.py Outcome)
    failureCause: str | None = field(default=None)  # why it did not succeed (wait/contract.py Cause)

    # names and versions, not secrets: kept out of the provider's redaction
    _additional_skip_redact: ClassVar[list[str]] = ["kind", "apiVersion", "outcome", "failureCause"]
