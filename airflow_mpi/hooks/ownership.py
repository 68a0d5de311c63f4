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
  between: a pod controlled by anything else is not the job's);
* Kubeflow Trainer (jobspec/kinds/trainjob.py): a pod of either role is controlled by its batch Job
  (``<name>-launcher-0``, ``<name>-node-0``), controlled by the JobSet ``<name>`` (``JobKind.owner_parent``),
  controlled by the TrainJob. One check GETs the JobSet and both Jobs (3 GETs), cached per job as above.

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
from airflow_mpi.hooks.retries import refused_in_an_outage
from airflow_mpi.jobspec.kinds import DEFAULT_KIND, JobKind, LauncherOwner

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
    """The followed job (``uid`` None: not known yet) of ``job_kind``, and what is known of the objects between it
    and its pods (the kind's ``launcher_owner``, e.g. its launcher Job): the uids GETs showed lead to the job
    (``verified``), and the uids that pods named as their controller but do not."""

    name: str
    uid: str | None
    refuted: frozenset[str] = field(default_factory=frozenset)
    job_kind: JobKind = DEFAULT_KIND
    verified: frozenset[str] = field(default_factory=frozenset)

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
        if between is None or kind != between.kind or name not in self.job_kind.owner_names(self.name):
            return False
        if uid in self.refuted:
            return False
        return True if uid in self.verified else None

    def unchecked(self, pods: Iterable[Any]) -> set[str]:
        """The Job uids that pods name as their controller and a GET of the launcher Job must check."""
        return {(controller(p) or (None, None, ""))[2] or "" for p in pods if self.owns(p) is None} - {""}

    def learn(self, found: dict | list | None, checked: Iterable[str]) -> Owner:
        """What GETs of the objects between the job and its pods (:func:`owner_objects`: one dict, a list, None when
        not found or not readable) tell about the uids ``checked``: an object leads to the job when the job controls
        it, or an object found leading to it does (a TrainJob's JobSet, then its batch Jobs); the others are
        nobody's."""
        objects = [o for o in (found if isinstance(found, list) else [found]) if isinstance(o, dict)]
        ours = set(self.verified)
        parent = self.job_kind.owner_parent
        grown = True
        while grown:
            grown = False
            for obj in objects:
                kind, _, owner_uid = controller(obj) or (None, None, None)
                uid = _uid(obj)
                by_job = kind == self.job_kind.kind and owner_uid == self.uid
                by_parent = parent is not None and kind == parent.kind and owner_uid in ours
                if uid and uid not in ours and (by_job or by_parent):
                    ours.add(uid)
                    grown = True
        refuted = self.refuted | {uid for uid in checked if uid not in ours}
        return replace(self, verified=frozenset(ours), refuted=frozenset(refuted))

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
    return owned_object_call(namespace, between, job_kind.launcher_name(name), job_kind)


def owner_objects(namespace: str, name: str, job_kind: JobKind = DEFAULT_KIND) -> Steps:
    """The objects between the job ``name`` and its pods, for :meth:`Owner.learn`: the launcher Job (one GET), or,
    for a kind with an ``owner_parent``, that parent (named as the job) and each object of ``owner_names`` (a
    TrainJob: its JobSet and its two batch Jobs, 3 GETs), the ones found."""
    parent, between = job_kind.owner_parent, job_kind.launcher_owner
    if parent is None or between is None:
        return (yield launcher_job_call(namespace, name, job_kind))
    found = [(yield owned_object_call(namespace, parent, name, job_kind))]
    for owner_name in job_kind.owner_names(name):
        found.append((yield owned_object_call(namespace, between, owner_name, job_kind)))
    return [obj for obj in found if obj is not None]


def owned_object_call(namespace: str, between: LauncherOwner, job: str, job_kind: JobKind) -> Call:
    """GET ``between``'s object ``job`` as a dict; None when absent or not readable (the warning names the grant)."""

    def on_error(exc: BaseException) -> Any:
        status = getattr(exc, "status", None)
        # a 403 just after an outage is the restarted API server's, not the grants': refuting the object would stop
        # following the launcher's pods for good, and their log would never reach the task (run M, 2026-11-28)
        if status not in (403, 404) or refused_in_an_outage(exc):
            raise exc
        if status == 403:
            log.warning(
                "may not read %s %s/%s (%s): the pods it controls are not followed, as any pod that only carries "
                "the %s's labels; grant get on %s (deploy/rbac.yaml)",
                between.kind,
                namespace,
                job,
                describe_error(exc),
                job_kind.kind,
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
            owner = owner.learn((yield from owner_objects(where["namespace"], name, job_kind)), unchecked)
        owned, others, _ = owner.split(pods)  # undecided: no MPIJob (uid unknown), no pod is its
        if others:
            foreign(others)
        if owned:
            return sort(owned)
    return []
