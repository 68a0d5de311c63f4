"""Where a field's value came from: a parameter, the base manifest, a default the operator writes, or the controller's
own default (reported, not written). The task log states each; the operator reads the backoff limit's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PARAMETER, BASE_MANIFEST, DEFAULT = "parameter", "base manifest", "default"
CONTROLLER_DEFAULT = "controller default, not written"


@dataclass(frozen=True)
class Setting:
    """The value a field ends up with and where it came from (PARAMETER, BASE_MANIFEST or DEFAULT)."""

    value: Any
    source: str

    def __str__(self) -> str:
        return f"{self.value!r} ({self.source})"
