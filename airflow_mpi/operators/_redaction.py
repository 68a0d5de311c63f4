"""The manifest as YAML for people to read (task log, offline rendering), secrets masked.

Sensitive-looking values are masked by the model (``models.redaction``: env values, ``--password=`` style
arguments, ``KEY=value`` words, labels/annotations), then Airflow's secrets masker hides every value it knows
(connections, variables marked sensitive). The masker runs on the YAML text: on the dict it stops at a nesting
depth (5) that container commands lie below.
"""

from __future__ import annotations

import yaml

from airflow_mpi.models.redaction import redact_manifest


def redacted_yaml(manifest: dict) -> str:
    text = yaml.safe_dump(redact_manifest(manifest), sort_keys=False)
    try:
        from airflow.providers.common.compat.sdk import redact
    except ImportError:  # pragma: no cover - very old common-compat
        return text
    return str(redact(text))
