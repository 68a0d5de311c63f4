"""OpenLineage: the run facet a finished try of an MPIJob reports (docs/openlineage.md).

Airflow's openlineage provider asks a task for its lineage after the try, through ``get_openlineage_facets_on_complete``
and ``..._on_failure`` (its DefaultExtractor): :class:`MPIJobLineage` answers with an ``mpiJob`` run facet, the job as
the try ran it (its cluster, kind, name and uid, image, workers, slots, Kueue queue, launcher attempts, outcome and
failure cause). The provider is optional (the ``openlineage`` extra) and imported only when it asks: never at DAG
parse time, never in a try it does not follow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_mpi.jobspec.fields import REPLICA, field_of
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.layout import row_value
from airflow_mpi.jobspec.spec import KUEUE_QUEUE_LABEL
from airflow_mpi.jobspec.vocabulary import LAUNCHER_REPLICA, WORKER_REPLICA

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_mpi.wait.contract import WaitResult

FACET_KEY = "mpiJob"  # the run facet's name in the event


_IMAGE, _WORKERS, _SLOTS = (
    field_of(*r) for r in (("image", REPLICA), ("replicas", REPLICA), ("slots_per_worker",))
)


def facts_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the facet says of the submitted spec (plain JSON: a deferral carries it to the resumed try); each field
    where the job's kind keeps it (a TrainJob's one image is its trainer's, the launcher's)."""
    return {
        "image": row_value(manifest, _IMAGE, LAUNCHER_REPLICA),
        "workerImage": row_value(manifest, _IMAGE, WORKER_REPLICA),
        "workers": row_value(manifest, _WORKERS, WORKER_REPLICA),
        "slotsPerWorker": row_value(manifest, _SLOTS),
        "queue": ((manifest.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL),
    }


def api_server(hook: Any) -> str | None:
    """The URL of the API server the task's hook talks to (its client's configuration), None when unknown: the
    facet never fails for want of it."""
    try:
        return hook.api_client.configuration.host
    except Exception:  # noqa: BLE001 - no client configured, a hook that has none: the facet goes without
        return None


def facet_fields(
    *,
    api_version: str,
    job: tuple[str, str, str | None] | None,
    facts: dict[str, Any] | None,
    result: WaitResult | None,
    cluster: str | None,
) -> dict[str, Any]:
    """The facet's fields: the job (``job``: name, namespace, uid), its spec's ``facts`` (:func:`facts_of`) and
    what the try's wait concluded (``result``; None: the try ended before its wait)."""
    name, namespace, uid = job or (None, None, None)
    return {
        "cluster": cluster,
        "namespace": (result.namespace if result else None) or namespace,
        "kind": kind_or_default(api_version).kind,
        "apiVersion": api_version,
        "name": (result.name if result else None) or name,
        "uid": (result.uid if result else None) or uid,
        **{
            key: (facts or {}).get(key)
            for key in ("image", "workerImage", "workers", "slotsPerWorker", "queue")
        },
        "launcherAttempts": result.launcher_attempts if result else None,
        "launcherExitCodes": list(result.launcher_exit_codes) if result else [],
        "outcome": result.outcome.value if result else None,
        "failureCause": result.cause.value if result and result.cause else None,
    }


class MPIJobLineage:
    """The operator's side of the openlineage provider's convention (its DefaultExtractor calls these after a try).
    The try keeps on the operator what the facet is made of: ``_job`` (name, namespace, uid), ``_job_facts``
    (:func:`facts_of`) and ``_last_result`` (operators/mpijob.py)."""

    api_version: str
    hook: Any
    _job: tuple[str, str, str | None] | None = None
    _job_facts: dict[str, Any] | None = None
    _last_result: WaitResult | None = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The ``mpiJob`` run facet of the try that succeeded."""
        return self._operator_lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """The ``mpiJob`` run facet of the try that failed: its outcome and failure cause included."""
        return self._operator_lineage()

    def _operator_lineage(self) -> OperatorLineage:
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_mpi.operators.lineage_facet import MPIJobRunFacet

        fields = facet_fields(
            api_version=self.api_version,
            job=self._job,
            facts=self._job_facts,
            result=self._last_result,
            cluster=api_server(self.hook),
        )
        return OperatorLineage(run_facets={FACET_KEY: MPIJobRunFacet(**fields)})
