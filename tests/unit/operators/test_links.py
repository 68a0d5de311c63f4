"""Extra links: URL templates from the connection's extras, rendered by the worker into the XCom a link reads."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.get_provider_info import get_provider_info
from airflow_mpi.operators import HorovodJobOperator, MPIJobOperator, TrainJobOperator
from airflow_mpi.operators.links import (
    LINKS,
    LINKS_XCOM_KEY,
    TRAINJOB_LINKS,
    LinkValues,
    MPIJobLauncherPodLink,
    MPIJobLink,
    MPIJobLogsLink,
    render_links,
)
from airflow_mpi.sensors import MPIJobSensor
from tests.unit.fakes import FakeSyncHook
from tests.unit.operators.test_mpijob_operator import RUN_ID, make, wait_result

START = datetime(2026, 11, 28, 8, 0, tzinfo=UTC)
END = datetime(2026, 11, 28, 8, 5, tzinfo=UTC)
DASHBOARD = {
    "airflow_mpi_job_url": "https://dashboard.example/#/mpijob/{namespace}/{name}?uid={uid}",
    "airflow_mpi_pod_url": "https://dashboard.example/#/pod/{namespace}/{pod}",
    # a Loki query keeps its own braces: only the placeholders are replaced
    "airflow_mpi_logs_url": 'https://grafana.example/explore?expr={namespace="{namespace}",job="{name}"}'
    "&from={start_ms}&to={end_ms}",
}


def test_every_template_renders_with_the_values_the_try_knows():
    values = LinkValues(
        "team-a", "pi-1a2b3c4d", "u-1", ("pi-1a2b3c4d-launcher-x", "pi-1a2b3c4d-launcher-y"), START, END
    )
    assert render_links(DASHBOARD, values) == {
        "job": "https://dashboard.example/#/mpijob/team-a/pi-1a2b3c4d?uid=u-1",
        "pod": "https://dashboard.example/#/pod/team-a/pi-1a2b3c4d-launcher-y",  # the newest attempt's
        "logs": 'https://grafana.example/explore?expr={namespace="team-a",job="pi-1a2b3c4d"}'
        "&from=1795852800000&to=1795853100000",
    }


def test_a_link_whose_values_are_not_known_yet_is_left_out_and_a_running_job_ends_now():
    links = render_links(DASHBOARD, LinkValues("team-a", "pi", start=START))  # no uid, no pod, still running
    assert set(links) == {"logs"} and links["logs"].endswith("&from=1795852800000&to=now")


@pytest.mark.parametrize(
    "extras", [{}, {"airflow_mpi_job_url": ""}, {"airflow_mpi_job_url": "  "}, {"other": "x"}]
)
def test_no_template_no_link(extras):
    assert render_links(extras, LinkValues("ns", "pi", "u", ("p",), START, END)) == {}


class XComs:
    """Airflow's XCom.get_value over a dict (both versions' signature: keyword-only ti_key and key)."""

    def __init__(self, values: dict) -> None:
        self.values, self.asked = values, []

    def get_value(self, *, ti_key, key):
        self.asked.append((ti_key.run_id, ti_key.task_id, key))
        return self.values.get(key)


@pytest.fixture
def xcoms(monkeypatch) -> XComs:
    from airflow.providers.common.compat.sdk import XCom

    fake = XComs({})
    monkeypatch.setattr(XCom, "get_value", staticmethod(fake.get_value))
    return fake


TI_KEY = NS(dag_id="dag", task_id="mpi", run_id=RUN_ID, map_index=-1, try_number=1)


def test_each_link_reads_its_url_from_the_tasks_xcom(xcoms):
    xcoms.values[LINKS_XCOM_KEY] = {"job": "https://j", "pod": "https://p"}
    op = make()
    got = {link.name: link.get_link(op, ti_key=TI_KEY) for link in op.operator_extra_links}
    assert got == {"MPIJob": "https://j", "MPIJob launcher pod": "https://p", "MPIJob logs": ""}
    assert set(xcoms.asked) == {(RUN_ID, "mpi", LINKS_XCOM_KEY)}


def test_without_the_xcom_every_link_is_empty(xcoms):
    assert [link.get_link(make(), ti_key=TI_KEY) for link in make().operator_extra_links] == ["", "", ""]


class PushingTI(NS):
    def xcom_push(self, key, value):
        self.pushed.append((key, value))


def test_the_operator_keeps_the_job_link_at_submission_and_the_pod_link_at_the_end(monkeypatch):
    op = make(hook=FakeSyncHook(extras=DASHBOARD))
    ti = PushingTI(dag_id="dag", task_id="mpi", run_id=RUN_ID, map_index=-1, try_number=1, pushed=[])
    seen_while_running = []

    async def wait(name, namespace, submitted_at, deadline, uid=None):
        seen_while_running.extend(v for k, v in ti.pushed if k == LINKS_XCOM_KEY)
        return wait_result(
            name=name,
            launcher_pods=[f"{name}-launcher-a"],
            start_time="2026-11-28T08:00:00Z",
            completion_time="2026-11-28T08:05:00Z",
        )

    monkeypatch.setattr(op, "_wait", wait)
    name = op.execute({"ti": ti})["name"]
    (running,) = seen_while_running
    assert running["job"].startswith(f"https://dashboard.example/#/mpijob/ns/{name}?uid=")
    assert "pod" not in running and running["logs"].endswith("&to=now")
    ended = [v for k, v in ti.pushed if k == LINKS_XCOM_KEY][-1]
    assert ended["pod"] == f"https://dashboard.example/#/pod/ns/{name}-launcher-a"
    assert ended["logs"].endswith("&from=1795852800000&to=1795853100000")


def test_a_connection_without_templates_keeps_no_links(monkeypatch):
    op = make()
    ti = PushingTI(dag_id="dag", task_id="mpi", run_id=RUN_ID, map_index=-1, try_number=1, pushed=[])
    monkeypatch.setattr(op, "_wait", lambda *a, **kw: _done(wait_result()))
    op.execute({"ti": ti})
    assert [k for k, _ in ti.pushed if k == LINKS_XCOM_KEY] == []


async def _done(value):
    return value


def test_the_links_are_registered_and_on_every_task_class():
    registered = [
        getattr(importlib.import_module(path.rpartition(".")[0]), path.rpartition(".")[2])
        for path in get_provider_info()["extra-links"]
    ]
    assert registered == [MPIJobLink, MPIJobLauncherPodLink, MPIJobLogsLink, *TRAINJOB_LINKS]
    assert len({cls.name for cls in registered}) == 6  # the UI's buttons
    for task_class in (MPIJobOperator, HorovodJobOperator, MPIJobSensor):
        assert [type(link) for link in task_class.operator_extra_links] == list(LINKS)
    # a TrainJob's buttons name it, reading the same URLs
    assert [link.name for link in TrainJobOperator.operator_extra_links] == [
        "TrainJob",
        "TrainJob launcher pod",
        "TrainJob logs",
    ]
    assert [link.kind for link in TrainJobOperator.operator_extra_links] == [link.kind for link in LINKS]


def test_the_decorated_tasks_carry_the_links():
    from airflow_mpi.decorators.horovod import _HorovodDecoratedOperator
    from airflow_mpi.decorators.mpi import _MPIDecoratedOperator

    for task_class in (_MPIDecoratedOperator, _HorovodDecoratedOperator):
        names = [link.name for link in task_class.operator_extra_links]
        assert names == ["MPIJob", "MPIJob launcher pod", "MPIJob logs"]


def test_a_dag_with_the_links_survives_serialization():
    """The dag-processor stores the DAG serialized: Airflow 2.11 restores links only of registered classes."""
    from airflow.serialization import serialized_objects

    try:
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2.11
        from airflow import DAG

    with DAG("links", start_date=START, schedule=None) as dag:
        make(task_id="mpi", hook=FakeSyncHook())
    serializer = getattr(serialized_objects, "DagSerialization", None) or serialized_objects.SerializedDAG
    restored = serializer.from_dict(serializer.to_dict(dag)).task_dict["mpi"]
    assert sorted(link.name for link in restored.operator_extra_links) == [
        "MPIJob",
        "MPIJob launcher pod",
        "MPIJob logs",
    ]
