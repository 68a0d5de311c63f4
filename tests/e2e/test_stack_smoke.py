"""The harness itself: real services come up, a DAG is triggered over REST, its log and XCom come back."""

from __future__ import annotations

import re


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


def test_each_api_server_start_warmed_the_execution_api_before_serving_a_task(airflow_stack, client):
    """Airflow builds its execution API's routes on that API's first request, inside the server's event loop (8 s of
    CPU, 30-40 s loaded: a task's first ``PATCH .../run`` timed out on it). The stack asks ``/execution/health`` at
    each start: in the API server's own access log, every process's first execution API request is that one."""
    client.wait_for_dags(["e2e_smoke"], timeout=120)
    run = client.trigger("e2e_smoke", {"greeting": "warm"})
    assert client.wait_run("e2e_smoke", run["dag_run_id"], timeout=120)["state"] == "success"
    log = (airflow_stack.log_dir / "api-server.log").read_text()
    starts = re.split(r"\n=== \S+ starting: ", log)[1:]
    assert starts, log[:2000]
    for served in starts:
        execution = re.findall(r"method=(\S+) path=(/execution/\S*) query=\S* status_code=(\d+)", served)
        assert execution, served[-2000:]
        assert execution[0] == ("GET", "/execution/health", "200"), execution[:3]
    assert any(path.endswith("/run") for _, path, _ in execution), execution  # a task ran on the last one
