"""The manifest as YAML for people to read (task log, offline rendering), secrets masked.

Environment values whose names look secret are masked, then Airflow's secrets masker hides
every value it knows (connections, variables marked sensitive).
"""

from __future__ import annotations

import copy

import yaml

SENSITIVE_ENV_WORDS = ("PASSWORD", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "PASSWD")


def redacted_yaml(manifest: dict) -> str:
    safe = copy.deepcopy(manifest)
    for replica in (safe.get("spec", {}).get("mpiReplicaSpecs") or {}).values():
        for container in (replica.get("template", {}).get("spec", {}).get("containers") or []):
            for env in container.get("env") or []:
                if "value" in env and any(w in str(env.get("name", "")).upper() for w in SENSITIVE_ENV_WORDS):
                    env["value"] = "***"
    try:
        from airflow.providers.common.compat.sdk import redact

        safe = redact(safe)
    except ImportError:  # pragma: no cover - very old common-compat
        pass
    return yaml.safe_dump(safe, sort_keys=False)
