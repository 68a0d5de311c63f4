"""The harness itself: real services come up, a DAG is triggered over REST, its log and XCom come back."""

from __future__ import annotations


def test_health_reports_every_component(client):
    health = client.health()
    for component in ("metadatabase", "scheduler", "triggerer", "dag_processor"):
        assert health[component]["status"] == "healthy", health


def test_trigger_trivial_dag(client):
    client.wait_for_dags(["e2e_smoke"], timeout=120)
    run = client.trigger("e2e_smoke", {"greeting": "bonjour"})
    finished = client.wait_run("e2e_smoke", run["dag_run_id"], timeout=120)
    assert finished["state"] == "success"
    assert "smoke says bonjour" in client.task_log("e2e_smoke", run["dag_run_id"], "say")
    assert client.xcom("e2e_smoke", run["dag_run_id"], "say") == {"greeting": "bonjour"}


def test_conf_violating_param_schema_is_refused(client):
    client.wait_for_dags(["e2e_smoke"], timeout=120)
    before = len(client.dag_runs("e2e_smoke"))
    r = client.trigger("e2e_smoke", {"greeting": ""}, expect=[400])
    assert r.status_code == 400, r.text
    assert len(client.dag_runs("e2e_smoke")) == before
