"""Telling rendered parameter values from ones Airflow has not rendered yet.

Non-templated parameters are validated when the DAG is parsed (so a bad value is an import error
naming the field); templated ones can only be checked after rendering, so parse-time validation
puts a neutral stand-in where a value is still a template, an XComArg or a template file.
"""

from __future__ import annotations

from typing import Any

TEMPLATE_MARKERS = ("{{", "{%", "{#")


def is_unrendered(value: Any, template_ext: tuple[str, ...] = ()) -> bool:
    """True for Jinja text, a template file name, or a lazy value (XComArg, ...) at any depth."""
    if isinstance(value, str):
        return any(m in value for m in TEMPLATE_MARKERS) or (bool(template_ext) and value.endswith(template_ext))
    if isinstance(value, dict):
        return any(is_unrendered(k, template_ext) or is_unrendered(v, template_ext) for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return any(is_unrendered(v, template_ext) for v in value)
    return hasattr(value, "resolve") and not isinstance(value, (int, float, bool))


def parse_time_values(values: dict[str, Any], stand_ins: dict[str, Any], template_ext: tuple[str, ...]) -> dict[str, Any]:
    """``values`` with every unrendered entry replaced by its stand-in."""
    return {k: (stand_ins.get(k) if is_unrendered(v, template_ext) else v) for k, v in values.items()}
