"""Masking secrets in a manifest before it is printed to the task log (pure: no I/O).

The task log shows the submitted MPIJob, which may carry credentials a DAG author put in plain
values: env variables, ``--password=...``/``--token ...`` arguments, ``KEY=value`` arguments, or
labels/annotations. Every value whose name looks sensitive is replaced by ``***``. References
(``valueFrom.secretKeyRef``, ``envFrom``) hold no secret and are kept, so the log still tells where a
value comes from. The operator also runs Airflow's own masker afterwards, which hides values Airflow
knows to be secret (connection passwords, masked Variables) wherever they appear.
"""

from __future__ import annotations

import copy
import re
from typing import Any

MASK = "***"
# Names containing one of these words (case-insensitive) hold secrets; Airflow's masker uses a similar list.
SENSITIVE_WORDS = (
    "password", "passwd", "passphrase", "secret", "token", "credential", "private_key", "privatekey",
    "api_key", "apikey", "access_key", "accesskey", "auth", "key",
)
_OPTION = re.compile(r"^(--?[A-Za-z0-9_.-]+)=(.*)$", re.S)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.S)


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
    """A copy of ``manifest`` safe to print (see the module docstring)."""
    safe = copy.deepcopy(manifest)
    _redact_metadata(safe.get("metadata") or {})
    for replica in ((safe.get("spec") or {}).get("mpiReplicaSpecs") or {}).values():
        template = (replica or {}).get("template") or {}
        _redact_metadata(template.get("metadata") or {})
        pod_spec = template.get("spec") or {}
        for container in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
            if isinstance(container, dict):
                _redact_container(container)
    return safe
