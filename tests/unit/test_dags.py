"""The example DAGs in dags/: they import cleanly (DagBag), without touching the cluster, their Params
carry the documented JSON-schema bounds, and their templated fields render into valid MPIJobs."""

from __future__ import annotations

import copy
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.operators import HorovodJobOperator, MPIJobOperator
from airflow_mpi.sensors import MPIJobSensor
from localcluster.processes import child_env
from tests.unit.fakes import FakeSyncHook

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
EXPECTED = {"mpi_pi", "mpi_pi_queued", "horovod_train", "mpi_job_sensor", "mpi_function", "trainjob_pi"}
RUN_ID = "manual__2026-11-22T10:00:00+00:00"


def _dagbag_class():
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow 3
    except ImportError:  # Airflow 2.11
        from airflow.models.dagbag import DagBag
    return DagBag


def _load_dagbag():
    DagBag = _dagbag_class()
    kwargs = (
        {"include_examples": False}
        if "include_examples" in inspect.signature(DagBag.__init__).parameters
        else {}
    )
    return DagBag(str(DAGS_DIR), **kwargs)


@pytest.fixture(scope="module")
def dagbag():
    return _load_dagbag()


def test_every_dag_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) >= EXPECTED


def test_dag_files_do_not_touch_the_cluster_at_parse_time():
    """Parsing in a fresh interpreter opens no socket and loads no Kubernetes client, nor the OpenLineage
    provider or client (operators/lineage.py: only when the provider asks), beyond what Airflow itself loads."""
    script = textwrap.dedent(
        f"""
        import inspect, json, socket, sys
        try:
            from airflow.dag_processing.dagbag import DagBag
        except ImportError:
            from airflow.models.dagbag import DagBag
        def k8s_modules():
            return {{m for m in sys.modules if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio", "openlineage")
                     or m.startswith("airflow.providers.openlineage.extractors")  # (Airflow 2 lists the provider)
                     or m == "airflow_mpi.operators.lineage_facet"}}
        before = k8s_modules()
        attempts = []
        def refuse(self, address, *a, **k):
            attempts.append(repr(address))
            raise OSError("network access at DAG parse time")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        parameters = inspect.signature(DagBag.__init__).parameters
        kwargs = {{"include_examples": False}} if "include_examples" in parameters else {{}}
        bag = DagBag({str(DAGS_DIR)!r}, **kwargs)
        print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}}, "dags": sorted(bag.dag_ids),
                           "new_k8s_modules": sorted(k8s_modules() - before), "connects": attempts}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=child_env(),
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert set(result["dags"]) >= EXPECTED
    assert result["connects"] == []
    assert result["new_k8s_modules"] == []


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_dag_serializes_as_the_dag_processor_does(dagbag, dag_id):
    """The dag-processor stores DAGs serialized; scheduler and UI (trigger form) only see that form."""
    from airflow.serialization import serialized_objects

    serializer = getattr(serialized_objects, "DagSerialization", None) or serialized_objects.SerializedDAG
    restored = serializer.from_dict(serializer.to_dict(dagbag.dags[dag_id]))
    assert restored.dag_id == dag_id
    assert set(restored.params.keys()) == set(dagbag.dags[dag_id].params.keys())
    for name, param in restored.params.items():
        assert param.schema == dagbag.dags[dag_id].params.get_param(name).schema


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_dag_is_documented_and_manual(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert dag.doc_md and len(dag.doc_md) > 200
    assert dag.description
    assert type(dag.timetable).__name__ == "NullTimetable"  # manual runs only
    assert "example" in dag.tags
    for name, param in dag.params.items():
        # the trigger form shows a title and a description for every field
        assert param.description, f"{dag_id}.{name} has no description"
        assert param.schema.get("title"), f"{dag_id}.{name} has no title"


def _resolve(dag, conf: dict) -> dict:
    """Params as a run sees them: defaults overridden by conf, validated against their JSON schemas."""
    params = copy.deepcopy(dag.params)
    params.update(conf)
    return dict(params.validate())


@pytest.mark.parametrize(
    ("dag_id", "name", "good", "bad"),
    [
        ("mpi_pi", "workers", 16, [0, 17, "two"]),
        ("mpi_pi", "slots_per_worker", 8, [0, 9]),
        ("mpi_pi", "image", "mpioperator/mpi-pi:intel", [""]),
        ("mpi_pi", "mpi_implementation", "MPICH", ["LAM", "openmpi"]),
        ("mpi_pi", "deferrable", True, ["yes"]),
        ("mpi_pi", "hold_seconds", 3600, [-1, 3601, "30s"]),
        ("horovod_train", "workers", 64, [0, 65]),
        ("horovod_train", "processes_per_worker", 8, [0, 9]),
        ("horovod_train", "gpus_per_worker", 8, [-1, 9]),
        ("horovod_train", "epochs", 100, [0, 101]),
        ("horovod_train", "image", "horovod/horovod:0.28.1-tf2.11.0-torch1.13.1", [""]),
        ("horovod_train", "elastic", True, ["yes"]),
        ("mpi_job_sensor", "workers", 1, [0, 17]),
        ("mpi_function", "count", 10_000_000, [0, 10_000_001]),
        ("mpi_pi_queued", "queue_name", "team-a", ["", "Team_A", "-a"]),
        ("mpi_pi_queued", "jobs", 8, [0, 9]),
        ("mpi_pi_queued", "worker_cpu_millicores", 2000, [49, 2001]),
        ("mpi_pi_queued", "queue_timeout", 0, [-1, 86_401]),
        ("mpi_pi_queued", "hold_seconds", 0, [-1, 3601]),
        ("mpi_function", "workers", 16, [0, 17]),
        ("mpi_function", "mpi_implementation", "MPICH", ["Intel"]),
        ("trainjob_pi", "workers", 16, [0, 17]),
        ("trainjob_pi", "slots_per_worker", 8, [0, 9]),
        ("trainjob_pi", "deferrable", True, ["yes"]),
        ("trainjob_pi", "runtime", "torch-distributed", ["", "Open_MPI", "-a"]),
    ],
)
def test_param_schema_bounds(dagbag, dag_id, name, good, bad):
    from airflow.exceptions import ParamValidationError

    dag = dagbag.dags[dag_id]
    assert _resolve(dag, {name: good})[name] == good
    for value in bad:
        with pytest.raises(ParamValidationError):
            _resolve(dag, {name: value})


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_defaults_are_valid(dagbag, dag_id):
    _resolve(dagbag.dags[dag_id], {})


def _rendered_manifest(dag, task_id: str, conf: dict, namespace="ns", xcom=None) -> tuple[object, dict]:
    task = copy.deepcopy(
        dag.get_task(task_id)
    )  # rendering mutates the task: keep the module's DagBag pristine
    ti = NS(
        dag_id=dag.dag_id,
        task_id=task_id,
        run_id=RUN_ID,
        map_index=-1,
        try_number=1,
        task=task,  # Airflow 3.4's XComArg.resolve asks whether the reader is in the producer's loop
        xcom_pull=lambda *a, **k: xcom,
        get_relevant_upstream_map_indexes=lambda *a, **k: None,
    )  # upstream XComs
    context = {"params": _resolve(dag, conf), "ti": ti, "task_instance": ti, "expanded_ti_count": None}
    task.render_template_fields(context)
    task.__dict__["hook"] = FakeSyncHook(namespace=namespace)  # build_manifest only asks it for the namespace
    return task, task.build_manifest(context)


def _launcher_argv(manifest: dict) -> list[str]:
    container = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    return [*container.get("command", []), *container.get("args", [])]


def test_mpi_pi_params_render_into_the_mpijob(dagbag):
    dag = dagbag.dags["mpi_pi"]
    task, manifest = _rendered_manifest(
        dag,
        "pi",
        {
            "workers": 3,
            "slots_per_worker": 2,
            "image": "mpioperator/mpi-pi:intel",
            "mpi_implementation": "Intel",
            "deferrable": True,
            "samples": 5000,
            "hold_seconds": 40,
        },
    )
    assert isinstance(task, MPIJobOperator)
    assert task.deferrable is True  # the boolean Param, not the string "True"
    spec = manifest["spec"]
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert spec["slotsPerWorker"] == 2
    assert spec["mpiImplementation"] == "Intel"
    argv = _launcher_argv(manifest)
    assert argv[0] == "mpirun" and argv[-3:] == ["/home/mpiuser/pi", "5000", "40"]
    assert "6" in argv  # -n / -np = workers x slots
    assert all(isinstance(a, str) for a in argv)
    for role in ("Launcher", "Worker"):
        container = spec["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
        assert container["image"] == "mpioperator/mpi-pi:intel"
        assert container["securityContext"] == {"runAsUser": 1000}
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"] == {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert worker["command"][0] == "/usr/sbin/sshd"
    # the launcher starts once the workers' sshd listens (their DNS names resolve by then)
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert (
        "startupProbe" in worker and "readinessProbe" not in worker
    )  # the operator's default, not the DAG's


def test_mpi_pi_defaults_are_synchronous_open_mpi(dagbag):
    task, manifest = _rendered_manifest(dagbag.dags["mpi_pi"], "pi", {})
    assert task.deferrable is False
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert manifest["spec"]["mpiImplementation"] == "OpenMPI"
    assert manifest["metadata"]["namespace"] == "ns"


def test_mpi_pi_report_consumes_the_pi_xcom(dagbag):
    dag = dagbag.dags["mpi_pi"]
    assert dag.get_task("report").upstream_task_ids == {"pi"}


def test_trainjob_pi_params_render_into_the_trainjob(dagbag):
    from airflow_mpi.operators import TrainJobOperator

    task, manifest = _rendered_manifest(
        dagbag.dags["trainjob_pi"],
        "pi",
        {"workers": 3, "slots_per_worker": 2, "deferrable": True, "runtime": "openmpi-other"},
    )
    assert isinstance(task, TrainJobOperator) and task.deferrable is True
    assert (manifest["apiVersion"], manifest["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    spec = manifest["spec"]
    assert spec["runtimeRef"]["name"] == "openmpi-other"
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 2)
    argv = trainer["command"]
    assert argv[0] == "mpirun" and argv[-3:] == ["-np", "6", "/home/mpiuser/pi"]  # workers x slots ranks
    # launcher and node pods run the runtime's image: the DAG sets neither image nor resources (v2.3.0 would
    # apply both to the launcher alone)
    assert "image" not in trainer and "resourcesPerNode" not in trainer


def test_trainjob_pi_defaults_name_the_shipped_runtime_and_wait_synchronously(dagbag):
    task, manifest = _rendered_manifest(dagbag.dags["trainjob_pi"], "pi", {})
    assert task.deferrable is False
    assert manifest["spec"]["runtimeRef"] == {
        "name": "openmpi-mpiuser",
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert manifest["spec"]["trainer"]["numNodes"] == 2 and manifest["metadata"]["namespace"] == "ns"
    assert dagbag.dags["trainjob_pi"].get_task("report").upstream_task_ids == {"pi"}


def test_horovod_params_render_into_the_mpijob(dagbag):
    task, manifest = _rendered_manifest(
        dagbag.dags["horovod_train"], "train",
        {"workers": 4, "processes_per_worker": 2, "gpus_per_worker": 2, "epochs": 7, "deferrable": True},
    )  # fmt: skip
    assert isinstance(task, HorovodJobOperator) and task.deferrable is True
    replicas = manifest["spec"]["mpiReplicaSpecs"]
    assert replicas["Worker"]["replicas"] == 4
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert str(worker["resources"]["limits"]["nvidia.com/gpu"]) == "2"
    assert worker["command"][0] == "/usr/sbin/sshd"  # the default: the image conventions' sshd, as mpiuser
    argv = _launcher_argv(manifest)
    assert argv[:3] == ["horovodrun", "-np", "8"]  # 4 workers x 2 processes
    assert argv[argv.index("--hostfile") + 1] == "/etc/mpi/hostfile" and "--min-np" not in argv
    assert argv[-3:] == ["python", "/home/mpiuser/horovod_train.py", "--epochs=7"]


def test_horovod_on_cpus_asks_for_no_gpu_and_elastic_follows_the_discovery_script(dagbag):
    _, manifest = _rendered_manifest(dagbag.dags["horovod_train"], "train", {"elastic": True})
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in worker.get("resources", {}).get("limits", {})
    argv = _launcher_argv(manifest)
    assert argv[argv.index("--min-np") + 1] == "1"
    assert argv[argv.index("--host-discovery-script") + 1] == "/etc/mpi/discover_hosts.sh"


def test_sensor_dag_waits_deferrably_and_always_cleans_up(dagbag):
    dag = dagbag.dags["mpi_job_sensor"]
    wait = dag.get_task("wait")
    assert isinstance(wait, MPIJobSensor) and wait.deferrable is True
    assert wait.upstream_task_ids == {"submit"}
    cleanup = dag.get_task("cleanup")
    assert cleanup.upstream_task_ids == {"submit", "wait"}
    assert cleanup.trigger_rule == "all_done"


def test_mpi_function_runs_the_decorated_function_with_the_upstream_numbers(dagbag):
    from airflow_mpi.decorators.mpi import _MPIDecoratedOperator
    from airflow_mpi.function_task.function_call import decode_call

    dag = dagbag.dags["mpi_function"]
    assert dag.get_task("sum_of_squares").upstream_task_ids == {"numbers"}
    assert dag.get_task("check").upstream_task_ids == {"sum_of_squares"}
    task, manifest = _rendered_manifest(
        dag, "sum_of_squares", {"workers": 3, "slots_per_worker": 2, "mpi_implementation": "MPICH",
                                "image": "airflow-mpi/mpi-pi:mpich"}, xcom=[1, 2, 3])  # fmt: skip
    assert isinstance(task, _MPIDecoratedOperator)
    argv = _launcher_argv(manifest)
    assert argv[:3] == ["sh", "-c", 'exec "$0" -localhost "$(hostname -i)" "$@"']  # MPICH: mpiexec by IP
    argv = argv[3:]
    assert argv[:6] == ["mpirun", "-n", "6", "-ppn", "2", "-prepend-rank"] and argv[6] == "python3"
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] == (
        "airflow-mpi/mpi-pi:mpich"
    )
    spec = manifest["spec"]  # images/mpi's conventions: the operator's defaults
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert (
        spec["launcherCreationPolicy"] == "WaitForWorkersReady"
        and spec["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    )
    assert worker["command"][0] == "/usr/sbin/sshd" and "startupProbe" in worker
    assert worker["resources"]["requests"] == {"cpu": "250m", "memory": "256Mi"}  # the DAG's parameters too
    assert argv[7:] == ["/etc/airflow-mpi/call/runner.py", "/etc/airflow-mpi/call/call"]
    assert "comm.reduce" not in str(manifest)  # the function travels in the call's Secret, not in the MPIJob
    call = decode_call(task.callbacks.call_secret[1]["call"])
    assert call["arguments"] == (([1, 2, 3],), {})  # the upstream task's XCom
    source = call["source"]
    assert source.startswith("def sum_of_squares(values") and "comm.reduce(partial" in source


def test_mpi_function_check_accepts_only_the_closed_forms(dagbag):
    check = dagbag.dags["mpi_function"].get_task("check").python_callable
    assert check({"sum_of_squares": 385, "ranks": 4, "sum_of_ranks": 6}, params={"count": 10}) == 385
    with pytest.raises(ValueError, match="is wrong"):
        check({"sum_of_squares": 384, "ranks": 4, "sum_of_ranks": 6}, params={"count": 10})


def test_mpi_function_renders_offline_without_its_upstream_xcom():
    from airflow_mpi.render import render

    manifest = render(str(DAGS_DIR / "mpi_function.py"), "sum_of_squares", params={"workers": 3})
    argv = _launcher_argv(manifest)
    assert "--tag-output" in argv and argv[argv.index("-np") + 1] == "6"
    # the command names the call's Secret, made with the job at run time: neither function nor arguments show
    assert argv[argv.index("python3") + 1 :] == [
        "/etc/airflow-mpi/call/runner.py",
        "/etc/airflow-mpi/call/call",
    ]
    assert "def sum_of_squares" not in str(manifest) and "airflow-mpi-call" in str(manifest)
