"""A small REST client for Airflow 3's public API (``/api/v2``) with token auth and deadline-bound waits."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx

from airflowstack._proc import StackError, wait_until

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
TERMINAL_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class ApiError(StackError):
    def __init__(self, response: httpx.Response):
        self.response = response
        self.status_code = response.status_code
        super().__init__(
            f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text[:2000]}"
        )


def _q(value: str) -> str:
    return quote(str(value), safe="")


class AirflowClient:
    def __init__(
        self, base_url: str, username: str = "admin", password: str = "admin", *, timeout: float = 30
    ):
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout)
        self._token: str | None = None

    def close(self) -> None:
        self.http.close()

    # -- plumbing ------------------------------------------------------------------------------------------------
    def login(self) -> str:
        r = self.http.post("/auth/token", json={"username": self.username, "password": self.password})
        if r.status_code not in (200, 201):
            raise ApiError(r)
        self._token = r.json()["access_token"]
        return self._token

    def request(
        self, method: str, path: str, *, expect: Iterable[int] | None = None, **kwargs
    ) -> httpx.Response:
        """Authenticated request; re-logs in once on 401; raises ApiError unless the status is 2xx or in ``expect``."""
        for attempt in (0, 1):
            if self._token is None:
                self.login()
            headers = {"Authorization": f"Bearer {self._token}", **kwargs.pop("headers", {})}
            r = self.http.request(method, path, headers=headers, **kwargs)
            if r.status_code == 401 and attempt == 0:
                self._token = None
                kwargs["headers"] = {k: v for k, v in headers.items() if k != "Authorization"}
                continue
            break
        if expect is not None and r.status_code in set(expect):
            return r
        if not r.is_success:
            raise ApiError(r)
        return r

    def get(self, path: str, **kwargs) -> Any:
        return self.request("GET", path, **kwargs).json()

    # -- health and DAGs -----------------------------------------------------------------------------------------
    def health(self) -> dict:
        r = self.http.get("/api/v2/monitor/health")
        r.raise_for_status()
        return r.json()

    def healthy(
        self, components: Iterable[str] = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    ) -> bool:
        h = self.health()
        return all((h.get(c) or {}).get("status") == "healthy" for c in components)

    def execution_api_ready(self) -> bool:
        """Whether the task execution API answers. Its first request builds the API's versioned routes (Cadwyn's
        ``_cadwyn_initialize``: 8 s of CPU on a quiet 2-core machine, 30-40 s on a loaded one) inside the API
        server's event loop, which serves nothing else meanwhile: a task's first ``PATCH .../run`` paid for it and
        timed out. Asked at start, the stack pays it before any task runs."""
        r = self.http.get("/execution/health")
        return r.status_code == 200 and r.json().get("status") == "healthy"

    def import_errors(self) -> list[dict]:
        return self.get("/api/v2/importErrors").get("import_errors", [])

    def dag(self, dag_id: str) -> dict | None:
        r = self.request("GET", f"/api/v2/dags/{_q(dag_id)}", expect=[404])
        return None if r.status_code == 404 else r.json()

    def wait_for_dags(self, dag_ids: Iterable[str], timeout: float = 120) -> None:
        """Wait until the dag-processor has serialized every DAG; fail early, with the error, on an import error."""
        dag_ids = list(dag_ids)

        def probe() -> bool:
            if errors := self.import_errors():
                raise StackError(
                    "DAG import errors: "
                    + "; ".join(f"{e.get('filename')}: {e.get('stack_trace')}" for e in errors)
                )
            return all(self.dag(d) is not None for d in dag_ids)

        _wait(probe, timeout, f"DAGs {dag_ids} to be parsed")

    def jobs(
        self, job_type: str, *, state: str | None = "running", started_after: datetime | None = None
    ) -> list[dict]:
        """The components' jobs of one type (``SchedulerJob``, ``TriggererJob``, ...), newest first: each process of a
        component records one at its start (``id``, ``start_date``, ``latest_heartbeat``). A SIGKILLed process's job
        stays ``running``, its heartbeat getting older."""
        params: dict[str, Any] = {"job_type": job_type, "order_by": "-id", "limit": 100}
        if state:
            params["job_state"] = state
        if started_after:
            params["start_date_gt"] = started_after.isoformat()
        return self.get("/api/v2/jobs", params=params).get("jobs", [])

    def variable(self, key: str) -> str | None:
        """An Airflow Variable's value, None when it does not exist."""
        r = self.request("GET", f"/api/v2/variables/{_q(key)}", expect=[404])
        return None if r.status_code == 404 else r.json().get("value")

    # -- runs ----------------------------------------------------------------------------------------------------
    def trigger(
        self,
        dag_id: str,
        conf: dict | None = None,
        *,
        run_id: str | None = None,
        expect: Iterable[int] | None = None,
    ) -> httpx.Response | dict:
        body: dict[str, Any] = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        r = self.request("POST", f"/api/v2/dags/{_q(dag_id)}/dagRuns", json=body, expect=expect)
        return r if expect is not None and r.status_code in set(expect) else r.json()

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}")

    def dag_runs(self, dag_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns", params={"limit": 100}).get("dag_runs", [])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances").get(
            "task_instances", []
        )

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}")

    def wait_run(
        self, dag_id: str, run_id: str, timeout: float = 300, states: Iterable[str] = TERMINAL_RUN_STATES
    ) -> dict:
        states = set(states)

        def probe() -> dict | None:
            run = self.dag_run(dag_id, run_id)
            return run if run["state"] in states else None

        try:
            return _wait(probe, timeout, f"run {dag_id}/{run_id} to reach {sorted(states)}")
        except StackError as exc:
            raise StackError(f"{exc}; task states: {self._ti_summary(dag_id, run_id)}") from None

    def wait_task(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        states: Iterable[str],
        timeout: float = 300,
        seen: list[str] | None = None,
        interval: float = 0.5,
    ) -> dict:
        """Poll a task instance until its state is in ``states``; every distinct state observed is appended to
        ``seen``."""
        states = set(states)

        def probe() -> dict | None:
            ti = self.task_instance(dag_id, run_id, task_id)
            if seen is not None and (not seen or seen[-1] != ti["state"]):
                seen.append(ti["state"])
            return ti if ti["state"] in states else None

        return _wait(
            probe,
            timeout,
            f"task {dag_id}/{run_id}/{task_id} to reach {sorted(states)} (seen {seen})",
            interval,
        )

    def _ti_summary(self, dag_id: str, run_id: str) -> dict:
        try:
            return {ti["task_id"]: ti["state"] for ti in self.task_instances(dag_id, run_id)}
        except Exception as exc:  # noqa: BLE001 - only used to enrich an error message
            return {"error": repr(exc)}

    # -- logs and XComs ------------------------------------------------------------------------------------------
    def task_log_events(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> list[str]:
        """The task log (worker and trigger parts) as its list of log events (messages may span lines)."""
        return [
            event_text(item) for item in self.task_log_items(dag_id, run_id, task_id, try_number, map_index)
        ]

    def task_log_items(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> list[Any]:
        """The task log's structured events as served (``timestamp``, ``event``, ...; plain text where not JSON)."""
        r = self.request(
            "GET",
            f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}/logs/{try_number}",
            params={"full_content": "true", "map_index": map_index},
            headers={"Accept": "application/json"},
        )
        return r.json().get("content", [])

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> str:
        return log_text(self.task_log_items(dag_id, run_id, task_id, try_number, map_index))

    def xcom(
        self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1
    ) -> Any:
        r = self.request(
            "GET",
            f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}/xcomEntries/{_q(key)}",
            params={"map_index": map_index, "deserialize": "true", "stringify": "false"},
        )
        return r.json().get("value")

    def event_logs(self, dag_id: str, event: str) -> list[dict]:
        """Audit log entries of one kind for a DAG (e.g. "state mismatch": the scheduler failed a task)."""
        return self.get("/api/v2/eventLogs", params={"dag_id": dag_id, "event": event, "limit": 100}).get(
            "event_logs", []
        )

    # -- interventions -------------------------------------------------------------------------------------------
    def set_task_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> Any:
        return self.request(
            "PATCH",
            f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}",
            json={"new_state": state},
        ).json()

    def clear_task(self, dag_id: str, run_id: str, task_ids: list[str]) -> Any:
        return self.request(
            "POST",
            f"/api/v2/dags/{_q(dag_id)}/clearTaskInstances",
            json={
                "dag_run_id": run_id,
                "task_ids": task_ids,
                "dry_run": False,
                "only_failed": False,
                "reset_dag_runs": True,
            },
        ).json()


def heartbeat_age(job: dict) -> float:
    """Seconds since a component's job (``AirflowClient.jobs``) last heartbeat, on this machine's clock (the local
    stacks share it)."""
    return (
        datetime.now(UTC) - datetime.fromisoformat(job["latest_heartbeat"].replace("Z", "+00:00"))
    ).total_seconds()


def log_records(items: list, text: str) -> list[tuple[str, str]]:
    """(timestamp, message) of each structured log event (``task_log_items``) whose message starts with ``text``."""
    return [
        (e["timestamp"], str(e["event"]))
        for e in items
        if isinstance(e, dict) and str(e.get("event", "")).startswith(text)
    ]


def log_text(items: list) -> str:
    """A task log's events (``task_log_items``) as the UI shows the whole log."""
    return "\n".join(event_text(item) for item in items)


def event_text(item: Any) -> str:
    """One log event as the UI shows it: the message, then the exception (type: value) it carries, if any."""
    if not isinstance(item, dict):
        return str(item)
    text = str(item.get("event", ""))
    for exc in item.get("error_detail") or []:
        if isinstance(exc, dict) and exc.get("exc_type"):
            text += f"\n{exc['exc_type']}: {exc.get('exc_value', '')}"
    return text


def _wait(probe, timeout: float, what: str, interval: float = 0.5):
    # a poll whose answer came too late (an API server starved on a loaded machine) is "not yet", not an error
    return wait_until(probe, timeout=timeout, interval=interval, what=what, ignore=(httpx.TimeoutException,))
