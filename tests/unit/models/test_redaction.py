from __future__ import annotations

import copy

from airflow_mpi.models.redaction import MASK, redact_manifest


def manifest(container: dict, metadata: dict | None = None) -> dict:
    return {
        "metadata": {"name": "j", "labels": {"team": "hpc"}, "annotations": {"vault-token": "s.abc", "owner": "me"},
                     **(metadata or {})},
        "spec": {"mpiReplicaSpecs": {
            "Launcher": {"template": {"metadata": {"annotations": {"api_key": "k1"}}, "spec": {"containers": [container]}}},
            "Worker": {"template": {"spec": {"containers": [{"name": "w", "env": [{"name": "DB_PASSWORD", "value": "pw"}]}],
                                             "initContainers": [{"name": "i", "args": ["--secret=s3"]}]}}},
        }},
    }


def test_plain_secret_values_are_masked_everywhere_references_are_kept():
    container = {
        "name": "launcher",
        "env": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "abc"}, {"name": "EPOCHS", "value": "3"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
        "command": ["mpirun", "-np", "4", "python", "train.py", "--password=hunter2", "--token", "t0k", "--lr", "0.1",
                    "WANDB_API_KEY=w4ndb", "BATCH=8"],
        "args": ["sh -c 'login --password=hunter3 && run --epochs=2'"],
    }
    original = manifest(container)
    before = copy.deepcopy(original)
    safe = redact_manifest(original)
    assert original == before  # a copy is redacted
    text = repr(safe)
    for secret in ("abc", "pw", "s3", "hunter2", "hunter3", "t0k", "w4ndb", "s.abc", "k1"):
        assert f"'{secret}'" not in text and f"={secret}" not in text, secret
    launcher = safe["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["env"][1] == {"name": "EPOCHS", "value": "3"}
    assert launcher["env"][2]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert launcher["command"] == ["mpirun", "-np", "4", "python", "train.py", f"--password={MASK}", "--token", MASK,
                                   "--lr", "0.1", f"WANDB_API_KEY={MASK}", "BATCH=8"]
    assert launcher["args"] == [f"sh -c 'login --password={MASK} && run --epochs=2'"]
    assert safe["metadata"]["annotations"] == {"vault-token": MASK, "owner": "me"}
    assert safe["metadata"]["labels"] == {"team": "hpc"}
