from __future__ import annotations

import copy
import shlex

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from airflow_mpi.jobspec.redaction import MASK, map_strings, redact_manifest, redact_shell, redact_words
from airflow_mpi.jobspec.shell_scan import scan


def manifest(container: dict, metadata: dict | None = None) -> dict:
    return {
        "metadata": {
            "name": "j",
            "labels": {"team": "hpc"},
            "annotations": {"vault-token": "s.abc", "owner": "me"},
            **(metadata or {}),
        },
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {
                    "template": {
                        "metadata": {"annotations": {"api_key": "k1"}},
                        "spec": {"containers": [container]},
                    }
                },
                "Worker": {
                    "template": {
                        "spec": {
                            "containers": [{"name": "w", "env": [{"name": "DB_PASSWORD", "value": "pw"}]}],
                            "initContainers": [{"name": "i", "args": ["--secret=s3"]}],
                        }
                    }
                },
            }
        },
    }


def test_plain_secret_values_are_masked_everywhere_references_are_kept():
    container = {
        "name": "launcher",
        "env": [
            {"name": "AWS_SECRET_ACCESS_KEY", "value": "abc"},
            {"name": "EPOCHS", "value": "3"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        ],
        "command": [
            "mpirun",
            "-np",
            "4",
            "python",
            "train.py",
            "--password=hunter2",
            "--token",
            "t0k",
            "--lr",
            "0.1",
            "WANDB_API_KEY=w4ndb",
            "BATCH=8",
        ],
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
    assert launcher["command"] == [
        "mpirun",
        "-np",
        "4",
        "python",
        "train.py",
        f"--password={MASK}",
        "--token",
        MASK,
        "--lr",
        "0.1",
        f"WANDB_API_KEY={MASK}",
        "BATCH=8",
    ]
    assert launcher["args"] == [f"sh -c 'login --password={MASK} && run --epochs=2'"]
    assert safe["metadata"]["annotations"] == {"vault-token": MASK, "owner": "me"}
    assert safe["metadata"]["labels"] == {"team": "hpc"}


def test_url_passwords_and_bearer_basic_tokens_are_masked_in_every_string_by_their_shape():
    container = {
        "name": "launcher",
        "env": [
            {"name": "DATABASE_URL", "value": "postgres://user:pw@db.example.com:5432/app"},
            {
                "name": "BROKER",
                "value": "amqp+ssl://:p@ss:w0rd@mq/vhost",
            },  # empty user, unencoded "@" and ":"
            {"name": "HEADERS", "value": "Authorization: Bearer abc.def-ghi"},
            {"name": "UPSTREAM", "value": "https://example.com:8080/path?next=a@b"},
        ],
        "command": ["curl", "-H", "authorization: BASIC dXNlcjpwdw==", "s3+https://k:s3cr3t@store/bucket"],
        "args": ["sh -c 'curl -H \"Authorization: bearer $T0K\" redis://default:r3d1s@cache:6379/0 && run'"],
    }
    safe = redact_manifest(manifest(container, {"annotations": {"webhook": "Bearer xyz"}}))
    launcher = safe["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert [env["value"] for env in launcher["env"]] == [
        f"postgres://user:{MASK}@db.example.com:5432/app",
        f"amqp+ssl://:{MASK}@mq/vhost",
        f"Authorization: Bearer {MASK}",
        "https://example.com:8080/path?next=a@b",  # no credentials: kept
    ]
    assert launcher["command"] == [
        "curl",
        "-H",
        f"authorization: BASIC {MASK}",
        f"s3+https://k:{MASK}@store/bucket",
    ]
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


def container_of(safe: dict) -> dict:
    return safe["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "words, expected",
    [
        # separate values inside sh -c / bash -lc strings (only name=value was masked there)
        (
            ["sh", "-c", "login --password hunter2 --token abc && run --epochs 2"],
            ["sh", "-c", f"login --password {MASK} --token {MASK} && run --epochs 2"],
        ),
        (
            ["bash", "-lc", "run --api-key 'two words' TOKEN=\"x y\" --lr=0.1"],
            ["bash", "-lc", f"run --api-key {MASK} TOKEN={MASK} --lr=0.1"],
        ),
        (["sh -c 'login --password hunter2; run'"], [f"sh -c 'login --password {MASK}; run'"]),
        (
            ["sh", "-c", "bash -c 'inner --token t0k && x' && y"],
            ["sh", "-c", f"bash -c 'inner --token {MASK} && x' && y"],
        ),
        # a value that starts with "-" is a value
        (["train", "--password", "-s3cr3t-", "--lr", "1"], ["train", "--password", MASK, "--lr", "1"]),
        (["sh", "-c", "train --token -abc --lr 1"], ["sh", "-c", f"train --token {MASK} --lr 1"]),
        # short options: a password only after the programs that read one there
        (
            ["sshpass", "-p", "s3cr3t", "ssh", "-p", "2222", "host"],
            ["sshpass", "-p", MASK, "ssh", "-p", "2222", "host"],
        ),
        (["sh", "-c", "sshpass -ps3cr3t scp -P 22 a b"], ["sh", "-c", f"sshpass -p{MASK} scp -P 22 a b"]),
        (["mysql", "-uroot", "-ps3cr3t", "-p", "db"], ["mysql", "-uroot", f"-p{MASK}", "-p", "db"]),
        (["redis-cli", "-a", "s3cr3t", "ping"], ["redis-cli", "-a", MASK, "ping"]),
        # ...and nowhere else: mpirun's ssh port, a bare -p
        (
            ["mpirun", "-mca", "plm_rsh_args", "-p 2222", "python", "t.py", "-p", "8"],
            ["mpirun", "-mca", "plm_rsh_args", "-p 2222", "python", "t.py", "-p", "8"],
        ),
        # quotes around a masked value go with it; what does not parse is masked word by word
        (["sh", "-c", 'login --password="a b" && run'], ["sh", "-c", f"login --password={MASK} && run"]),
        (["sh", "-c", "echo 'unclosed --token abc"], ["sh", "-c", f"echo 'unclosed --token {MASK}"]),
        (
            ["sh", "-c", 'exec "$0" -localhost "$(hostname -i)" "$@"'],
            ["sh", "-c", 'exec "$0" -localhost "$(hostname -i)" "$@"'],
        ),
    ],
)
def test_sensitive_options_with_separate_values_and_shell_strings(words, expected):
    assert redact_words(words) == expected


def test_a_shell_script_in_args_after_sh_c_in_command_is_one_command_line():
    container = {
        "name": "l",
        "command": ["sh", "-c", "--"],
        "args": ["run --password hunter2", "--token"],
        "env": [],
    }
    container["args"].append("-t0k")
    safe = container_of(redact_manifest(manifest(container)))
    assert safe["command"] == ["sh", "-c", "--"]
    assert safe["args"] == [f"run --password {MASK}", "--token", MASK]


# Secrets with quotes, blanks, shell operators and a leading "-"; "Zq" marks them so a leak of any part shows.
SECRETS = st.text(st.sampled_from("abc-XYZ019 '\"\\$;&|()<>=\t\n"), max_size=12).map(lambda t: "Zq" + t)
FLAGS = st.sampled_from(["--password", "--token", "--api-key", "-password", "--db-secret"])


@given(secret=SECRETS, flag=FLAGS, glued=st.booleans(), nesting=st.integers(0, 2))
@example(secret="Zq-x", flag="--password", glued=False, nesting=1)
@example(secret="Zq'; echo", flag="--token", glued=False, nesting=2)
def test_a_secret_after_a_sensitive_option_appears_nowhere_however_it_is_quoted(secret, flag, glued, nesting):
    words = ["train.py", f"{flag}={secret}"] if glued else ["train.py", flag, secret]
    words += ["--epochs", "2"]
    for _ in range(nesting):  # exec form, then sh -c '...', then bash -lc "sh -c '...'"
        words = ["sh", "-c", shlex.join(words)]
    safe = container_of(redact_manifest(manifest({"name": "l", "command": words})))
    assert not [w for w in safe["command"] if "Zq" in w], safe["command"]
    assert "--epochs" in " ".join(safe["command"])


@given(st.lists(st.text(max_size=8), max_size=6))
def test_the_scanner_reads_the_words_shlex_join_wrote(words):
    assert [w.text for w in scan(shlex.join(words))] == words


PLAIN_WORDS = [
    "python",
    "train.py",
    "--epochs",
    "2",
    "-np",
    "4",
    "--lr=0.1",
    "-p",
    "2222",
    "ssh",
    "BATCH=8",
    "sh -c 'run --epochs 2 && echo done'",
    "-x",
    "PATH",
    "mpirun",
]


@given(st.lists(st.sampled_from(PLAIN_WORDS), max_size=8))
def test_commands_without_sensitive_names_are_left_as_they_are(words):
    assert redact_words(words) == words
    assert redact_shell(shlex.join(words)) == shlex.join(words)
