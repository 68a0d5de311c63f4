"""The manifest the operators print ("MPIJob manifest:"): Airflow-masked values are hidden whatever their characters.

A masked value is replaced while it is still raw, before YAML escapes it. The check: the dumped YAML loaded
back (which undoes YAML's escapes) holds it in no string, keys included. The text itself can hold a masked
value only by YAML's own syntax (a secret "name: j" is a key and its value, not a value): the Airflow log
handlers mask the logged line as text on top of this.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from airflow.providers.common.compat.sdk import mask_secret, redact
from hypothesis import assume, example, given
from hypothesis import strategies as st

from airflow_mpi.jobspec import redaction
from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.redaction import MASK
from airflow_mpi.operators.redaction import airflow_sensitive_names, redacted_yaml

GRUEN = "Grün\tgeheim-ß"


@contextmanager
def masked(secret: str) -> Iterator[None]:
    """``secret`` known to Airflow's masker for the block only: the masker is process-wide, other tests share it."""
    masker = sys.modules[redact.__module__]._secrets_masker()
    patterns, replacer = set(masker.patterns), masker.replacer
    mask_secret(secret)
    try:
        yield
    finally:
        masker.patterns, masker.replacer = patterns, replacer


def carrying(secret: str) -> dict:
    """A manifest with ``secret`` in an env value, arguments (alone, as an option, in a shell string) and metadata."""
    container = {
        "name": "launcher",
        "env": [
            {"name": "GREETING", "value": secret},
            {"name": "EPOCHS", "value": "3"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        ],
        "command": ["mpirun", "-np", "2", "python", "train.py", secret, f"--greeting={secret}"],
        "args": [f"sh -c 'echo {secret} && run'"],
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {
            "name": "j",
            "labels": {"team": secret},
            "annotations": {"note": secret, f"x/{secret}": "k"},
        },
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [container]}}}
            }
        },
    }


def strings(value: Any) -> Iterator[str]:
    """Every string in a loaded YAML document, mapping keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def assert_hidden(secret: str, text: str) -> Any:
    """``text`` loaded back, after checking that ``secret`` is in none of its strings."""
    loaded = yaml.safe_load(text)
    assert not [s for s in strings(loaded) if secret in s]
    return loaded


def test_a_masked_value_with_non_ascii_characters_and_a_tab_is_hidden_in_values_args_and_metadata():
    with masked(GRUEN):
        text = redacted_yaml(carrying(GRUEN))
    loaded = assert_hidden(GRUEN, text)
    assert "geheim" not in text  # neither raw nor escaped ("Gr\\xFCn\\tgeheim-\\xDF")
    container = loaded["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert container["env"][:2] == [{"name": "GREETING", "value": MASK}, {"name": "EPOCHS", "value": "3"}]
    assert container["env"][2]["valueFrom"] == {
        "secretKeyRef": {"name": "hf", "key": "token"}
    }  # a reference: kept
    assert container["command"] == ["mpirun", "-np", "2", "python", "train.py", MASK, f"--greeting={MASK}"]
    assert container["args"] == [f"sh -c 'echo {MASK} && run'"]
    assert loaded["metadata"]["annotations"] == {"note": MASK, f"x/{MASK}": "k"}
    assert loaded["metadata"]["labels"] == {"team": MASK}


def test_url_credentials_and_bearer_tokens_are_masked_in_the_printed_manifest():
    job = carrying("plain")
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["env"] += [
        {"name": "DATABASE_URL", "value": "postgres://user:pw-ünïcode@host/db"},
        {"name": "HEADERS", "value": "Authorization: Bearer tök\ten"},
    ]
    text = redacted_yaml(job)
    loaded = assert_hidden("tök", text)
    assert "pw-" not in text and "t\\xF6k" not in text
    env = loaded["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["env"]
    assert env[-2:] == [
        {"name": "DATABASE_URL", "value": f"postgres://user:{MASK}@host/db"},
        {"name": "HEADERS", "value": f"Authorization: Bearer {MASK}\ten"},
    ]


# Printable, non-ASCII, control and line-break characters; "*" is left out: a secret with a "*" run can be
# rebuilt from the mask itself (Airflow's masker has the same limit).
CHARACTERS = st.characters(blacklist_categories=("Cs",), blacklist_characters="*") | st.sampled_from(
    "üßé€😀\t\n\r\x00\x07\x1b\x7f\x85\u2028\ufeff \"'\\:#-=&!%@{}[]"
)


@given(secret=st.text(CHARACTERS, min_size=5, max_size=24))
@example(secret=GRUEN)
@example(secret="  \t  ")
@example(secret="name: j")
def test_any_masked_text_appears_nowhere_in_the_printed_manifest(secret: str):
    assume(secret.lower() != "airflow")  # the one value Airflow's masker refuses to mask
    with masked(secret):
        text = redacted_yaml(carrying(secret))
    assert_hidden(secret, text)


def test_every_name_airflows_masker_hides_is_sensitive_to_the_model_too():
    """The model's list must hold the installed Airflow's DEFAULT_SENSITIVE_FIELDS (it gained dsn, proxy, ...)."""
    defaults = sys.modules[redact.__module__].DEFAULT_SENSITIVE_FIELDS
    assert [name for name in defaults if not any(word in name for word in redaction.SENSITIVE_WORDS)] == []


def test_a_name_the_deployment_declares_sensitive_is_masked_in_the_manifest_and_in_errors(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__SENSITIVE_VAR_CONN_NAMES", "corp_cred, other")
    monkeypatch.setattr(redaction, "_extra_words", set(redaction._extra_words))
    assert {"corp_cred", "other", "password"} <= airflow_sensitive_names()
    redaction.add_sensitive_words(airflow_sensitive_names())
    job = carrying("plain")
    container = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "CORP_CRED_A", "value": "c0rp"})
    container["command"] += ["--corp-cred", "c0rp2"]
    text = redacted_yaml(job)
    assert "c0rp" not in text
    error = MPIJobValidationError("labels.corp_cred", "c0rp bad", "invalid label value")
    assert str(error) == "labels.corp_cred='***': invalid label value"
