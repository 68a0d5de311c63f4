"""The one exception the model raises, so callers can tell a bad spec from a cluster error.

Validation collects every violation it finds (fixing one bad field at a time through a DAG re-run is slow), so one
error may carry several: ``field``/``value``/``reason`` are the first, ``errors`` all of them, and the message lists
all, each as ``field=value!r: reason``.

Errors are redacted when they are made, before anything can print them (a DAG's import error in the UI, a task log):
the value of a field whose path names a sensitive-looking key (``labels.api_token``) or that is marked ``secret`` is
``***``; other values and the reason go through ``redaction.redact_value``/``redact_string`` (URL passwords,
``--token x`` in a command, ``password: x`` in a YAML snippet). ``value`` holds the redacted value too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from airflow_mpi.jobspec.redaction import MASK, names_a_secret, redact_string, redact_value


class MPIJobValidationError(ValueError):
    """A field of an MPIJob spec (or its base manifest) that the operator or Kubernetes would reject."""

    def __init__(
        self,
        field: str,
        value: Any,
        reason: str,
        *,
        errors: Iterable[MPIJobValidationError] = (),
        secret: bool = False,
    ):
        self.field = field
        self.value = MASK if secret or names_a_secret(field) else redact_value(value)
        self.reason = redact_string(reason)
        self.errors: tuple[MPIJobValidationError, ...] = tuple(errors) or (self,)
        super().__init__("; ".join(f"{e.field}={e.value!r}: {e.reason}" for e in self.errors))

    @classmethod
    def from_errors(cls, errors: Iterable[MPIJobValidationError]) -> MPIJobValidationError:
        errors = tuple(errors)
        if not errors:
            raise ValueError("no errors to report")
        first = errors[0]
        return first if len(errors) == 1 else cls(first.field, first.value, first.reason, errors=errors)

    def __reduce__(self):
        # Exceptions with keyword-only arguments do not pickle by default (Airflow may pickle them).
        extra = self.errors if len(self.errors) > 1 else ()
        return (_rebuild, (self.field, self.value, self.reason, extra))


def _rebuild(field: str, value: Any, reason: str, errors: tuple) -> MPIJobValidationError:
    return MPIJobValidationError(field, value, reason, errors=errors)


class ErrorList:
    """Collects violations in order so validation can report all of them in one error."""

    def __init__(self) -> None:
        self.items: list[MPIJobValidationError] = []

    def add(self, field: str, value: Any, reason: str, *, secret: bool = False) -> None:
        """One violation; ``secret``: the value is one although the field's path does not say so (an EnvVar's)."""
        self.items.append(MPIJobValidationError(field, value, reason, secret=secret))

    def mappings(
        self, path: str, value: Any, reason: str, item_reason: str, *, optional: bool = True
    ) -> Iterator[tuple[str, dict]]:
        """``(f"{path}[{i}]", item)`` of each mapping of a list; reports a non-list (None too unless
        ``optional``) with ``reason`` and each item that is not a mapping with ``item_reason``."""
        if value is None and optional:
            return
        if not isinstance(value, list):
            self.add(path, value, reason)
            return
        for i, item in enumerate(value):
            if isinstance(item, dict):
                yield f"{path}[{i}]", item
            else:
                self.add(f"{path}[{i}]", item, item_reason)

    def check_entries(
        self, path: str, value: Any, reason: str, key_problem: Callable[[Any], str | None],
        value_problem: Callable[[Any], str | None], *, key_what: str, value_what: str = "",
    ) -> None:  # fmt: skip
        """Every key and value of an optional mapping: ``{key_what}: {problem}`` at ``path`` for a bad key,
        ``{value_what}: {problem}`` (or just the problem) at ``path.key`` for a bad value; anything but a mapping
        or None is reported with ``reason``."""
        if value is not None and not isinstance(value, dict):
            self.add(path, value, reason)
        for key, item in value.items() if isinstance(value, dict) else ():
            if problem := key_problem(key):
                self.add(path, key, f"{key_what}: {problem}")
            elif problem := value_problem(item):
                self.add(f"{path}.{key}", item, f"{value_what}: {problem}" if value_what else problem)

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise MPIJobValidationError.from_errors(self.items)
