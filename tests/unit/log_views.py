"""How Airflow's two log views fold a task log into groups, as their shipped code does it, for the unit tests.

* Airflow 3.3.2's React UI (airflow/ui/dist/assets/index-*.js): a record whose rendered text *contains*
  ``::group::`` opens a group titled with what follows the marker; one containing ``::endgroup::`` closes the
  innermost (an unmatched close is ignored); groups nest.
* Airflow 2.11 (www/static/js/dag/details/taskInstance/Logs/utils.ts): the log is split into lines; a line matching
  `` INFO - (::|##\\[])group(::|\\])`` opens, `` INFO - (::|##\\[])endgroup(::|\\])`` closes (in a record of several
  lines only its first carries the `` INFO - `` prefix).

Both fold every group by default. The e2e test (tests/e2e/test_ui.py) checks the real Airflow 3 page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

AIRFLOW2_START = re.compile(r" INFO - (::|##\[])group(::|\])([^\n])*")
AIRFLOW2_END = re.compile(r" INFO - (::|##\[])endgroup(::|\])")


@dataclass
class Group:
    title: str
    items: list = field(default_factory=list)  # lines (str) and nested groups


class LevelRecorder:
    """Stands in for ``self.log``: keeps ``(LEVEL, message)`` per record, formatted as logging would."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        def record(msg, *args, **kwargs):
            self.records.append((level.upper(), str(msg) % args if args else str(msg)))

        return record

    @property
    def lines(self) -> list[str]:
        return [message for _, message in self.records]


def _fold(entries: list[tuple[str, bool, bool, str]]) -> list:
    """``(text, opens, closes, title)`` per shown line -> top-level items."""
    top: list = []
    stack: list[Group] = []
    for text, opens, closes, title in entries:
        if opens:
            group = Group(title)
            (stack[-1].items if stack else top).append(group)
            stack.append(group)
        elif closes:
            if stack:
                stack.pop()
        else:
            (stack[-1].items if stack else top).append(text)
    return top


def airflow3_view(records: list[tuple[str, str]]) -> list:
    """The task log as Airflow 3's UI groups it: one entry per record."""
    return _fold(
        [
            (
                msg,
                "::group::" in msg,
                "::endgroup::" in msg,
                msg.split("::group::")[1] if "::group::" in msg else "",
            )
            for _, msg in records
        ]
    )


def airflow2_view(records: list[tuple[str, str]]) -> list:
    """The task log as Airflow 2.11's UI groups it: one entry per line of the log file."""
    entries = []
    for level, msg in records:
        for i, line in enumerate(msg.split("\n")):
            text = f"[2026-11-28, 08:00:00 UTC] {{mpijob.py:1}} {level} - {line}" if i == 0 else line
            start, end = AIRFLOW2_START.search(text), AIRFLOW2_END.search(text)
            title = start.group(0)[len(" INFO - ::group::") :] if start else ""
            entries.append((line, bool(start), bool(end) and not start, title))
    return _fold(entries)


def groups(view: list) -> list[Group]:
    """Every group of a view, outermost first."""
    found = []
    for item in view:
        if isinstance(item, Group):
            found += [item, *groups(item.items)]
    return found
