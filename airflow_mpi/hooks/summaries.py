"""Turn Kubernetes API objects (sync or asyncio client models) into the model's plain summaries."""

from __future__ import annotations

from typing import Any

from airflow_mpi.models.progress import EventSummary, PodSummary

ROLE_LABELS = ("training.kubeflow.org/job-role", "training.kubeflow.org/replica-type")


def _role(labels: dict[str, str]) -> str:
    for key in ROLE_LABELS:
        value = (labels.get(key) or "").lower()
        if value in ("launcher", "master"):
            return "launcher"
        if value == "worker":
            return "worker"
    return "worker"


def pod_role(pod: Any) -> str:
    """``launcher`` or ``worker`` (v1's ``master`` is the launcher)."""
    return _role(pod.metadata.labels or {})


def _main_status(pod: Any, container: str | None) -> Any:
    statuses = list(getattr(pod.status, "container_statuses", None) or [])
    if container:
        statuses = [s for s in statuses if s.name == container] or statuses
    return statuses[0] if statuses else None


def pod_summary(pod: Any, container: str | None = None) -> PodSummary:
    """Summarise a V1Pod; ``container`` names the MPI container (default: the first one)."""
    metadata, status, spec = pod.metadata, pod.status, pod.spec
    containers = list(getattr(spec, "containers", None) or [])
    name = container or (containers[0].name if containers else None)
    scheduled = any(c.type == "PodScheduled" and c.status == "True" for c in (getattr(status, "conditions", None) or []))
    main = _main_status(pod, name)
    state = waiting_reason = waiting_message = None
    exit_code = None
    if main is not None and main.state is not None:
        if main.state.running is not None:
            state = "running"
        elif main.state.terminated is not None:
            state, exit_code = "terminated", main.state.terminated.exit_code
        elif main.state.waiting is not None:
            state = "waiting"
            waiting_reason, waiting_message = main.state.waiting.reason, main.state.waiting.message
    return PodSummary(
        name=metadata.name,
        role=_role(metadata.labels or {}),
        created=metadata.creation_timestamp,
        phase=getattr(status, "phase", None),
        scheduled=scheduled,
        container=name,
        restart_count=int(getattr(main, "restart_count", 0) or 0) if main is not None else 0,
        state=state,
        waiting_reason=waiting_reason,
        waiting_message=waiting_message,
        exit_code=exit_code,
    )


#: the metadata the hub's readers use, of pods and MPIJobs alike (what the hub files and matches them by, orderings)
_META = ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp", "resourceVersion")
_CONTAINER_STATUS = ("name", "image", "imageID", "ready", "restartCount", "started", "state")


def slim_pod(pod: dict) -> dict:
    """A pod (API dict) cut to what :func:`pod_summary`, :func:`pod_role` and the hooks' orderings read, keeping
    the fields a ``V1Pod`` requires: a cache of hundreds of pods holds a tenth of their size (volumes, env,
    probes, managedFields and annotations go)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    slim_spec: dict[str, Any] = {"containers": [{"name": c.get("name")} for c in spec.get("containers") or []]}
    if spec.get("nodeName"):
        slim_spec["nodeName"] = spec["nodeName"]
    return {
        "metadata": {key: meta[key] for key in _META if key in meta},
        "spec": slim_spec,
        "status": {
            "phase": status.get("phase"),
            "conditions": [{"type": c.get("type"), "status": c.get("status")} for c in status.get("conditions") or []],
            "containerStatuses": [{key: s[key] for key in _CONTAINER_STATUS if key in s}
                                  for s in status.get("containerStatuses") or []],
        },
    }


def slim_mpijob(job: dict) -> dict:
    """An MPIJob (API dict) cut to what a wait reads of it (:func:`~airflow_mpi.models.status.job_state`: metadata
    and status): its spec (pod templates with their commands, env and volumes) and annotations (kubectl's
    last-applied copy of the whole manifest) go, a large part of each of the thousand jobs a triggerer may keep."""
    meta = job.get("metadata") or {}
    return {"apiVersion": job.get("apiVersion"), "kind": job.get("kind"),
            "metadata": {key: meta[key] for key in _META if key in meta}, "status": job.get("status") or {}}


def event_summary(event: dict) -> EventSummary:
    """Summarise an event as the hooks return it (an API dict)."""
    involved = event.get("involvedObject") or {}
    return EventSummary(
        type=event.get("type") or "",
        reason=event.get("reason") or "",
        message=event.get("message") or "",
        object_name=involved.get("name") or "",
        count=int(event.get("count") or 1),
    )
