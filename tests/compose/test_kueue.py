"""Kueue in the users' stack: mpi_pi_queued sends more MPI pi jobs at once than the ClusterQueue's quota (cpu 2)
admits, so one waits in the LocalQueue while the others run; every job then runs its real MPI program once.
What is asserted comes from the task logs the API server serves (REST) and shows (the UI), as a user reads them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import quote

import pytest

from airflowstack.browser import chromium, logged_in_page

from .conftest import ARTIFACTS

DAG = "mpi_pi_queued"
JOBS, WORKERS = 3, 2  # 3 x (200m + 2 x 300m): the quota (cpu 2) admits two of them at a time
QUEUED = re.compile(
    r"MPIJob (\S+) is queued by Kueue in LocalQueue user-queue(?: \(ClusterQueue [^)]+\))?: (.+)"
)
ADMITTED = re.compile(
    r"MPIJob (\S+) was admitted by Kueue: ClusterQueue cluster-queue, flavor default-flavor"
    r" after (?:less than 1s|(?:(\d+)m)?(\d+)s) in the queue"
)
NO_QUOTA = "insufficient unused quota for cpu in flavor default-flavor"
RANK_LINE = re.compile(r"rank (\d+) of (\d+) on (\S+)")
PI_LINE = re.compile(r"pi is approximately (\d+\.\d+) \((\d+) ranks")
ATTEMPT = re.compile(r"========== launcher attempt (\d+) of (\d+), pod (\S+)")


@dataclass
class Job:
    map_index: int
    state: str
    lines: list[str]  # the task log, line by line

    def first(self, pattern: re.Pattern) -> tuple[int, re.Match] | None:
        return next(((i, m) for i, line in enumerate(self.lines) if (m := pattern.search(line))), None)

    def count(self, pattern: re.Pattern) -> int:
        return sum(1 for line in self.lines if pattern.search(line))

    def queued_for_quota(self) -> tuple[int, re.Match] | None:
        """The line saying its job is queued for want of quota (an earlier one may say only that it is queued)."""
        return next(
            ((i, m) for i, line in enumerate(self.lines) if (m := QUEUED.search(line)) and NO_QUOTA in m[2]),
            None,
        )

    def waited_for_quota(self) -> bool:
        """Logged "queued ... insufficient unused quota" for its job, then that job's admission."""
        queued, admitted = self.queued_for_quota(), self.first(ADMITTED)
        return bool(queued and admitted and queued[0] < admitted[0] and queued[1][1] == admitted[1][1])


@dataclass
class QueuedRun:
    run_id: str
    state: str
    jobs: list[Job]
    report: list[dict]


@pytest.fixture(scope="module")
def queued_run(client) -> QueuedRun:
    """One run of mpi_pi_queued over REST with the form's defaults spelled out, awaited to its end."""
    run_id = client.trigger(DAG, {"queue_name": "user-queue", "jobs": JOBS, "workers": WORKERS})["dag_run_id"]
    finished = client.wait_run(DAG, run_id, timeout=600)
    jobs = []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for ti in sorted(
        (t for t in client.task_instances(DAG, run_id) if t["task_id"] == "pi"), key=lambda t: t["map_index"]
    ):
        log = client.task_log(DAG, run_id, "pi", try_number=ti["try_number"], map_index=ti["map_index"])
        (ARTIFACTS / f"{DAG}-pi-{ti['map_index']}.log").write_text(log)
        jobs.append(Job(ti["map_index"], ti["state"], log.splitlines()))
    report = client.xcom(DAG, run_id, "report") if finished["state"] == "success" else []
    return QueuedRun(run_id, finished["state"], jobs, report)


def _tails(run: QueuedRun) -> str:
    return "\n\n".join(f"== pi[{j.map_index}] {j.state}\n" + "\n".join(j.lines[-60:]) for j in run.jobs)


def test_every_queued_job_runs_its_mpi_program_once(queued_run):
    assert queued_run.state == "success", _tails(queued_run)
    assert [j.map_index for j in queued_run.jobs] == list(range(JOBS))
    assert all(j.state == "success" for j in queued_run.jobs)
    names = set()
    for job in queued_run.jobs:
        # admitted once (nothing preempts jobs of one priority), then the launcher's lines, each exactly once
        assert job.count(ADMITTED) == 1, "\n".join(job.lines[-60:])
        admitted_at, admitted = job.first(ADMITTED)
        names.add(admitted[1])
        # one launcher, started after the admission (it waits for its workers: no attempt lost to their DNS names)
        ((attempt_at, attempt),) = [(i, m) for i, line in enumerate(job.lines) if (m := ATTEMPT.search(line))]
        assert attempt[1] == "1" and attempt_at > admitted_at, "\n".join(job.lines[-60:])
        ranks = [int(m[1]) for line in job.lines if (m := RANK_LINE.search(line))]
        assert sorted(ranks) == list(range(WORKERS)), "\n".join(job.lines[-60:])
        assert job.count(PI_LINE) == 1
        pi_at, pi = job.first(PI_LINE)
        assert (
            admitted_at < pi_at
            and int(pi[2]) == WORKERS
            and math.isclose(float(pi[1]), math.pi, abs_tol=0.01)
        )
    assert len(names) == JOBS  # one MPIJob per mapped task
    assert [(r["condition"], r["job"].split("/")[1], r["launcher_attempts"]) for r in queued_run.report] == [
        ("Succeeded", job.first(ADMITTED)[1][1], 1) for job in queued_run.jobs
    ]


def test_the_quota_holds_a_job_in_the_queue_until_an_admitted_one_finishes(queued_run):
    waited = [j for j in queued_run.jobs if j.waited_for_quota()]
    assert waited, _tails(queued_run)
    # two jobs fit the quota together: at most JOBS - 2 ever waited for it
    assert len(waited) <= JOBS - 2, _tails(queued_run)
    for job in waited:
        _, admitted = job.first(ADMITTED)
        assert admitted[3] is not None  # it did wait: a second or more, not "less than 1s"


def test_the_ui_task_log_shows_the_job_queued_then_admitted(compose_stack, queued_run):
    job = next((j for j in queued_run.jobs if j.waited_for_quota()), None)
    assert job is not None, _tails(queued_run)
    (_, queued), (_, admitted) = job.queued_for_quota(), job.first(ADMITTED)
    run_path = f"/dags/{DAG}/runs/{quote(queued_run.run_id, safe='')}"
    with chromium() as browser, logged_in_page(browser, compose_stack.base_url, "admin", "admin") as page:
        page.goto(f"/dags/{DAG}")  # the trigger form offers the queue by its name
        page.get_by_test_id("trigger-dag-button").click()
        form = page.get_by_role("dialog")
        form.get_by_text("Run Parameters").first.wait_for()
        assert form.locator("input[name=element_queue_name]").input_value() == "user-queue"
        # the log view renders only the rows in sight (and scrolls to the end): tall enough for the whole log
        page.set_viewport_size({"width": 1400, "height": 3200})
        page.goto(f"{run_path}/tasks/pi/mapped/{job.map_index}")
        page.get_by_text(PI_LINE).first.wait_for()  # the end of the log
        queued_row, admitted_row = (
            page.get_by_text(line, exact=False).first for line in (queued[0], admitted[0])
        )
        queued_row.wait_for()
        admitted_row.wait_for()
        assert queued_row.bounding_box()["y"] < admitted_row.bounding_box()["y"]  # shown in that order
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ui-mpi_pi_queued-log.png"), full_page=True)
