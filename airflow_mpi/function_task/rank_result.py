"""What the job shows of a ``@task.mpi`` submission's nonce (its SHA-256, in ``RESULT_NONCE_ANNOTATION``).

Reading rank 0's return value back from the launcher's log is wait/rank_result_capture.py's (the trigger
reads it too); its names are re-exported here, where the decorators' tests import them.
"""

from __future__ import annotations

import hashlib

from airflow_mpi.jobspec.naming import LABEL_PREFIX
from airflow_mpi.wait.rank_result_capture import (
    UNVERIFIED,
    RankResult,
    ResultCollector,
    hide_result_lines,
    parse_result,
)

RESULT_NONCE_ANNOTATION = LABEL_PREFIX + "result-nonce-sha256"


def nonce_digest(nonce: str) -> str:
    """What the job may show of a nonce: its SHA-256, hex."""
    return hashlib.sha256(nonce.encode()).hexdigest()


def result_digest_of(obj: dict) -> str | None:
    """The nonce digest an MPIJob (or its manifest) carries; None for a job of no ``@task.mpi`` submission."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(RESULT_NONCE_ANNOTATION)


__all__ = [
    "RESULT_NONCE_ANNOTATION",
    "UNVERIFIED",
    "RankResult",
    "ResultCollector",
    "hide_result_lines",
    "nonce_digest",
    "parse_result",
    "result_digest_of",
]
