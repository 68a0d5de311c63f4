"""@task.mpi's model: what is checked before submission, the ranks' command, and rank 0's result lines.

The ranks' program (function_task/rank_runner.py) runs for real here, in a subprocess of this interpreter with the
environment an MPI launcher gives a rank: what its output says is what the launcher's log will say.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import types

import pytest

from airflow_mpi.function_task.function_call import (
    CALL_KEY,
    CALL_MOUNT,
    MAX_CALL_BYTES,
    RUNNER_KEY,
    call_secret_data,
    check_function,
    check_source,
    decode_call,
    lost_call_data,
    mount_call_secret,
    mounted_call_secret,
    pickle_arguments,
    rank_command,
)
from airflow_mpi.function_task.rank_result import ResultCollector, hide_result_lines, parse_result
from airflow_mpi.function_task.rank_runner import MARKER, MAX_ENCODED_CHARS, MAX_JSON_BYTES, line_mac
from airflow_mpi.jobspec import MPIJobValidationError, Mpirun
from airflow_mpi.jobspec.errors import ErrorList
from localcluster.processes import child_env

NONCE = "n0nce-of-this-try"

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
    if values == "forge":
        import sys
        print("::airflow-mpi-result:: guessed value 0 1 0 x", "argv=%d" % len(sys.argv))
    return {"rank": rank, "total": sum(values) * scale, "text": "x" * 3000}
"""


def run_rank(
    rank: int, *args, variable: str = "OMPI_COMM_WORLD_RANK", source: str = SOURCE, **kwargs
) -> subprocess.CompletedProcess:
    """The rank's command as mpirun starts it, with the call's Secret as the kubelet mounts it (a folder)."""
    import tempfile
    from pathlib import Path

    data = call_secret_data(source, "work", pickle_arguments(ErrorList(), args, kwargs), NONCE)
    mount = Path(tempfile.mkdtemp())
    for key, text in data.items():
        (mount / key).write_text(text)
    argv = [word.replace(CALL_MOUNT, str(mount)) for word in rank_command(python=sys.executable)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK")}
    return subprocess.run(argv, env={**env, variable: str(rank)}, capture_output=True, text=True, timeout=60)


def tagged(proc: subprocess.CompletedProcess, tag: str = "[1,0]<stdout>:") -> list[str]:
    """Its stdout as the launcher's log shows it, every line tagged with the rank by mpirun."""
    return [tag + line for line in proc.stdout.splitlines()]


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


def test_the_call_travels_in_the_secret_and_the_command_only_names_its_files():
    arguments = pickle_arguments(ErrorList(), [[1, 2, 3]], {"scale": 2.5, "password": "hunter2"})
    data = call_secret_data(SOURCE, "work", arguments, NONCE)
    assert set(data) == {CALL_KEY, RUNNER_KEY}
    call = decode_call(data[CALL_KEY])
    assert call["name"] == "work" and call["source"] == SOURCE and call["nonce"] == NONCE
    assert call["arguments"] == (([1, 2, 3],), {"scale": 2.5, "password": "hunter2"})
    argv = rank_command(python="/opt/py/bin/python")
    assert argv == ["/opt/py/bin/python", f"{CALL_MOUNT}/runner.py", f"{CALL_MOUNT}/call"]


def call_manifest(launcher_as_worker=None):
    """Both roles: a main container, a sidecar (base manifest) and an init container; a volume of their own."""
    pod = {
        "template": {
            "spec": {
                "containers": [{"name": "main"}, {"name": "sidecar", "volumeMounts": [{"name": "x"}]}],
                "initContainers": [{"name": "init"}],
                "volumes": [{"name": "x"}],
            }
        }
    }
    spec = {"mpiReplicaSpecs": {"Launcher": pod, "Worker": copy.deepcopy(pod)}}
    return {
        "spec": {
            **spec,
            **({} if launcher_as_worker is None else {"runLauncherAsWorker": launcher_as_worker}),
        }
    }


def call_mounts(manifest):
    """{role: [containers mounting the call volume]}, and each role's volume of it (or None)."""
    mounts, volumes = {}, {}
    for role, replica in manifest["spec"]["mpiReplicaSpecs"].items():
        spec = replica["template"]["spec"]
        mounts[role] = [
            c["name"]
            for c in [*spec["initContainers"], *spec["containers"]]
            for m in c.get("volumeMounts") or []
            if m["name"] == "airflow-mpi-call"
        ]
        volumes[role] = [
            v.get("secret") for v in spec.get("volumes") or [] if v["name"] == "airflow-mpi-call"
        ]
    return mounts, volumes


@pytest.mark.parametrize("launcher_as_worker", [None, False])
def test_the_secret_is_mounted_only_into_the_workers_main_container(launcher_as_worker):
    manifest = mount_call_secret(call_manifest(launcher_as_worker), "job-call-1")
    mount_call_secret(manifest, "job-call-2")  # idempotent: the last Secret only
    mounts, volumes = call_mounts(manifest)
    assert mounts == {
        "Launcher": [],
        "Worker": ["main"],
    }  # mpirun on the launcher only passes the file names on
    assert volumes == {"Launcher": [], "Worker": [{"secretName": "job-call-2", "defaultMode": 0o444}]}
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["containers"][0]["volumeMounts"] == [
        {"name": "airflow-mpi-call", "mountPath": CALL_MOUNT, "readOnly": True}
    ]
    assert worker["containers"][1]["volumeMounts"] == [
        {"name": "x"}
    ]  # the sidecar keeps its own, gets nothing
    assert [v["name"] for v in worker["volumes"]] == ["x", "airflow-mpi-call"]


def test_a_launcher_that_runs_ranks_too_gets_the_secret_in_its_main_container_only():
    mounts, volumes = call_mounts(mount_call_secret(call_manifest(launcher_as_worker=True), "job-call-1"))
    assert mounts == {"Launcher": ["main"], "Worker": ["main"]}
    assert volumes["Launcher"] == volumes["Worker"] == [{"secretName": "job-call-1", "defaultMode": 0o444}]


def test_a_base_manifests_mount_of_the_call_volume_in_a_sidecar_is_taken_away():
    manifest = call_manifest()
    sidecar = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][1]
    sidecar["volumeMounts"].append({"name": "airflow-mpi-call", "mountPath": "/peek"})
    assert call_mounts(mount_call_secret(manifest, "job-call-1"))[0] == {"Launcher": [], "Worker": ["main"]}


def test_the_secret_a_job_mounts_is_read_back_from_its_workers_volume():
    assert mounted_call_secret(mount_call_secret(call_manifest(), "job-call-1")) == "job-call-1"
    assert mounted_call_secret(call_manifest()) is None and mounted_call_secret({}) is None


def test_the_stand_in_for_a_lost_call_runs_nothing_and_says_why(tmp_path):
    import subprocess
    import sys

    data = lost_call_data()
    for key, text in data.items():
        (tmp_path / key).write_text(text)
    argv = [w.replace(CALL_MOUNT, str(tmp_path)) for w in rank_command(python=sys.executable)]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env())
    assert done.returncode == 1 and "lost its call Secret" in done.stderr and done.stdout == ""


def test_a_call_too_large_for_its_secret_is_refused_before_submission_naming_the_limit():
    big = pickle_arguments(ErrorList(), [os.urandom(MAX_CALL_BYTES)], {})
    with pytest.raises(
        MPIJobValidationError, match=rf"op_args/op_kwargs.*over the {MAX_CALL_BYTES} .*Secret"
    ):
        call_secret_data(SOURCE, "work", big, NONCE)


@pytest.mark.parametrize(
    ("implementation", "flag"),
    [("OpenMPI", "--tag-output"), ("MPICH", "-prepend-rank"), ("Intel", "-prepend-rank")],
)
def test_mpirun_tags_output_with_ranks_for_the_decorator(implementation, flag):
    kwargs = {
        "workers": 2,
        "slots_per_worker": 2,
        "implementation": implementation,
        "run_launcher_as_worker": False,
    }
    tagged_cmd = Mpirun(["python3"], ["-v"], tag_output=True).command(**kwargs)
    plain = Mpirun(["python3"], ["-v"]).command(**kwargs)
    assert flag not in plain
    assert tagged_cmd.index(flag) < tagged_cmd.index("-v") < tagged_cmd.index("python3")


# ---------------------------------------------------------------- on the ranks
def test_rank_zero_reports_its_value_in_marker_lines_and_other_ranks_report_nothing():
    root, other = run_rank(0, [1, 2, 3], scale=2), run_rank(1, [1, 2, 3], scale=2, variable="PMI_RANK")
    assert root.returncode == other.returncode == 0
    assert "rank 0 got [1, 2, 3]" in root.stdout and "rank 1 got [1, 2, 3]" in other.stdout
    assert MARKER not in other.stdout
    result = parse_result(tagged(root), NONCE)
    assert result.started and result.has_value and result.error is None
    assert result.value == {"rank": 0, "total": 12, "text": "x" * 3000}
    assert all(len(line) < 1100 for line in root.stdout.splitlines())  # chunks: no line mpirun would split
    assert NONCE not in root.stdout  # neither the function's output nor the marker lines (an HMAC) hold it


def test_an_exception_prints_its_traceback_with_the_functions_source_and_fails_the_rank():
    proc = run_rank(1, "boom", variable="PMI_RANK")
    assert proc.returncode == 1
    assert "RuntimeError: rank 1 failed" in proc.stderr
    assert (
        'raise RuntimeError("rank %d failed" % rank)' in proc.stderr
    )  # the source line, from the shipped source
    assert "<@task function work>" in proc.stderr


def test_system_exit_keeps_its_code_and_gives_no_value():
    proc = run_rank(0, "exit")
    assert proc.returncode == 3 and not parse_result(tagged(proc), NONCE).has_value


def test_a_return_value_that_is_no_json_is_reported_not_raised():
    proc = run_rank(0, "set")
    assert proc.returncode == 0
    result = parse_result(tagged(proc), NONCE)
    assert result.started and not result.has_value
    assert "cannot be an XCom" in result.error and "set" in result.error


# ---------------------------------------------------------------- only rank 0, only this run
def value_lines(value, tag: str = "[1,0]<stdout>:") -> list[str]:
    proc = run_rank(0, [1], source=SOURCE.replace('"text": "x" * 3000', f'"text": {value!r}'))
    assert proc.returncode == 0, proc.stderr
    return tagged(proc, tag)


def test_only_rank_zeros_tagged_lines_of_this_nonce_count():
    lines = value_lines("mine")
    assert parse_result(lines, NONCE).value["text"] == "mine"
    for forged in (
        [ln.replace("[1,0]", "[1,3]", 1) for ln in lines],  # another rank printed them
        [ln.split(":", 1)[1] for ln in lines],  # no rank tag: not from mpirun's rank 0
        [ln.replace("<stdout>", "<stderr>", 1) for ln in lines],
    ):  # rank 0's stderr
        assert not parse_result(forged, NONCE).started
    assert parse_result(lines, "an earlier try's nonce") == parse_result([], NONCE)


def test_a_marker_printed_by_the_program_itself_is_no_result_and_the_program_never_sees_the_nonce():
    proc = run_rank(0, "forge")
    visible, collector = [], ResultCollector(NONCE)
    emit = hide_result_lines(visible.append, collector)
    for line in tagged(proc):
        emit(line)
    assert not [
        ln for ln in visible if MARKER in ln
    ]  # rank 0's line in the marker's form: kept out, not read
    (forged,) = [ln for ln in tagged(proc) if "guessed" in ln]
    assert MARKER in forged and "argv=1" in forged and NONCE not in forged  # no path to the call in sys.argv
    assert collector.started and collector.rejected == 1


def test_hydra_and_gloo_tags_of_rank_zero_count_and_the_last_complete_value_wins():
    long_text = os.urandom(4000).hex()  # incompressible: several chunks
    first, second = value_lines(long_text), value_lines("b", tag="[0] ")
    cut_short = [
        ln for ln in first if " value 0 " in ln or " value 1 " in ln
    ]  # an attempt that died mid-value
    assert sum(" value " in ln for ln in first) > len(cut_short) == 2
    assert parse_result(first, NONCE).value["text"] == long_text
    assert parse_result([*first, *cut_short, *second], NONCE).value["text"] == "b"
    assert (
        parse_result([*second, *cut_short], NONCE).value["text"] == "b"
    )  # an incomplete later value replaces nothing
    assert parse_result(value_lines("g", tag="[0]<stdout>:"), NONCE).value["text"] == "g"


def marker(*words: str) -> str:
    return " ".join(("[1,0]<stdout>:" + MARKER, line_mac(NONCE, words), *words))


@pytest.mark.parametrize(
    "words, why",
    [
        (("value", "x", "y", "z"), "malformed"),
        (("value", "0", "1"), "malformed"),
        (("value", "0", "1", "5", "AAAA"), "checksum"),
    ],
)
def test_damaged_or_malformed_value_lines_are_an_error_not_an_exception(words, why):
    result = parse_result([marker("started"), marker(*words)], NONCE)
    assert result.started and not result.has_value and why in result.error


def encoded(data: bytes) -> list[str]:
    import base64
    import zlib

    text = base64.b64encode(zlib.compress(data, 9)).decode()
    chunks = [text[i : i + 1000] for i in range(0, len(text), 1000)]
    return [
        marker("value", str(i), str(len(chunks)), str(zlib.crc32(text.encode())), c)
        for i, c in enumerate(chunks)
    ]


def test_a_value_too_large_decompressed_is_refused_naming_the_cap():
    bomb = encoded(b"[" + b"0," * (MAX_JSON_BYTES // 2) + b"0]")  # ~8 MiB of JSON in a few KB of lines
    assert len("".join(bomb)) < 100_000
    result = parse_result(bomb, NONCE)
    assert not result.has_value and f"over {MAX_JSON_BYTES} bytes as JSON" in result.error


def test_a_value_too_large_encoded_is_refused_naming_the_cap():
    result = parse_result(encoded(os.urandom(MAX_ENCODED_CHARS)), NONCE)
    assert not result.has_value and f"over the cap of {MAX_ENCODED_CHARS} characters encoded" in result.error


def test_result_lines_are_kept_out_of_the_visible_log():
    visible, collector = [], ResultCollector(NONCE)
    emit = hide_result_lines(visible.append, collector)
    for line in value_lines("d"):
        emit(line)
    assert visible == ["[1,0]<stdout>:rank 0 got [1]"]
    assert collector.result().value["text"] == "d"


def test_mpich_workers_reach_mpiexec_by_the_launchers_ip_when_asked():
    kwargs = {"workers": 1, "slots_per_worker": 1, "run_launcher_as_worker": False}
    mpich = Mpirun(["python3"], connect_by_ip=True).command(implementation="MPICH", **kwargs)
    assert mpich[:4] == ["sh", "-c", 'exec "$0" -localhost "$(hostname -i)" "$@"', "mpirun"]
    assert Mpirun(["python3"], connect_by_ip=True).command(implementation="OpenMPI", **kwargs)[0] == "mpirun"
    assert Mpirun(["python3"]).command(implementation="MPICH", **kwargs)[0] == "mpirun"
