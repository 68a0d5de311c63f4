from __future__ import annotations

import copy

from airflow_mpi.jobspec.redaction import MASK, map_strings, redact_manifest


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


def test_url_passwords_and_bearer_basic_tokens_are_masked_in_every_string_by_their_shape():
    container = {
        "name": "launcher",
        "env": [{"name": "DATABASE_URL", "value": "postgres://user:pw@db.example.com:5432/app"},
                {"name": "BROKER", "value": "amqp+ssl://:p@ss:w0rd@mq/vhost"},  # empty user, unencoded "@" and ":"
                {"name": "HEADERS", "value": "Authorization: Bearer abc.def-ghi"},
                {"name": "UPSTREAM", "value": "https://example.com:8080/path?next=a@b"}],
        "command": ["curl", "-H", "authorization: BASIC dXNlcjpwdw==", "s3+https://k:s3cr3t@store/bucket"],
        "args": ["sh -c 'curl -H \"Authorization: bearer $T0K\" redis://default:r3d1s@cache:6379/0 && run'"],
    }
    safe = redact_manifest(manifest(container, {"annotations": {"webhook": "Bearer xyz"}}))
    launcher = safe["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert [env["value"] for env in launcher["env"]] == [
        f"postgres://user:{MASK}@db.example.com:5432/app", f"amqp+ssl://:{MASK}@mq/vhost",
        f"Authorization: Bearer {MASK}", "https://example.com:8080/path?next=a@b",  # no credentials: kept
    ]
    assert launcher["command"] == ["curl", "-H", f"authorization: BASIC {MASK}", f"s3+https://k:{MASK}@store/bucket"]
    assert launcher["args"] == [
        f"sh -c 'curl -H \"Authorization: bearer {MASK}\" redis://default:{MASK}@cache:6379/0 && run'"
    ]
    assert safe["metadata"]["annotations"]["webhook"] == f"Bearer {MASK}"
    assert safe["metadata"]["name"] == "j" and safe["metadata"]["labels"] == {"team": "hpc"}


def test_map_strings_copies_and_reaches_any_depth_keys_only_on_request():
    deep: dict = {"a": [{"b": {"c": {"d": {"e": {"f": ["x", 1, None, {"g": "y"}]}}}}}]}
    upper = map_strings(deep, str.upper)
    assert upper == {"a": [{"b": {"c": {"d": {"e": {"f": ["X", 1, None, {"g": "Y"}]}}}}}]}
    assert deep["a"][0]["b"]["c"]["d"]["e"]["f"][0] == "x"  # the input is left alone
    assert map_strings({"k": "v", 1: "w"}, str.upper, keys=True) == {"K": "V", 1: "W"}
