"""Folded groups in the task log, and keeping text from elsewhere from opening or closing one.

Airflow's log views fold the records between ``::group::<title>`` and ``::endgroup::``, folded until clicked:

* Airflow 3 (the React UI, 3.3.2): a record whose text *contains* ``::group::`` opens a group (its title is what
  follows the marker), one that contains ``::endgroup::`` closes the innermost; groups nest.
* Airflow 2.11: a line that reads `` INFO - ::group::<title>`` (or ``##[]group]``, its regular expression's Azure
  DevOps variant) opens one, `` INFO - ::endgroup::`` closes it; a title is also the group's id (its words).

So a marker only this provider writes is one that balances: :func:`log_group` opens and closes a group in the same
process, around lines written in between, and a group never spans a deferral (a trigger's records and a resumed
try's would otherwise close or leave open a group another process opened, and a group left open folds away
everything after it, the verdict too). Everything else that reaches the task log from outside the provider (launcher
output, the manifest's values, Kubernetes events, worker log tails) passes :func:`escape`: a zero-width space after a
marker's leading ``::`` or ``##[`` keeps every marker spelling of both versions from matching while the line reads as
the program printed it. A launcher printing ``::group::`` therefore folds nothing (cncf.kubernetes' pod operator passes
its pod's markers through; here a group the program opens and never closes would hide the provider's own lines).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

GROUP_START = "::group::"
GROUP_END = "::endgroup::"
ESCAPE = "\u200b"  # zero-width space: invisible, and neither UI's marker test sees through it

# a marker's prefix (GitHub's "::", Azure DevOps' "##[", Airflow 2's "##[]") before (end)group and its closing token
_MARKER_PREFIX = re.compile(r"(::|##\[\]?)(?=(?:end)?group(?:::|\]))")


def escape(text: str) -> str:
    """``text`` with no log group marker of either Airflow version left in it (see the module docstring)."""
    if "group" not in text:  # the common case, without a regular expression
        return text
    return _MARKER_PREFIX.sub(lambda match: match.group(1) + ESCAPE, text)


@contextmanager
def log_group(log: Any, title: str) -> Iterator[None]:
    """Fold what ``log`` records inside the block under ``title`` (at INFO: Airflow 2 recognises no other level).

    The group is closed however the block ends, so an error raised in it is not folded away."""
    log.info("%s%s", GROUP_START, escape(title))
    try:
        yield
    finally:
        log.info("%s", GROUP_END)
