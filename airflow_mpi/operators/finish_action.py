"""What a task does with its MPIJob once the wait ended (``on_finish_action``): a closed set of choices,
which also accepts cncf.kubernetes' spellings of them, so that a KubernetesPodOperator's arguments carry over.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from airflow_mpi.jobspec.errors import ErrorList


class OnFinishAction(StrEnum):
    """``OnFinishAction("keep_pod")`` is ``KEEP``: an alias (ALIASES) names the same member."""

    KEEP = "keep"
    DELETE_SUCCEEDED = "delete_succeeded"
    DELETE = "delete"

    @classmethod
    def _missing_(cls, value: object) -> OnFinishAction | None:
        return ALIASES.get(value) if isinstance(value, str) else None


# cncf.kubernetes' OnFinishAction values (its delete_active_pod has no counterpart: a job whose wait failed is
# deleted whatever the action, operators/outcome.py ABANDONED)
ALIASES = {
    "keep_pod": OnFinishAction.KEEP,
    "delete_succeeded_pod": OnFinishAction.DELETE_SUCCEEDED,
    "delete_pod": OnFinishAction.DELETE,
}
# every spelling accepted, the canonical ones first (the parameter's error lists them)
ACCEPTED = (*(action.value for action in OnFinishAction), *ALIASES)


def as_on_finish_action(errors: ErrorList, name: str, value: Any) -> Any:
    """An accepted spelling as its canonical text (a plain str: it is stored on the task); anything else is
    left for the parameter's rule to report."""
    try:
        return OnFinishAction(value).value
    except ValueError:
        return value
