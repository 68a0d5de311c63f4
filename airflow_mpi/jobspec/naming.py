"""Deterministic MPIJob names and the labels that tie an MPIJob to one Airflow task instance.

A retry or a restarted worker must find the MPIJob of its task instance again (and never start a second one), so the
name is derived from the task instance's identity, and the same identity is written as labels (label-safe, for
selectors) and annotations (raw values, for humans).

Several Airflow deployments may share a namespace, and their run ids coincide (``scheduled__...``): the identity
includes the *deployment* (its own label, and a part of the name's hash), so the same dag/task/run in two deployments
makes two jobs, and neither deployment reattaches to, or sweeps, the other's. A job without a deployment label (a
rendered manifest, a job of an older release) is nobody's: never reattached to, never swept.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from airflow_mpi.jobspec.rules import LABEL_MAX, label_value

LABEL_PREFIX = "airflow-mpi.io/"
DAG_ID_LABEL = LABEL_PREFIX + "dag-id"
TASK_ID_LABEL = LABEL_PREFIX + "task-id"
RUN_ID_LABEL = LABEL_PREFIX + "run-id"
MAP_INDEX_LABEL = LABEL_PREFIX + "map-index"
TRY_NUMBER_LABEL = LABEL_PREFIX + "try-number"
DEPLOYMENT_LABEL = LABEL_PREFIX + "deployment"
TASK_INSTANCE_ID_ANNOTATION = LABEL_PREFIX + "task-instance-id"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "airflow-mpi"

MAX_NAME_LENGTH = LABEL_MAX
_HASH_LENGTH = 8


def _digest(*parts: object) -> str:
    joined = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(joined.encode()).hexdigest()[:_HASH_LENGTH]


def _slug(text: str) -> str:
    """Lowercase DNS-1035 fragment: letters, digits and single dashes."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", text.lower())).strip("-")


def job_name(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int = -1,
    *,
    max_workers: int = 1,
    deployment: str | None = None,
    prefix: str | None = None,
    longest_suffix: int | None = None,
) -> str:
    """A DNS-1035 name unique to the task instance (not the try) of one deployment, short enough for its pods.

    A job's controller derives names from it (its kind's ``longest_name``: the mpi-operator names worker pods
    ``<name>-worker-<index>`` and the launcher Job ``<name>-launcher``); they must stay within 63 characters, so the
    name leaves ``longest_suffix`` characters for the longest of them (None: the MPIJob kinds' suffixes for
    ``max_workers``). The hash covers the raw identity, so different runs never collide even when their slugs are
    truncated to the same text. ``prefix`` (a valid DNS-1035 label the user gave) replaces the dag/task slug,
    truncated as it is.
    """
    if longest_suffix is None:
        longest_suffix = max(len(f"-worker-{max(max_workers, 1) - 1}"), len("-launcher"))
    budget = MAX_NAME_LENGTH - longest_suffix - _HASH_LENGTH - 1
    if budget < 1:
        raise ValueError(f"max_workers={max_workers!r}: too many workers to name pods within 63 characters")
    digest = (
        _digest(dag_id, task_id, run_id, map_index)
        if deployment is None
        else _digest(deployment, dag_id, task_id, run_id, map_index)
    )
    slug = (prefix if prefix is not None else _slug(f"{dag_id}-{task_id}"))[:budget].strip("-")
    if not slug or not slug[0].isalpha():
        slug = ("mpi-" + slug)[:budget].strip("-")
    return f"{slug}-{digest}"


def sanitize_label_value(value: object) -> str:
    """``value`` unchanged when Kubernetes accepts it as a label value, else a safe form: run ids such as
    ``manual__2026-11-22T10:00:00+00:00`` contain ``:`` and ``+`` that labels forbid; the altered form carries a hash
    of the raw value so two different values never map to the same label."""
    text = str(value)
    if not label_value(text):
        return text
    digest = _digest(text)
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", text)
    cleaned = cleaned[: LABEL_MAX - _HASH_LENGTH - 1]
    cleaned = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)
    return f"{cleaned}-{digest}" if cleaned else digest


def identity_labels(
    dag_id: str, task_id: str, run_id: str, map_index: int, try_number: int, deployment: str | None = None
) -> dict[str, str]:
    """Labels of the MPIJob of one task instance try (selectable, label-safe)."""
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        DAG_ID_LABEL: sanitize_label_value(dag_id),
        TASK_ID_LABEL: sanitize_label_value(task_id),
        RUN_ID_LABEL: sanitize_label_value(run_id),
        MAP_INDEX_LABEL: str(map_index) if map_index >= 0 else "none",  # "-1" is no valid label value
        TRY_NUMBER_LABEL: str(try_number),
    }
    if deployment is not None:
        labels[DEPLOYMENT_LABEL] = sanitize_label_value(deployment)
    return labels


def identity_annotations(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int,
    try_number: int,
    task_instance_id: str | None = None,
) -> dict[str, str]:
    """The raw identity, for people reading the object (labels may be hashed)."""
    annotations = {
        DAG_ID_LABEL: dag_id,
        TASK_ID_LABEL: task_id,
        RUN_ID_LABEL: run_id,
        MAP_INDEX_LABEL: str(map_index),
        TRY_NUMBER_LABEL: str(try_number),
    }
    if task_instance_id is not None:
        annotations[TASK_INSTANCE_ID_ANNOTATION] = task_instance_id
    return annotations


@dataclass(frozen=True)
class TaskIdentity:
    """The Airflow task instance try an MPIJob belongs to (a placeholder one when rendering offline).

    ``deployment``: the Airflow deployment's identity (None offline: a rendered manifest belongs to nobody);
    ``task_instance_id``: the try's unique id in that deployment's database (Airflow 3: the TI's UUID).
    """

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1
    deployment: str | None = None
    task_instance_id: str | None = None

    def labels(self) -> dict[str, str]:
        return identity_labels(
            self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number, self.deployment
        )

    def annotations(self) -> dict[str, str]:
        return identity_annotations(
            self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number, self.task_instance_id
        )

    def job_name(
        self, max_workers: int = 1, prefix: str | None = None, longest_suffix: int | None = None
    ) -> str:
        return job_name(
            self.dag_id,
            self.task_id,
            self.run_id,
            self.map_index,
            max_workers=max_workers,
            deployment=self.deployment,
            prefix=prefix,
            longest_suffix=longest_suffix,
        )


def _task_identity(labels: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (labels or {}).items() if k.startswith(LABEL_PREFIX) and k != TRY_NUMBER_LABEL}


RAW_IDENTITY_KEYS = (DAG_ID_LABEL, TASK_ID_LABEL, RUN_ID_LABEL, MAP_INDEX_LABEL)


def _raw_identity(annotations: dict[str, str] | None) -> tuple[str | None, ...]:
    return tuple((annotations or {}).get(key) for key in RAW_IDENTITY_KEYS)


def reattach_selector(labels: dict[str, str]) -> str:
    """Label selector matching every try of the task instance these labels describe (and, labels being sanitised,
    possibly another task instance's: ``same_task`` decides)."""
    identity = _task_identity(labels)
    return ",".join(f"{k}={v}" for k, v in sorted(identity.items()))


def same_task(metadata_a: dict | None, metadata_b: dict | None) -> bool:
    """True when both objects' metadata name the same task instance of the same deployment (the try may differ).

    Labels are sanitised, so two raw values can share one label (``manual__2026-11-22T10:00:00+00:00`` and a run id
    spelled like its sanitised form): the raw identity annotations must match too. An object without them (a job
    of an older release, one made by hand) is never the same task: it is left alone.
    """
    a, b = metadata_a or {}, metadata_b or {}
    labels_a, labels_b = _task_identity(a.get("labels")), _task_identity(b.get("labels"))
    raw_a, raw_b = _raw_identity(a.get("annotations")), _raw_identity(b.get("annotations"))
    return bool(labels_a) and labels_a == labels_b and None not in raw_a and raw_a == raw_b
