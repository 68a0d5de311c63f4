"""Masking secrets in a manifest before it is printed to the task log (pure: no I/O).

The task log shows the submitted MPIJob, which may carry credentials a DAG author put in plain values: env variables,
``--password=...``/``--token ...`` arguments, ``KEY=value`` arguments, or labels/annotations. Every value whose name
looks sensitive is replaced by ``***``. Credentials that carry no name are recognised by their shape, in every string
of the manifest: the password of a URL (``postgres://user:***@host/db``) and the token after ``Bearer``/``Basic``
(``Authorization: Bearer ***``). References (``valueFrom.secretKeyRef``, ``envFrom``) hold no secret and are kept, so
the log still tells where a value comes from. Values Airflow knows to be secret (connection passwords, masked
Variables) are the operator's part (``operators/redaction.py``), on the raw strings, through ``map_strings``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

MASK = "***"
# Names containing one of these words (case-insensitive) hold secrets; Airflow's masker uses a similar list.
SENSITIVE_WORDS = (
    "password", "passwd", "passphrase", "secret", "token", "credential", "private_key", "privatekey",
    "api_key", "apikey", "access_key", "accesskey", "auth", "key",
)
_OPTION = re.compile(r"^(--?[A-Za-z0-9_.-]+)=(.*)$", re.S)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.S)
# scheme://user:password@host, any scheme. The password runs to the authority's last "@" (an unencoded "@"
# in a password is common) and stops at whitespace or the start of a path, query or fragment.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#]+(?=@)")
# HTTP authorization schemes whose parameter is the credential itself; quotes end it (``-H "...: Bearer $T"``).
_AUTH_TOKEN = re.compile(r"\b(?P<head>(?:bearer|basic)\s+)[^\s'\"]+", re.I)


def is_sensitive(name: str) -> bool:
    lowered = name.lower().replace("-", "_")
    return any(word in lowered for word in SENSITIVE_WORDS)


def _redact_words(words: list[Any]) -> list[Any]:
    """``--password=x`` / ``PASSWORD=x`` / ``--token x`` -> the value masked."""
    out: list[Any] = []
    mask_next = False
    for word in words:
        if not isinstance(word, str):
            out.append(word)
            continue
        if mask_next and not word.startswith("-"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        match = _OPTION.match(word) or _ASSIGNMENT.match(word)
        if match and is_sensitive(match.group(1)):
            out.append(f"{match.group(1)}={MASK}")
        elif word.startswith("-") and is_sensitive(word.lstrip("-")):
            out.append(word)
            mask_next = True
        else:
            out.append(_redact_inline(word))
    return out


def _redact_inline(text: str) -> str:
    """Inside a shell string (``sh -c "... --password=x ..."``), mask ``name=value`` pairs with sensitive names."""
    return re.sub(
        r"(?P<name>--?[A-Za-z0-9_.-]+|\b[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>\"[^\"]*\"|'[^']*'|\S+)",
        lambda m: f"{m.group('name')}={MASK}" if is_sensitive(m.group("name").lstrip("-")) else m.group(0),
        text,
    )


def redact_text(text: str) -> str:
    """Mask the credentials recognisable by their shape alone (URL passwords, Bearer/Basic tokens).

    They sit in values whose name says nothing (``DATABASE_URL``, ``HEADERS``, a positional argument), so the
    name-based rules cannot see them. Over-masking (``Basic training`` -> ``Basic ***``) only costs log readability;
    the other way round would leak.
    """
    for shape in (_URL_PASSWORD, _AUTH_TOKEN):
        text = shape.sub(lambda m: f"{m.group('head')}{MASK}", text)
    return text


def map_strings(value: Any, func: Callable[[str], str], *, keys: bool = False) -> Any:
    """A copy of the JSON-like ``value`` with ``func`` applied to every string in it (mapping keys too if ``keys``).

    Masking works on the strings themselves, before any serialisation: once YAML has escaped a value
    (``"Gr\\xFCn\\t..."``), no text search for the raw secret matches it any more. Mappings are walked to any depth
    (Airflow's own ``redact`` stops at depth 5, above the containers' commands). Two keys that ``func`` maps to the
    same string collapse into one, the later value kept: fine for a log.
    """
    if isinstance(value, str):
        return func(value)
    if isinstance(value, dict):
        return {
            (func(k) if keys and isinstance(k, str) else k): map_strings(v, func, keys=keys) for k, v in value.items()
        }
    if isinstance(value, list):
        return [map_strings(item, func, keys=keys) for item in value]
    return value


def _redact_container(container: dict) -> None:
    for env in container.get("env") or []:
        if isinstance(env, dict) and "value" in env and is_sensitive(str(env.get("name", ""))):
            env["value"] = MASK
    for field in ("command", "args"):
        if isinstance(container.get(field), list):
            container[field] = _redact_words(container[field])


def _redact_metadata(metadata: dict) -> None:
    for field in ("labels", "annotations"):
        values = metadata.get(field)
        if isinstance(values, dict):
            metadata[field] = {k: MASK if is_sensitive(str(k)) else v for k, v in values.items()}


def redact_manifest(manifest: dict) -> dict:
    """A copy of ``manifest`` safe to print (see the module docstring): name-based rules, then ``redact_text``."""
    safe = copy.deepcopy(manifest)
    _redact_metadata(safe.get("metadata") or {})
    for replica in ((safe.get("spec") or {}).get("mpiReplicaSpecs") or {}).values():
        template = (replica or {}).get("template") or {}
        _redact_metadata(template.get("metadata") or {})
        pod_spec = template.get("spec") or {}
        for container in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
            if isinstance(container, dict):
                _redact_container(container)
    return map_strings(safe, redact_text)
