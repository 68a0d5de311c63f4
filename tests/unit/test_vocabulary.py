"""Each Kubeflow/Kubernetes name the package uses is written once (jobspec/vocabulary.py, the config volume in
jobspec/spec.py, the finish actions in operators/finish_action.py): a raw "launcher", "Suspended" or "MPIJob"
anywhere else in the code fails here, so a new comparison imports the name instead of spelling it again.

Docstrings are prose and not scanned; the few other places where such a word is not the name are listed in
ALLOWED with their count and why.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import airflow_mpi
from airflow_mpi.jobspec import vocabulary
from airflow_mpi.jobspec.spec import CONFIG_VOLUME
from airflow_mpi.operators.finish_action import ALIASES, OnFinishAction

PACKAGE = Path(airflow_mpi.__file__).parent
DEFINITIONS = {"jobspec/vocabulary.py", "operators/finish_action.py"}  # every name there is a definition
# Written by airflow_mpi/signature_writer.py from the field table (their defaults are the rows' values, spelled out
# for type checkers); tests/unit/operators/test_signatures.py fails when they differ from the table
GENERATED = {"jobspec/spec_classes.py", "operators/signatures.py"}

NAMES = {
    *(value for name, value in vars(vocabulary).items() if name.isupper() and isinstance(value, str)),
    *vocabulary.PodPhase,
    *vocabulary.JobCondition,
    CONFIG_VOLUME,
    *OnFinishAction,
    *ALIASES,
}

# (module, text) -> (occurrences, why the text there is not the name)
ALLOWED = {
    ("jobspec/spec.py", CONFIG_VOLUME): (1, "its definition, beside the mount path of the same volume"),
    ("jobspec/spec.py", vocabulary.PodPhase.RUNNING): (1, "CLEAN_RUNNING, the cleanPodPolicy value"),
    ("jobspec/fields.py", vocabulary.LAUNCHER): (1, "the launcher parameter's row in the field table"),
    ("jobspec/fields.py", vocabulary.WORKER): (1, "the worker parameter's row in the field table"),
    ("jobspec/status.py", vocabulary.PodPhase.PENDING): (1, "how a job with no condition yet is described"),
    ("wait/progress.py", vocabulary.PodPhase.FAILED): (1, "searched for in event reasons (FailedScheduling)"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))),
    ]
    return {
        id(body[0].value)
        for n in nodes
        if (body := getattr(n, "body", None))
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }


def _literals(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    prose = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in NAMES
        and id(node) not in prose
    ]


def _found() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module in DEFINITIONS | GENERATED:
            continue
        for line, text in _literals(path.read_text()):
            found.setdefault((module, text), []).append(line)
    return found


def test_the_names_are_the_ones_the_issue_lists():
    assert {
        "MPIJob",
        "mpijobs",
        "kubeflow.org",
        "launcher",
        "worker",
        "Launcher",
        "Worker",
        "Suspended",
        "Pending",
        "Unknown",
        "training.kubeflow.org/job-role",
        "mpi-job-config",
        "keep_pod",
    } <= NAMES


def test_no_name_is_written_outside_its_definition():
    found = _found()
    stray = {
        f"{module}:{lines} {text!r}"
        for (module, text), lines in found.items()
        if len(lines) != ALLOWED.get((module, text), (0, ""))[0]
    }
    assert not stray, "import these from jobspec/vocabulary.py (or list the prose in ALLOWED): " + ", ".join(
        sorted(stray)
    )


def test_the_scan_finds_a_raw_name_and_skips_docstrings():
    source = '"""A launcher."""\n\n\ndef f(pod):\n    """The worker."""\n    return pod.role == "launcher"\n'
    assert _literals(source) == [(6, "launcher")]
    source = 'x = {"Suspended": 1}\ny = phase in ("Pending", "Failed")\n'
    counts = Counter(text for _, text in _literals(source))
    assert counts == {"Suspended": 1, "Pending": 1, "Failed": 1}


def test_each_allowance_is_still_needed():
    found = _found()
    assert {key: len(found.get(key, [])) for key in ALLOWED} == {key: n for key, (n, _) in ALLOWED.items()}
