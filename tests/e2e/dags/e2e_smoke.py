"""A trivial DAG that proves the e2e harness (services, REST API, logs, XCom) without a cluster."""

from __future__ import annotations

from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="e2e_smoke",
    schedule=None,
    catchup=False,
    params={"greeting": Param("hello", type="string", minLength=1, description="What to say")},
    doc_md="Harness smoke test: one Python task that logs a line and returns a value.",
    tags=["e2e"],
):

    @task
    def say(params=None):
        print(f"smoke says {params['greeting']}")
        return {"greeting": params["greeting"]}

    say()
