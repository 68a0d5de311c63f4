"""Which pods belong to an MPIJob: the ones its controllers made, told by controller references, never by labels.

Labels are anyone's to write: whoever may create pods in the namespace can give one an MPIJob's labels (issue 32,
item 3). Counted by its labels, such a pod was a launcher attempt whose output entered the task log (a forged
``@task.mpi`` result with it), or a worker failed before the launcher, for which the task deleted the real job. Here a
pod counts only when its controller reference leads to the followed MPIJob's uid, as the controllers themselves check
(``metav1.IsControlledBy``). The chain is the job's kind's (``JobKind.launcher_owner``):

* mpi-operator v0.8.2 (jobspec/kinds/mpijob_v2beta1.py): a worker pod's controller is the MPIJob (``newWorker``);
  the launcher pod's is the batch/v1 Job ``<name>-launcher`` (the Job controller's pod), whose controller is the MPIJob
  (``newLauncherJob``, checked by ``getLauncherJob``). That Job's uid comes from one GET of it;
* training-operator (jobspec/kinds/mpijob_v1.py): the pods of both roles are controlled by the MPIJob (no object
  between: a pod controlled by anything else is not the job's).

Not stopped: a controller reference is a field whoever creates a pod writes. A co-tenant who can read the uids (get
on pods, MPIJobs or Jobs) can forge one, and the controllers then count that pod as theirs too; only an admission
policy on pods' ownerReferences closes that.

Used by the watch hub's subscriptions (wait/subscription.py) and the hooks' pod listings (:func:`role_pods`): every
reader of a job's pods goes through :meth:`Owner.owns`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_mpi.hooks.errors import describe_error
from airflow_mpi.hooks.requests import CORE_V1, CUSTOM_OBJECTS, Call, Steps, get_call
from airflow_mpi.jobspec.kinds import DEFAULT_KIND, JobKind

log = logging.getLogger(__name__)


def _field(ref: Any, key: str) -> Any:
    return ref.get(key) if isinstance(ref, dict) else getattr(ref, key, None)


def controller(obj: Any) -> tuple[str | None, str | None, str | None] | None:
    """``(kind, name, uid)`` of the controller reference of a pod or a Job (an API dict or a client model)."""
    if isinstance(obj, dict):
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    else:
        refs = getattr(getattr(obj, "metadata", None), "owner_references", None) or []
    for ref in refs:
        if _field(ref, "controller"):
            return _field(ref, "kind"), _field(ref, "name"), _field(ref, "uid")
    return None


def _uid(obj: Any) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid") if isinstance(obj, dict) else None


@dataclass(frozen=True)
class Owner:
    """The followed MPIJob (``uid`` None: not known yet) of ``job_kind``, and what is known of its launcher Job (the
    kind's ``launcher_owner``): its uid once a GET showed the MPIJob controls it, and the Job uids that pods named
    as their controller but are not that Job."""

    name: str
    uid: str | None
    launcher_job: str | None = None
    refuted: frozenset[str] = field(default_factory=frozenset)
    job_kind: JobKind = DEFAULT_KIND

    def owns(self, pod: Any) -> bool | None:
        """True: made by the job's controllers; False: not; None: controlled by a Job of the launcher Job's name
        whose uid is not checked yet (:meth:`unchecked`; one GET of that Job tells, :meth:`learn`)."""
        if not self.uid:
            return None
        kind, name, uid = controller(pod) or (None, None, None)
        if not uid:
            return False
        if kind == self.job_kind.kind:
            return uid == self.uid
        between = self.job_kind.launcher_owner
        if between is None or kind != between.kind or name != self.job_kind.launcher_name(self.name):
            return False
        if uid in self.refuted:
            return False
        return True if uid == self.launcher_job else None

    def unchecked(self, pods: Iterable[Any]) -> set[str]:
        """The Job uids that pods name as their controller and a GET of the launcher Job must check."""
        return {(controller(p) or (None, None, ""))[2] or "" for p in pods if self.owns(p) is None} - {""}

    def learn(self, job: dict | None, checked: Iterable[str]) -> Owner:
        """What a GET of ``<name>-launcher`` (None: not found, or not readable) tells about the Job uids
        ``checked``: the Job is the launcher's when the MPIJob controls it; the other uids are nobody's."""
        kind, _, owner_uid = controller(job) or (None, None, None)
        launcher = _uid(job) if kind == self.job_kind.kind and owner_uid == self.uid else None
        refuted = self.refuted | {uid for uid in checked if uid != launcher}
        return replace(self, launcher_job=launcher or self.launcher_job, refuted=frozenset(refuted))

    def split(self, pods: Iterable[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """``(owned, foreign, undecided)``: undecided are the pods :meth:`owns` cannot tell yet."""
        result: dict[bool | None, list[Any]] = {True: [], False: [], None: []}
        for pod in pods:
            result[self.owns(pod)].append(pod)
        return result[True], result[False], result[None]


def launcher_job_call(namespace: str, name: str, job_kind: JobKind = DEFAULT_KIND) -> Call:
    """GET the object between the job ``name`` and its launcher pods (the kind's ``launcher_owner``; v2beta1: the
    batch/v1 Job ``<name>-launcher``) as a dict; None when it does not exist, or may not be read (a role of an earlier
    release): then no launcher pod counts, and the warning says which grant is missing."""
    between = job_kind.launcher_owner
    if between is None:
        raise ValueError(f"{job_kind.api_version} has no object between a job and its launcher pods")
    job = job_kind.launcher_name(name)

    def on_error(exc: BaseException) -> Any:
        status = getattr(exc, "status", None)
        if status not in (403, 404):
            raise exc
        if status == 403:
            log.warning(
                "may not read %s %s/%s (%s): its launcher pods are not followed, as any pod that only carries "
                "the MPIJob's labels; grant get on %s (deploy/rbac.yaml)",
                between.kind,
                namespace,
                job,
                describe_error(exc),
                between.resource,
            )
        return None

    return Call(
        CUSTOM_OBJECTS,
        "get_namespaced_custom_object",
        {
            "group": between.group,
            "version": between.version,
            "plural": between.plural,
            "namespace": namespace,
            "name": job,
        },
        on_error=on_error,
    )


def role_pods(
    where: dict[str, Any],
    name: str,
    selectors: list[str],
    sort: Callable[[list], list],
    foreign: Callable[[list[Any]], None],
    job_kind: JobKind = DEFAULT_KIND,
) -> Steps:
    """The MPIJob's pods by the first of ``selectors`` that finds any of them, only those its controllers made
    (a GET of the MPIJob for its uid, and of its launcher Job when a pod names a Job as its controller), sorted;
    ``foreign`` is told of the others. No MPIJob: no pods."""
    owner = Owner(name, _uid((yield get_call(where, name))), job_kind=job_kind)
    for selector in selectors:
        pods = list(
            (
                yield Call(
                    CORE_V1,
                    "list_namespaced_pod",
                    {"namespace": where["namespace"], "label_selector": selector},
                )
            ).items
        )
        if unchecked := owner.unchecked(pods):
            owner = owner.learn((yield launcher_job_call(where["namespace"], name, job_kind)), unchecked)
        owned, others, _ = owner.split(pods)  # undecided: no MPIJob (uid unknown), no pod is its
        if others:
            foreign(others)
        if owned:
            return sort(owned)
    return []
