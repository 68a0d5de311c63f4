"""Masking secrets in a manifest before it is printed to the task log, and in validation errors (pure: no I/O).

The task log shows the submitted MPIJob, which may carry credentials a DAG author put in plain values: env variables,
``--password=...``/``--token ...`` arguments, ``KEY=value`` arguments, or labels/annotations. Every value whose name
looks sensitive is replaced by ``***``. A container's ``command`` + ``args`` are read as one command line:

- ``--password=x``, ``PASSWORD=x``: the value; ``--password x``, ``--token x``: the next word, even ``-x``;
- short options only where they are a password: ``sshpass -p x`` / ``-px``, ``redis-cli -a x``, ``mysql -px``
  (``_PROGRAM_SECRETS``); elsewhere ``-p`` is a port (ssh, mpirun's ``plm_rsh_args "-p 2222"``) and is kept;
- words that are shell strings (``sh -c "..."``, ``bash -lc '...'``, a whole command line in one word) are scanned
  (shell_scan.py: the words shlex would give, with their places) and the same rules apply inside, at any depth,
  masking where the value is written; what does not parse (an unclosed quote) is read as blank-separated words.

Credentials that carry no name are recognised by their shape, in every string of the manifest: the password of a URL
(``postgres://user:***@host/db``) and the token after ``Bearer``/``Basic`` (``Authorization: Bearer ***``).
References (``valueFrom.secretKeyRef``, ``envFrom``) hold no secret and are kept, so the log still tells where a value
comes from. Values Airflow knows to be secret (connection passwords, masked Variables) are the operator's part
(``operators/redaction.py``), on the raw strings, through ``map_strings``. Validation errors use ``redact_value``,
``redact_string`` and ``names_a_secret`` (errors.py).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.shell_scan import Unparsable, scan, split_on_blanks

MASK = "***"
# Names containing one of these words (case-insensitive, runs of other characters read as "_") hold secrets. It holds
# every name of Airflow's secrets masker (DEFAULT_SENSITIVE_FIELDS, Airflow 2.11 and 3.3) and a few more ("key",
# "auth", "credential"); operators/redaction.py adds the deployment's own ([core] sensitive_var_conn_names).
SENSITIVE_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "private_key",
    "privatekey",
    "api_key",
    "apikey",
    "access_key",
    "accesskey",
    "auth",
    "key",
    "bearer",
    "dsn",
    "proxy",
    "proxies",
    "connection_string",
    "service_account",
    "webhook_url",
)
_extra_words: set[str] = set()
_OPTION = re.compile(r"(--?[A-Za-z0-9_.-]+)=(.*)", re.S)
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)=(.*)", re.S)
# Short options that hold a password only after these programs (and the option stays alone or glued to its value).
# Anywhere else a short option is left alone: "-p" is ssh's port (mpirun's plm_rsh_args "-p 2222", Hydra's
# bootstrap arguments), and mysql's "-p DB" names a database (its password is glued: -pSECRET).
_PROGRAM_SECRETS: dict[
    str, tuple[str, bool]
] = {  # program -> (option, whether the value may be the next word)
    "sshpass": ("-p", True),
    "redis-cli": ("-a", True),
    "mysql": ("-p", False),
    "mysqldump": ("-p", False),
    "mysqladmin": ("-p", False),
    "mariadb": ("-p", False),
}
# What makes a word worth scanning as a shell string (``sh -c "..."``, ``bash -lc '...'``, a whole command line).
_SHELLISH = re.compile(r"[\s;&|'\"]")
_MAX_DEPTH = 4  # shell strings inside shell strings (sh -c "bash -c '...'") are scanned this deep
# Names in error paths (the parameters', Kubernetes') that look sensitive but hold no secret.
SCHEMA_NAMES = frozenset(
    {
        "key",
        "secretKeyRef",
        "configMapKeyRef",
        "fileKeyRef",
        "secretRef",
        "imagePullSecrets",
        "image_pull_secrets",
        "sshAuthMountPath",
        "ssh_auth_mount_path",
        "serviceAccountName",
        "service_account_name",
    }
)
# name: value / "name": "value" (YAML, JSON, an error's snippet of either)
_MAPPING_ENTRY = re.compile(
    r"(?P<head>(?P<quote>[\"']?)(?P<name>[A-Za-z_][\w.-]*)(?P=quote)[ \t]*:[ \t]*)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,{}\[\]]+)"
)
# scheme://user:password@host, any scheme. The password runs to the authority's last "@" (an unencoded "@"
# in a password is common) and stops at whitespace or the start of a path, query or fragment.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#]+(?=@)")
# HTTP authorization schemes whose parameter is the credential itself; quotes end it (``-H "...: Bearer $T"``).
_AUTH_TOKEN = re.compile(r"\b(?P<head>(?:bearer|basic)\s+)[^\s'\"]+", re.I)
# (word, start, end, replacement, inner): word[start:end] is replaced; "inner" edits come from a shell string inside
# the word, the others mask a whole word or what follows its "=" (and the quotes around that go with it).
Edit = tuple[int, int, int, str, bool]


def add_sensitive_words(words: Iterable[str]) -> None:
    """Also treat names containing one of ``words`` as sensitive (Airflow's configured names, from the operators)."""
    _extra_words.update(_normalized(w) for w in words if isinstance(w, str) and w.strip())


def _normalized(name: str) -> str:
    return re.sub(r"\W+", "_", name.strip().lower())  # as Airflow's should_hide_value_for_key


def is_sensitive(name: str) -> bool:
    lowered = _normalized(name).replace("-", "_")
    return any(word in lowered for word in SENSITIVE_WORDS) or any(word in lowered for word in _extra_words)


def _word_edits(words: Sequence[str], operators: Collection[int] = (), depth: int = 0) -> list[Edit]:
    """What to mask in a command's words (exec form, or scanned from a shell string; ``operators`` are the indexes
    of ``;``, ``&&``, ``|``, ... which end a command): the value of ``--password=x`` / ``PASSWORD=x``, the word after
    ``--password`` / ``--token`` (whatever it is, ``-x`` too), the password options of ``_PROGRAM_SECRETS``, and
    inside every word that is a shell string."""
    edits: list[Edit] = []
    mask_next, program = False, None
    for i, word in enumerate(words):
        if i in operators:
            mask_next, program = False, None
            continue
        if mask_next:
            mask_next = False
            edits += [(i, 0, len(word), MASK, False)] if word else []
            continue
        program = _PROGRAM_SECRETS.get(word.rsplit("/", 1)[-1], program)
        match = _OPTION.fullmatch(word) or _ASSIGNMENT.fullmatch(word)
        if match and is_sensitive(match.group(1)):
            edits += [(i, match.end(1) + 1, len(word), MASK, False)] if match.group(2) else []
        elif word.startswith("-") and is_sensitive(word.lstrip("-")):
            mask_next = True
        elif program and word.startswith(program[0]):
            if word == program[0]:
                mask_next = program[1]
            else:
                edits.append((i, len(program[0]), len(word), MASK, False))
            program = None  # one password per program: "sshpass -p x ssh -p 22" keeps ssh's port
        elif depth < _MAX_DEPTH and _SHELLISH.search(word):
            edits += [(i, start, end, text, True) for start, end, text in _shell_edits(word, depth + 1)]
    return edits


def _shell_edits(text: str, depth: int) -> list[tuple[int, int, str]]:
    """``_word_edits`` of a shell string, as spans of ``text`` itself (quotes around a masked value go with it)."""
    try:
        words = scan(text)
    except Unparsable:  # mask what blank-separated words show; no deeper scan of quotes that do not close
        words, depth = split_on_blanks(text), _MAX_DEPTH
    operators = {i for i, w in enumerate(words) if w.operator}
    spans = []
    for i, start, end, replacement, inner in _word_edits([w.text for w in words], operators, depth):
        word = words[i]
        if inner:
            spans.append((word.places[start], word.places[end - 1] + 1, replacement))
        else:
            spans.append((word.start if start == 0 else word.places[start - 1] + 1, word.end, replacement))
    return spans


def _apply(text: str, spans: Iterable[tuple[int, int, str]]) -> str:
    for start, end, replacement in sorted(spans, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def redact_words(words: list[Any]) -> list[Any]:
    """A command's words (exec form: ``command`` + ``args``) with their secrets masked (``_word_edits``)."""
    texts = [w if isinstance(w, str) else "" for w in words]
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for i, start, end, replacement, _ in _word_edits(texts):
        spans.setdefault(i, []).append((start, end, replacement))
    return [_apply(w, spans[i]) if i in spans else w for i, w in enumerate(words)]


def redact_shell(text: str) -> str:
    """A shell string (``login --password hunter2 && run``) with its secrets masked where they are written."""
    return _apply(text, _shell_edits(text, 1))


def redact_text(text: str) -> str:
    """Mask the credentials recognisable by their shape alone (URL passwords, Bearer/Basic tokens).

    They sit in values whose name says nothing (``DATABASE_URL``, ``HEADERS``, a positional argument), so the
    name-based rules cannot see them. Over-masking (``Basic training`` -> ``Basic ***``) only costs log readability;
    the other way round would leak.
    """
    for shape in (_URL_PASSWORD, _AUTH_TOKEN):
        text = shape.sub(lambda m: f"{m.group('head')}{MASK}", text)
    return text


def redact_string(text: str) -> str:
    """Free text (an error's value or reason, a YAML snippet) with every rule that works on text alone applied:
    the shapes (``redact_text``), ``name: value`` entries with a sensitive name, and command lines."""
    text = _MAPPING_ENTRY.sub(
        lambda m: f"{m.group('head')}{MASK}" if is_sensitive(m.group("name")) else m.group(0),
        redact_text(text),
    )
    return redact_shell(text) if _SHELLISH.search(text) else redact_words([text])[0]


def names_a_secret(field: str) -> bool:
    """Whether an error's field path goes through a sensitive-looking name a user chose (``labels.api_token``,
    ``launcher.env.DB_PASSWORD``): then the value is the secret. ``SCHEMA_NAMES`` (``...secretKeyRef.key``) are not."""
    segments = re.sub(r"\[[^\]]*\]", "", field).split(".")
    return any(s not in SCHEMA_NAMES and is_sensitive(s) for s in segments)


def redact_value(value: Any) -> Any:
    """A bad value as an error may show it: strings as ``redact_string``, commands as ``redact_words``, mappings
    with the values of sensitive keys (and of sensitive EnvVars) masked, at any depth."""
    if isinstance(value, str):
        return redact_string(value)
    if isinstance(value, dict):
        env_secret = is_sensitive(str(value.get("name", ""))) and "value" in value
        return {
            k: MASK
            if (k == "value" and env_secret) or (isinstance(k, str) and names_a_secret(k))
            else redact_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):  # the strings read as one command line, whatever else the list holds
        return type(value)(w if isinstance(w, str) else redact_value(w) for w in redact_words(list(value)))
    return value


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
            (func(k) if keys and isinstance(k, str) else k): map_strings(v, func, keys=keys)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [map_strings(item, func, keys=keys) for item in value]
    return value


def _redact_container(container: dict) -> None:
    for env in container.get("env") or []:
        if isinstance(env, dict) and "value" in env and is_sensitive(str(env.get("name", ""))):
            env["value"] = MASK
    command, args = container.get("command"), container.get("args")
    command, args = (v if isinstance(v, list) else [] for v in (command, args))
    words = redact_words(command + args)  # one command line: "sh -c" in command, its script in args
    for field, value in (("command", words[: len(command)]), ("args", words[len(command) :])):
        if isinstance(container.get(field), list):
            container[field] = value


def _redact_metadata(metadata: dict) -> None:
    for field in ("labels", "annotations"):
        values = metadata.get(field)
        if isinstance(values, dict):
            metadata[field] = {k: MASK if is_sensitive(str(k)) else v for k, v in values.items()}


def redact_manifest(manifest: dict) -> dict:
    """A copy of ``manifest`` safe to print (see the module docstring): name-based rules, then ``redact_text``."""
    safe = copy.deepcopy(manifest)
    _redact_metadata(safe.get("metadata") or {})
    kind = kind_or_default(safe.get("apiVersion"))
    for path in kind.container_paths:  # a kind's containers outside replica specs (TrainJob: its trainer)
        node: Any = safe
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            _redact_container(node)
    specs = kind.replica_layout.specs_in(safe)  # its kind's replica specs
    for replica in (specs if isinstance(specs, dict) else {}).values():
        template = (replica or {}).get("template") or {}
        _redact_metadata(template.get("metadata") or {})
        pod_spec = template.get("spec") or {}
        for container in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
            if isinstance(container, dict):
                _redact_container(container)
    return map_strings(safe, redact_text)
