"""Turn Kubernetes API objects (sync or asyncio client models) into the model's plain summaries."""

from __future__ import annotations

from typing import Any

from airflow_mpi.jobspec.kinds import kinds
from airflow_mpi.jobspec.vocabulary import WORKER
from airflow_mpi.wait.failure_causes import MAX_TEXT, clip
from airflow_mpi.wait.progress import EventSummary, PodSummary


def pod_role(pod: Any) -> str:
    """``launcher`` or ``worker``, as the first kind whose labels tell it says (v1's ``master`` is the launcher); a
    pod no kind's labels tell is a worker. Any kind's: a summary does not know which kind's job it follows."""
    labels = pod.metadata.labels or {}
    return next((role for kind in kinds() if (role := kind.pod_labels.told_role(labels))), WORKER)


def _main_status(pod: Any, container: str | None) -> Any:
    statuses = list(getattr(pod.status, "container_statuses", None) or [])
    if container:
        statuses = [s for s in statuses if s.name == container] or statuses
    return statuses[0] if statuses else None


def _memory_limit(spec: Any, name: str | None) -> str | None:
    for container in getattr(spec, "containers", None) or []:
        if container.name == name:
            limits = getattr(getattr(container, "resources", None), "limits", None) or {}
            return str(limits["memory"]) if limits.get("memory") is not None else None
    return None


def _seconds(value: Any) -> float | None:
    return float(value) if value is not None else None


def _ended(main: Any) -> dict[str, Any]:
    """The fields of how the main container ended: its current state's and its previous instance's."""
    fields: dict[str, Any] = {}
    terminated = getattr(getattr(main, "state", None), "terminated", None)
    if terminated is not None:
        fields.update(
            terminated_reason=getattr(terminated, "reason", None),
            signal=getattr(terminated, "signal", None),
            finished_at=getattr(terminated, "finished_at", None),
            termination_message=clip(getattr(terminated, "message", None)),
        )
    last = getattr(getattr(main, "last_state", None), "terminated", None)
    if last is not None:
        fields.update(
            last_terminated_reason=getattr(last, "reason", None),
            last_exit_code=getattr(last, "exit_code", None),
        )
    return fields


DISRUPTION_TARGET = "DisruptionTarget"  # set by whoever deletes a pod to disrupt it (Kubernetes >= 1.26)


def disruption(pod: Any) -> str | None:
    """``reason: message`` of the pod's DisruptionTarget condition (an eviction, a preemption, a taint, the kubelet
    under pressure), None when nothing disrupts it: the mpi-operator's own deletions (clean-up) set none."""
    for cond in getattr(getattr(pod, "status", None), "conditions", None) or []:
        if cond.type == DISRUPTION_TARGET and cond.status == "True":
            return clip(": ".join(part for part in (cond.reason, cond.message) if part)) or DISRUPTION_TARGET
    return None


def pod_summary(pod: Any, container: str | None = None) -> PodSummary:
    """Summarise a V1Pod; ``container`` names the MPI container (default: the first one)."""
    metadata, status, spec = pod.metadata, pod.status, pod.spec
    containers = list(getattr(spec, "containers", None) or [])
    name = container or (containers[0].name if containers else None)
    conditions = getattr(status, "conditions", None) or []
    scheduled = any(c.type == "PodScheduled" and c.status == "True" for c in conditions)
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
    deletion = getattr(metadata, "deletion_timestamp", None)
    grace = getattr(spec, "termination_grace_period_seconds", None)
    return PodSummary(
        name=metadata.name,
        role=pod_role(pod),
        created=metadata.creation_timestamp,
        phase=getattr(status, "phase", None),
        scheduled=scheduled,
        container=name,
        restart_count=int(getattr(main, "restart_count", 0) or 0) if main is not None else 0,
        state=state,
        waiting_reason=waiting_reason,
        waiting_message=waiting_message,
        exit_code=exit_code,
        pod_reason=getattr(status, "reason", None),
        pod_message=clip(getattr(status, "message", None)),
        memory_limit=_memory_limit(spec, name),
        deleting=deletion is not None,
        deletion_deadline=deletion,
        deletion_grace=_seconds(getattr(metadata, "deletion_grace_period_seconds", None)),
        grace_period=_seconds(grace),
        disruption=disruption(pod),
        **_ended(main),
    )


#: the metadata the hub's readers use, of pods and MPIJobs alike (what the hub files and matches them by, orderings)
_META = ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp", "resourceVersion")
# a pod's, plus its deletion's grace: when the deletion was asked for, against a container's end (failure_causes.py)
_POD_META = (*_META, "deletionGracePeriodSeconds")
_OWNER_REF = ("apiVersion", "kind", "name", "uid", "controller")  # whose pod it is (hooks/ownership.py)
_CONTAINER_STATUS = ("name", "image", "imageID", "ready", "restartCount", "started")


def _clipped_state(state: dict | None) -> dict | None:
    """A container state with its message (a termination message may be 4 KiB) cut as pod_summary cuts it."""
    if not state:
        return state
    return {
        kind: (
            {**detail, "message": clip(detail["message"], MAX_TEXT)}
            if isinstance(detail, dict) and detail.get("message")
            else detail
        )
        for kind, detail in state.items()
    }


def _slim_container_status(status: dict) -> dict:
    slim = {key: status[key] for key in _CONTAINER_STATUS if key in status}
    for key in ("state", "lastState"):
        if key in status:
            slim[key] = _clipped_state(status[key])
    return slim


def _slim_container(container: dict) -> dict:
    """Its name, and its memory limit (an OOMKilled cause names it)."""
    memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return {
        "name": container.get("name"),
        **({"resources": {"limits": {"memory": memory}}} if memory else {}),
    }


def _slim_condition(cond: dict) -> dict:
    """Type and status; a DisruptionTarget's reason and message too (a failure's cause names them)."""
    slim = {"type": cond.get("type"), "status": cond.get("status")}
    if cond.get("type") == DISRUPTION_TARGET:
        slim.update({key: clip(cond[key], MAX_TEXT) for key in ("reason", "message") if cond.get(key)})
    return slim


def slim_pod(pod: dict) -> dict:
    """A pod (API dict) cut to what :func:`pod_summary` (a failure's cause included, bounded), :func:`pod_role`,
    the hooks' orderings and the check of its controller (hooks/ownership.py) read, keeping the fields a ``V1Pod``
    requires: a cache of hundreds of pods holds a tenth of their size (volumes, env, probes, managedFields and
    annotations go)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    slim_spec: dict[str, Any] = {"containers": [_slim_container(c) for c in spec.get("containers") or []]}
    for key in ("nodeName", "terminationGracePeriodSeconds"):
        if spec.get(key) is not None:
            slim_spec[key] = spec[key]
    slim_status: dict[str, Any] = {
        "phase": status.get("phase"),
        "conditions": [_slim_condition(c) for c in status.get("conditions") or []],
        "containerStatuses": [_slim_container_status(s) for s in status.get("containerStatuses") or []],
    }
    for key in ("reason", "message"):
        if status.get(key):
            slim_status[key] = clip(status[key], MAX_TEXT)
    owners = [
        {key: ref[key] for key in _OWNER_REF if key in ref} for ref in meta.get("ownerReferences") or []
    ]
    return {
        "metadata": {**{key: meta[key] for key in _POD_META if key in meta}, "ownerReferences": owners},
        "spec": slim_spec,
        "status": slim_status,
    }


def slim_mpijob(job: dict) -> dict:
    """An MPIJob (API dict) cut to its metadata and status (what ``job_state`` reads): its spec and annotations
    (kubectl's last-applied manifest) are a large part of each of the thousand jobs a triggerer may keep."""
    meta = job.get("metadata") or {}
    return {
        "apiVersion": job.get("apiVersion"),
        "kind": job.get("kind"),
        "metadata": {key: meta[key] for key in _META if key in meta},
        "status": job.get("status") or {},
    }


def slim_workload(workload: dict) -> dict:
    """A Kueue Workload cut to what wait/queueing.py and the hub read: its owner, queue, conditions and admission."""
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    admission = status.get("admission") or {}
    owners = [
        {key: ref.get(key) for key in ("apiVersion", "kind", "name", "uid")}
        for ref in meta.get("ownerReferences") or []
    ]
    slim_admission = {
        "clusterQueue": admission.get("clusterQueue"),
        "podSetAssignments": [
            {"name": a.get("name"), "flavors": a.get("flavors") or {}}
            for a in admission.get("podSetAssignments") or []
        ],
    }
    return {
        "metadata": {**{key: meta[key] for key in _META if key in meta}, "ownerReferences": owners},
        "spec": {"queueName": (workload.get("spec") or {}).get("queueName")},
        "status": {
            "conditions": status.get("conditions") or [],
            **({"admission": slim_admission} if admission else {}),
        },
    }


def event_summary(event: dict) -> EventSummary:
    involved = event.get("involvedObject") or {}
    return EventSummary(
        type=event.get("type") or "",
        reason=event.get("reason") or "",
        message=event.get("message") or "",
        object_name=involved.get("name") or "",
        count=int(event.get("count") or 1),
    )


# ---------------------------------------------------------------------- metadata the watch hub indexes by
def object_meta(obj: Any) -> tuple[str | None, str | None, dict]:
    """name, uid, labels of a dict (MPIJob, event) or a client model (pod)."""
    if isinstance(obj, dict):
        meta = obj.get("metadata") or {}
        return meta.get("name"), meta.get("uid"), meta.get("labels") or {}
    meta = obj.metadata
    return meta.name, getattr(meta, "uid", None), meta.labels or {}


def involved_object(event: dict) -> dict:
    return event.get("involvedObject") or {}


def without_managed_fields(obj: Any) -> Any:
    """Without its managedFields: nothing here reads them, and they are a large part of every object the hub keeps."""
    if isinstance(obj, dict):
        (obj.get("metadata") or {}).pop("managedFields", None)
    elif getattr(obj, "metadata", None) is not None:
        obj.metadata.managed_fields = None
    return obj


def job_of_pod(pod: Any, label: str) -> str | None:
    """The job a pod's ``label`` (its kind's ``PodLabels.job_name``) names."""
    return object_meta(pod)[2].get(label) if pod is not None else None


def owner_job(workload: dict | None, kind: str) -> dict:
    """The job of ``kind`` (its kind's ``kind``: ``MPIJob``) owning a Workload (its ownerReference), or {}."""
    refs = ((workload or {}).get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("kind") == kind), {})
