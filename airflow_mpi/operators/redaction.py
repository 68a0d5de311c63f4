"""The manifest as YAML for people to read (task log, offline rendering), secrets masked.

Airflow's secrets masker first hides every value it knows (connections, variables marked sensitive) in each string of
the manifest, keys included, while the strings are still raw; then the model (``jobspec/redaction.py``) masks what
looks sensitive (env values, ``--password=`` style arguments, ``KEY=value`` words, labels/annotations, URL passwords,
Bearer/Basic tokens); only then is the result dumped. Masking the dumped text instead misses every secret YAML escapes
(a tab or a non-ASCII character: ``"Gr\\xFCn\\t..."``), and masking the dict with ``redact(dict)`` stops at a nesting
depth (5) that container commands lie below. The masker runs first so that a masked value is matched whole, before a
model rule rewrites part of it.

The model's notion of a sensitive name is Airflow's too: importing this module adds the names of the installed
masker (``DEFAULT_SENSITIVE_FIELDS``) and the deployment's ``[core] sensitive_var_conn_names`` to it, so a name the
deployment declared sensitive is masked in the printed manifest and in validation errors alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import yaml

from airflow_mpi.jobspec.redaction import add_sensitive_words, map_strings, redact_manifest
from airflow_mpi.version_compat import conf


def _airflow_masker() -> Callable[[str], str]:
    """Airflow's ``redact`` for one string (no key name: references such as ``secretKeyRef.key`` are kept)."""
    try:
        from airflow.providers.common.compat.sdk import redact
    except ImportError:  # pragma: no cover - very old common-compat
        return str
    return lambda text: str(redact(text))


def airflow_sensitive_names() -> set[str]:
    """The names Airflow's secrets masker hides values of: its defaults and ``[core] sensitive_var_conn_names``."""
    try:
        from airflow.providers.common.compat.sdk import redact
    except ImportError:  # pragma: no cover - very old common-compat
        defaults: set[str] = set()
    else:
        defaults = set(getattr(sys.modules[redact.__module__], "DEFAULT_SENSITIVE_FIELDS", ()))
    configured = conf.get("core", "sensitive_var_conn_names", fallback="") or ""
    return defaults | {name.strip() for name in configured.split(",") if name.strip()}


add_sensitive_words(airflow_sensitive_names())


def redacted_yaml(manifest: dict) -> str:
    """``manifest`` as YAML with Airflow-known secrets, then sensitive-looking values, masked (module docstring)."""
    masked = map_strings(manifest, _airflow_masker(), keys=True)
    return yaml.safe_dump(redact_manifest(masked), sort_keys=False)
