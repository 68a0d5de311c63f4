"""TrainJobOperator: MPIJobOperator fixed to TrainJob's API, its signature the parameters a TrainJob has, its
manifest built offline (``build_manifest()``, ``airflow-mpi-render``), its try MPIJobOperator's."""

from __future__ import annotations

import inspect
import textwrap

import pytest
import yaml

from airflow_mpi.get_provider_info import get_provider_info
from airflow_mpi.jobspec import MPIJobValidationError
from airflow_mpi.jobspec.kinds import API_TRAINJOB
from airflow_mpi.operators import MPIJobOperator, TrainJobOperator
from airflow_mpi.operators.lineage import facts_of
from airflow_mpi.render import main
from airflow_mpi.version_compat import AirflowException
from tests.unit.fakes import FakeSyncHook
from tests.unit.operators.test_mpijob_operator import Recorder, _no_drain, context, result
from tests.unit.upstream import trainjob_schema_errors

IMAGE = "airflow-mpi/mpi-pi:openmpi"


def test_it_builds_a_trainjob_offline():
    op = TrainJobOperator(task_id="pi", image=IMAGE, program=["/home/mpiuser/pi"], workers=2, namespace="ml")
    manifest = op.build_manifest()
    assert (manifest["apiVersion"], manifest["kind"]) == (API_TRAINJOB, "TrainJob")
    assert manifest["spec"]["runtimeRef"]["name"] == "openmpi-mpiuser"
    assert manifest["spec"]["trainer"]["numNodes"] == 2
    assert trainjob_schema_errors(manifest) == []


def test_another_api_version_is_refused_by_name():
    with pytest.raises(MPIJobValidationError) as err:
        TrainJobOperator(task_id="pi", image=IMAGE, api_version="kubeflow.org/v2beta1")
    assert [(e.field, e.value) for e in err.value.errors] == [("api_version", "kubeflow.org/v2beta1")]


def test_a_parameter_a_trainjob_lacks_is_refused_when_the_dag_is_parsed():
    with pytest.raises(MPIJobValidationError) as err:
        TrainJobOperator(task_id="pi", image=IMAGE, node_selector={"pool": "gpu"})
    assert [(e.field, e.value) for e in err.value.errors] == [("node_selector", {"pool": "gpu"})]


def test_its_signature_has_the_runtime_and_not_what_a_trainjob_refuses():
    names = set(inspect.signature(TrainJobOperator.__init__).parameters)
    assert {
        "runtime",
        "runtime_kind",
        "image",
        "program",
        "workers",
        "resources_per_node",
        "deferrable",
    } <= names
    refused = {"node_selector", "tolerations", "launcher", "worker", "backoff_limit", "scheduling_policy",
               "launcher_resources", "worker_resources", "gpus_per_worker",
               "ssh_auth_mount_path", "mpi_implementation", "clean_pod_policy"}  # fmt: skip
    assert not refused & names
    assert inspect.signature(TrainJobOperator.__init__).parameters["api_version"].default == API_TRAINJOB
    assert refused <= set(inspect.signature(MPIJobOperator.__init__).parameters)


def test_its_try_is_mpijob_operators():
    assert TrainJobOperator.execute is MPIJobOperator.execute
    assert TrainJobOperator.execute_complete is MPIJobOperator.execute_complete


def test_it_is_exported_and_listed_for_airflow():
    import airflow_mpi.operators as operators

    assert "TrainJobOperator" in operators.__all__
    modules = [m for op in get_provider_info()["operators"] for m in op["python-modules"]]
    assert "airflow_mpi.operators.trainjob" in modules


def test_the_render_command_prints_the_trainjob(tmp_path, capsys):
    dag = tmp_path / "train.py"
    dag.write_text(
        textwrap.dedent(
            f"""
            from airflow.providers.common.compat.sdk import DAG
            from airflow_mpi.operators import TrainJobOperator

            with DAG(dag_id="train", schedule=None, params={{"workers": 3}}):
                TrainJobOperator(task_id="pi", image="{IMAGE}", program="/home/mpiuser/pi", namespace="ml",
                                 workers="{{{{ params.workers }}}}")
            """
        )
    )
    assert main([str(dag), "pi"]) == 0
    manifest = yaml.safe_load(capsys.readouterr().out)
    assert manifest["kind"] == "TrainJob" and manifest["spec"]["trainer"]["numNodes"] == 3
    assert trainjob_schema_errors(manifest) == []


def test_the_lineage_facts_are_read_where_a_trainjob_keeps_them():
    op = TrainJobOperator(
        task_id="pi", image=IMAGE, workers=2, slots_per_worker=2, queue_name="q", namespace="ml"
    )
    facts = facts_of(op.build_manifest())
    assert facts == {"image": IMAGE, "workerImage": IMAGE, "workers": 2, "slotsPerWorker": 2, "queue": "q"}


@pytest.mark.parametrize(
    "status, verdict", [("success", "TrainJob ns/n: m"), ("failed", "TrainJob ns/n failed")]
)
def test_its_verdict_and_clean_up_name_the_trainjob_not_an_mpijob(monkeypatch, status, verdict):
    recorder = Recorder()
    monkeypatch.setattr(MPIJobOperator, "log", property(lambda self: recorder))
    op = TrainJobOperator(
        task_id="pi",
        image=IMAGE,
        program=["/home/mpiuser/pi"],
        workers=2,
        namespace="ns",
        on_finish_action="delete",
    )
    op.__dict__["hook"] = FakeSyncHook()
    monkeypatch.setattr(op, "_drain", _no_drain)
    event = result(status, condition="Complete" if status == "success" else "Failed")
    if status == "success":
        op.execute_complete(context(), event)
    else:
        with pytest.raises(AirflowException, match=verdict):
            op.execute_complete(context(), event)
    text = "\n".join(recorder.lines)
    assert "Deleting TrainJob ns/n (" in text and verdict in text and "MPIJob" not in text, text
