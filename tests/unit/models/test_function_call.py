"""@task.mpi's model: what is checked before submission, the ranks' command, and rank 0's result lines.

The ranks' program (models/rank_runner.py) runs for real here, in a subprocess of this interpreter with the
environment an MPI launcher gives a rank: what its output says is what the launcher's log will say.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import types

import pytest

from airflow_mpi.models import Mpirun, MPIJobValidationError
from airflow_mpi.models.errors import ErrorList
from airflow_mpi.models.function_call import (
    BOOTSTRAP,
    MAX_CALL_BYTES,
    check_function,
    check_source,
    decode_call,
    pickle_arguments,
    rank_command,
)
from airflow_mpi.models.rank_result import hide_result_lines, parse_result
from airflow_mpi.models.rank_runner import MARKER

SOURCE = """\
def work(values, scale=1):
    import os
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["PMI_RANK"])
    print("rank", rank, "got", values)
    if values == "boom":
        raise RuntimeError("rank %d failed" % rank)
    if values == "exit":
        raise SystemExit(3)
    if values == "set":
        return {1, 2}
    return {"rank": rank, "total": sum(values) * scale, "text": "x" * 3000}
"""


def run_rank(rank: int, *args, variable: str = "OMPI_COMM_WORLD_RANK", **kwargs) -> subprocess.CompletedProcess:
    errors = ErrorList()
    argv = rank_command(SOURCE, "work", pickle_arguments(errors, args, kwargs), python=sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK")}
    return subprocess.run(argv, env={**env, variable: str(rank)}, capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------- before submission
def closure_maker():
    factor = 2

    def scaled(x):
        return x * factor

    return scaled


MODULE_CONSTANT = 7


def uses_module_name(x):
    return x + MODULE_CONSTANT


def self_contained(x):
    import json

    def inner(y):
        return len(json.dumps(y))

    return inner(x) + len([1]) + self_contained.__name__.count("s")


async def coroutine(x):
    return x


@pytest.mark.parametrize(
    ("func", "reason"),
    [
        (lambda x: x, "is a lambda"),
        (closure_maker(), "uses variables of an enclosing function (factor)"),
        (uses_module_name, "uses names of its module (MODULE_CONSTANT)"),
        (coroutine, "is a coroutine function"),
        (len, "is not a Python function"),
    ],
)
def test_functions_that_cannot_travel_as_source_are_refused_with_the_reason(func, reason):
    assert any(reason in r for r in check_function(func, "@task.mpi")), check_function(func, "@task.mpi")


def test_a_self_contained_function_passes_builtins_imports_inner_functions_and_recursion_allowed():
    assert check_function(self_contained, "@task.mpi") == []


def test_source_must_compile_and_define_the_function():
    assert check_source(SOURCE, "work") is None
    assert "does not define a function 'other'" in check_source(SOURCE, "other")
    assert "does not compile" in check_source("def work(:\n", "work")


class LocalClass:  # a class of "the DAG file": the ranks cannot import it
    pass


def test_arguments_that_cannot_be_pickled_or_need_the_dag_file_are_named():
    errors = ErrorList()
    local = types.new_class("Local")
    local.__module__ = "unusual_prefix_0123_my_dag"
    pickle_arguments(errors, [1, threading.Lock()], {"obj": local()})
    with pytest.raises(MPIJobValidationError) as err:
        errors.raise_if_any()
    text = str(err.value)
    assert "op_args[1]" in text and "cannot be pickled" in text
    assert "op_kwargs['obj']" in text and "unusual_prefix_0123_my_dag" in text
    assert "op_args[0]" not in text


def test_plain_arguments_pickle_and_round_trip_through_the_command():
    errors = ErrorList()
    arguments = pickle_arguments(errors, [[1, 2, 3]], {"scale": 2.5, "when": None})
    assert len(errors) == 0
    argv = rank_command(SOURCE, "work", arguments, python="/opt/py/bin/python")
    assert argv[:3] == ["/opt/py/bin/python", "-c", BOOTSTRAP]
    call = decode_call(argv[4:])
    assert call["name"] == "work" and call["source"] == SOURCE
    assert call["arguments"] == (([1, 2, 3],), {"scale": 2.5, "when": None})


def test_a_call_too_large_for_a_command_line_is_refused_before_submission():
    big = pickle_arguments(ErrorList(), [os.urandom(MAX_CALL_BYTES)], {})
    with pytest.raises(MPIJobValidationError, match="pass large data by reference"):
        rank_command(SOURCE, "work", big)


def test_large_calls_are_split_into_argv_words_a_kernel_accepts():
    argv = rank_command(SOURCE, "work", pickle_arguments(ErrorList(), [os.urandom(200_000)], {}))
    assert len(argv) > 6 and all(len(word) <= 131_072 for word in argv)
    assert decode_call(argv[4:])["arguments"][0][0].__len__() == 200_000


@pytest.mark.parametrize(
    ("implementation", "flag"), [("OpenMPI", "--tag-output"), ("MPICH", "-prepend-rank"), ("Intel", "-prepend-rank")]
)
def test_mpirun_tags_output_with_ranks_for_the_decorator(implementation, flag):
    kwargs = {"workers": 2, "slots_per_worker": 2, "implementation": implementation, "run_launcher_as_worker": False}
    tagged = Mpirun(["python3"], ["-v"], tag_output=True).command(**kwargs)
    plain = Mpirun(["python3"], ["-v"]).command(**kwargs)
    assert flag not in plain
    assert tagged.index(flag) < tagged.index("-v") < tagged.index("python3")


# ---------------------------------------------------------------- on the ranks
def test_rank_zero_reports_its_value_in_marker_lines_and_other_ranks_report_nothing():
    root, other = run_rank(0, [1, 2, 3], scale=2), run_rank(1, [1, 2, 3], scale=2, variable="PMI_RANK")
    assert root.returncode == other.returncode == 0
    assert "rank 0 got [1, 2, 3]" in root.stdout and "rank 1 got [1, 2, 3]" in other.stdout
    assert MARKER not in other.stdout
    result = parse_result(root.stdout.splitlines())
    assert result.started and result.has_value and result.error is None
    assert result.value == {"rank": 0, "total": 12, "text": "x" * 3000}
    assert all(len(line) < 1100 for line in root.stdout.splitlines())  # chunks: no line mpirun would split


def test_an_exception_prints_its_traceback_with_the_functions_source_and_fails_the_rank():
    proc = run_rank(1, "boom", variable="PMI_RANK")
    assert proc.returncode == 1
    assert "RuntimeError: rank 1 failed" in proc.stderr
    assert 'raise RuntimeError("rank %d failed" % rank)' in proc.stderr  # the source line, from the shipped source
    assert "<@task function work>" in proc.stderr


def test_system_exit_keeps_its_code_and_gives_no_value():
    proc = run_rank(0, "exit")
    assert proc.returncode == 3 and not parse_result(proc.stdout.splitlines()).has_value


def test_a_return_value_that_is_no_json_is_reported_not_raised():
    proc = run_rank(0, "set")
    assert proc.returncode == 0
    result = parse_result(proc.stdout.splitlines())
    assert result.started and not result.has_value
    assert "cannot be an XCom" in result.error and "set" in result.error


# ---------------------------------------------------------------- reading the launcher's log
def value_lines(value, tag: str = "") -> list[str]:
    proc = subprocess.run(rank_command(SOURCE.replace('"text": "x" * 3000', '"text": %r' % value), "work",
                                       pickle_arguments(ErrorList(), [[1]], {}), python=sys.executable),
                          env={**os.environ, "OMPI_COMM_WORLD_RANK": "0"}, capture_output=True, text=True, check=True)
    return [tag + line for line in proc.stdout.splitlines()]


def test_rank_tags_are_ignored_and_the_last_complete_value_wins():
    long_text = os.urandom(4000).hex()  # incompressible: several chunks
    first, second = value_lines(long_text, tag="[1,0]<stdout>:"), value_lines("b", tag="[0] ")
    cut_short = [ln for ln in first if " value 0 " in ln or " value 1 " in ln]  # an attempt that died mid-value
    assert sum(" value " in ln for ln in first) > len(cut_short) == 2
    assert parse_result(first).value["text"] == long_text
    result = parse_result([*first, *cut_short, *second])
    assert result.value["text"] == "b"
    assert parse_result([*second, *cut_short]).value["text"] == "b"  # an incomplete later value replaces nothing


def test_a_damaged_value_is_an_error_not_a_wrong_value():
    lines = value_lines("c")
    damaged = [ln.replace(ln[-4:], "AAAA") if " value " in ln else ln for ln in lines]
    assert "damaged" in parse_result(damaged).error


def test_result_lines_are_kept_out_of_the_visible_log():
    visible, hidden = [], []
    emit = hide_result_lines(visible.append, hidden)
    for line in value_lines("d", tag="[1,0]<stdout>:"):
        emit(line)
    assert visible == ["[1,0]<stdout>:rank 0 got [1]"]
    assert all(line.startswith(MARKER) for line in hidden)
    assert parse_result(hidden).value["text"] == "d"


def test_mpich_workers_reach_mpiexec_by_the_launchers_ip_when_asked():
    kwargs = {"workers": 1, "slots_per_worker": 1, "run_launcher_as_worker": False}
    mpich = Mpirun(["python3"], connect_by_ip=True).command(implementation="MPICH", **kwargs)
    assert mpich[:4] == ["sh", "-c", 'exec "$0" -localhost "$(hostname -i)" "$@"', "mpirun"]
    assert Mpirun(["python3"], connect_by_ip=True).command(implementation="OpenMPI", **kwargs)[0] == "mpirun"
    assert Mpirun(["python3"]).command(implementation="MPICH", **kwargs)[0] == "mpirun"
