"""operators/lineage.py: the ``mpiJob`` OpenLineage run facet, as Airflow's openlineage provider gets it after a try
(its ExtractorManager, the listener's path) and sends it (the OpenLineage client's file transport, read back)."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest
from airflow.providers.openlineage.extractors.manager import ExtractorManager  # the openlineage extra
from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter
from airflow.utils.state import TaskInstanceState  # as the provider imports it
from openlineage.client import OpenLineageClient
from openlineage.client.transport.file import FileConfig, FileTransport

from airflow_mpi.operators.horovod import HorovodJobOperator
from airflow_mpi.version_compat import AirflowException
from airflow_mpi.wait.contract import WaitResult
from tests.unit.fakes import FakeSyncHook
from tests.unit.operators.test_deferral_resume import deferred, drains, resume  # noqa: F401 (a fixture)
from tests.unit.operators.test_mpijob_operator import context, make, result

SERVER = "https://10.96.0.1:443"
TI = NS(dag_id="dag", task_id="mpi", run_id="run", map_index=-1, try_number=1)


def with_server(op):
    op.hook.api_client = NS(configuration=NS(host=SERVER))  # what the hook's client was configured with
    return op


def lineage_of(op, state: TaskInstanceState):
    """The lineage as the provider's listener extracts it after the try (its DefaultExtractor)."""
    return ExtractorManager().extract_metadata(NS(run_id="run"), op, state, task_instance=TI)


def extracted(op, state: TaskInstanceState) -> dict:
    return lineage_of(op, state).run_facets


def sent(tmp_path, lineage, *, failed: bool) -> dict:
    """The event the provider's adapter sends with ``lineage``, through the OpenLineage client's file transport."""
    log = tmp_path / "events.jsonl"
    client = OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(log), append=True)))
    adapter = OpenLineageAdapter(client=client)
    common = dict(
        run_id="01939d6c-0000-7000-8000-000000000001",
        job_name="dag.mpi",
        end_time="2026-11-28T10:05:00+00:00",
        task=lineage,
        nominal_start_time=None,
        nominal_end_time=None,
        owners=[],
        tags=[],
        job_description=None,
    )
    if failed:
        adapter.fail_task(**common, error="boom")
    else:
        adapter.complete_task(**common)
    (line,) = log.read_text().splitlines()
    return json.loads(line)


def test_a_succeeded_try_reports_its_job_through_the_providers_listener_path(tmp_path, monkeypatch):
    op = with_server(make(queue_name="user-queue", slots_per_worker=2, hook=FakeSyncHook()))

    async def wait(name, namespace, submitted_at, deadline, uid=None):
        return WaitResult.from_event(
            result(name=name, uid="u-1", launcher_attempts=1, launcher_exit_codes=[0])
        )

    monkeypatch.setattr(op, "_wait", wait)
    op.execute(context())
    facets = extracted(op, TaskInstanceState.SUCCESS)
    facet = facets["mpiJob"]
    assert (facet.cluster, facet.namespace, facet.kind, facet.apiVersion) == (
        SERVER,
        "ns",
        "MPIJob",
        "kubeflow.org/v2beta1",
    )
    assert facet.name == op._job[0] and facet.name.startswith("dag-mpi-")
    assert (facet.uid, facet.image, facet.workerImage, facet.workers, facet.slotsPerWorker) == (
        "u-1",
        "mpi:1",
        "mpi:1",
        2,
        2,
    )
    assert (facet.queue, facet.launcherAttempts, facet.launcherExitCodes) == ("user-queue", 1, [0])
    assert (facet.outcome, facet.failureCause) == ("success", None)
    event = sent(tmp_path, lineage_of(op, TaskInstanceState.SUCCESS), failed=False)
    assert event["eventType"] == "COMPLETE"
    assert event["run"]["facets"]["mpiJob"]["queue"] == "user-queue"
    assert event["run"]["facets"]["mpiJob"]["_schemaURL"].endswith("RunFacet")


def test_a_failed_deferred_try_reports_the_failure_cause_from_the_triggers_event(tmp_path, drains):
    deferral = deferred(make(deferrable=True, retries=1, image="train:7"), context())
    resumed = with_server(
        make(deferrable=True, retries=1, image="train:7")
    )  # a fresh worker: no manifest built
    event = result(
        "failed",
        message="BackoffLimitExceeded",
        uid="u-2",
        launcher_attempts=2,
        launcher_exit_codes=[137, 137],
    )
    event["failure"] = {"causes": ["worker pod x: OOMKilled"], "tails": [], "kind": "oom"}
    with pytest.raises(AirflowException):
        resume(resumed, deferral, event, context())
    facet = extracted(resumed, TaskInstanceState.FAILED)["mpiJob"]
    assert (facet.name, facet.uid, facet.image, facet.workers) == ("n", "u-2", "train:7", 2)
    assert (facet.outcome, facet.failureCause, facet.launcherAttempts) == ("failed", "oom", 2)
    sent_event = sent(tmp_path, lineage_of(resumed, TaskInstanceState.FAILED), failed=True)
    assert sent_event["eventType"] == "FAIL"
    assert sent_event["run"]["facets"]["mpiJob"]["failureCause"] == "oom"
    assert sent_event["run"]["facets"]["mpiJob"]["launcherExitCodes"] == [137, 137]


def test_a_horovod_try_refused_before_its_wait_reports_the_spec_it_submitted():
    from kubernetes.client.exceptions import ApiException

    refused = FakeSyncHook(create_error=ApiException(status=422, reason="Unprocessable Entity"))
    op = HorovodJobOperator(
        task_id="hvd", image="horovod:1", program=["python", "train.py"], workers=3, namespace="ns"
    )
    op.__dict__["hook"] = refused  # no client configured either: no cluster, and no failure for it
    with pytest.raises(AirflowException):
        op.execute(context())
    facet = extracted(op, TaskInstanceState.FAILED)["mpiJob"]
    assert (facet.cluster, facet.image, facet.workers, facet.name, facet.outcome) == (
        None,
        "horovod:1",
        3,
        None,
        None,
    )


@pytest.mark.parametrize("decorator", ["mpi", "horovod"])
def test_a_decorated_functions_try_reports_as_its_operator(decorator):
    from tests.unit.operators.test_task_decorators import build

    op = build(decorator)
    with pytest.raises(AirflowException):
        op._finish(WaitResult.from_event(result("failed", launcher_exit_codes=[1], uid="u-3")))
    facet = extracted(op, TaskInstanceState.FAILED)["mpiJob"]
    assert (facet.name, facet.uid, facet.outcome, facet.failureCause) == ("n", "u-3", "failed", "program")


def test_the_cluster_is_the_api_server_the_hooks_kubeconfig_names(tmp_path):
    import yaml

    from airflow_mpi.hooks import MPIJobHook
    from airflow_mpi.operators.lineage import api_server

    cluster = {"name": "c", "cluster": {"server": "https://from-file:6443"}}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "clusters": [cluster],
        "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    assert api_server(MPIJobHook(conn_id=None, config_file=str(path))) == "https://from-file:6443"
    assert api_server(FakeSyncHook()) is None  # no client: the facet goes without
