"""Kubernetes syntax rules (k8s.io/apimachinery/pkg/util/validation) and the CRDs' value rules as small predicates.

Each returns the reason a value is invalid, or None. They are re-implemented (not imported)
because the model must stay free of client libraries. Every pattern must match the whole value (``fullmatch``):
with ``re.match`` and ``$``, a trailing newline (an upstream XCom rendered from ``check_output``) would pass and
reach the API server, whose Go patterns refuse it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Rule = Callable[[object], "str | None"]

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")

_ALNUM_ENDS = (
    "must consist of alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric one"
)

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
ANNOTATIONS_TOTAL_MAX = 256 * 1024
INT32_MAX = 2**31 - 1  # the CRDs' integers
INT64_MAX = 2**63 - 1


def string(value: object) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be a boolean"


def non_empty(value: object) -> str | None:
    return None if isinstance(value, str) and value else "must be a non-empty string"


def strings(value: object) -> str | None:
    ok = isinstance(value, list) and all(isinstance(a, str) for a in value)
    return None if ok else "must be a list of strings"


def integer(minimum: int = 0, maximum: int = INT32_MAX) -> Rule:
    """An integer within [minimum, maximum] (int32 by default, as in the CRDs)."""

    def problem(value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if value < minimum:
            return f"must be >= {minimum}"
        return f"must be <= {maximum}" if value > maximum else None

    return problem


def one_of(allowed: tuple[str, ...]) -> Rule:
    return lambda value: (
        None if isinstance(value, str) and value in allowed else f"must be one of {', '.join(allowed)}"
    )


def mapping(what: str) -> Rule:
    return lambda value: None if isinstance(value, dict) else f"must be a mapping ({what})"


def _matching(pattern: re.Pattern, maximum: int, reason: str) -> Rule:
    def problem(value: object) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if len(value) > maximum:
            return f"must be no more than {maximum} characters"
        return None if pattern.fullmatch(value) else reason

    return problem


# Pod hostnames, container/volume names, namespaces.
dns1123_label = _matching(
    _DNS1123_LABEL,
    LABEL_MAX,
    "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit",
)
# Object names such as service accounts, secrets and priority classes.
dns1123_subdomain = _matching(
    _DNS1123_SUBDOMAIN,
    SUBDOMAIN_MAX,
    "must be a DNS-1123 subdomain: lowercase letters, "
    "digits, '-' and '.', starting and ending with a letter or digit",
)
# Service names (the MPIJob name in v2beta1): like DNS-1123 labels but starting with a letter.
dns1035_label = _matching(
    _DNS1035_LABEL,
    LABEL_MAX,
    "must be a DNS-1035 label: lowercase letters, digits and '-', "
    "starting with a letter and ending with a letter or digit",
)
# Label (and nodeSelector) values: empty, or up to 63 of [-_.A-Za-z0-9] with alphanumeric ends.
label_value = _matching(_LABEL_VALUE, LABEL_MAX, f"must be empty or {_ALNUM_ENDS}")


def qualified_name(value: object) -> str | None:
    """Label/annotation keys and resource names: optional DNS-1123 subdomain prefix + "/" + name."""
    if not isinstance(value, str):
        return "must be a string"
    if value.count("/") > 1:
        return "must have at most one '/'"
    prefix, slash, name = value.partition("/") if "/" in value else ("", "", value)
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if problem := dns1123_subdomain(prefix):
            return f"prefix part {problem}"
    if not name:
        return "name part must be non-empty"
    if len(name) > LABEL_MAX:
        return f"name part must be no more than {LABEL_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return f"name part {_ALNUM_ENDS}"
    return None


def annotation_key(value: object) -> str | None:
    """Annotation keys: qualified names, checked lowercased as the API server does."""
    if not isinstance(value, str):
        return "must be a string"
    return qualified_name(value.lower())


def env_var_name(value: object) -> str | None:
    """The portable env var name rule (clusters before RelaxedEnvironmentVariableValidation)."""
    if not isinstance(value, str):
        return "must be a string"
    if not _ENV_VAR_NAME.fullmatch(value):
        return "must consist of letters, digits, '_', '-' or '.', and must not start with a digit"
    if value == "." or value.startswith(".."):
        return "must not be '.' or start with '..'"
    return None


def config_map_key(value: object) -> str | None:
    """Keys of ConfigMaps and Secrets (secretKeyRef.key / configMapKeyRef.key)."""
    if not isinstance(value, str):
        return "must be a string"
    if not value or len(value) > SUBDOMAIN_MAX or not _CONFIG_MAP_KEY.fullmatch(value):
        return f"must be 1-{SUBDOMAIN_MAX} characters of letters, digits, '-', '_' or '.'"
    if value in (".", "..") or value.startswith(".."):
        return "must not be '.' or '..' or start with '..'"
    return None


PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def probe(value: object) -> str | None:
    if not isinstance(value, dict):
        return "must be a mapping (a Probe)"
    if len([h for h in PROBE_HANDLERS if h in value]) != 1:
        return f"must specify exactly one handler of {', '.join(PROBE_HANDLERS)}"
    return None
