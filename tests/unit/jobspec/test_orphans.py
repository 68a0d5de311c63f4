from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from airflow_mpi.jobspec.naming import (
    DEPLOYMENT_LABEL,
    TASK_INSTANCE_ID_ANNOTATION,
    TRY_NUMBER_LABEL,
    identity_annotations,
    identity_labels,
)
from airflow_mpi.jobspec.orphans import (
    FINISHED_TI_STATES,
    JobTry,
    TaskKey,
    TryState,
    deployment_selector,
    is_orphan,
    job_try,
    orphans,
    task_key_of,
    unsure,
)

RUN = "manual__2026-11-23T10:00:00+00:00"
KEY = TaskKey("dag", "train", RUN, -1)
OURS, THEIRS = "prod-a1", "staging-b2"


def mpijob(
    *conditions,
    key=KEY,
    deleting=False,
    managed=True,
    deployment: str | None = OURS,
    try_number=1,
    ti_id: str | None = None,
    recorded=True,
):
    """A job as try ``try_number`` (id ``ti_id``) of ``key`` makes it; ``recorded=False``: an older release's job,
    which does not say which try made it."""
    labels = identity_labels(*key, try_number, deployment) if managed else {"team": "x"}
    annotations = identity_annotations(*key, try_number, ti_id)
    if not recorded:
        labels.pop(TRY_NUMBER_LABEL, None)
        annotations = {
            k: v for k, v in annotations.items() if k not in (TRY_NUMBER_LABEL, TASK_INSTANCE_ID_ANNOTATION)
        }
    metadata = {"name": "j", "namespace": "ns", "labels": labels, "annotations": annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return {
        "metadata": metadata,
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def test_task_key_comes_from_the_raw_identity_annotations_of_this_deployments_jobs_only():
    assert task_key_of(mpijob("Created"), OURS) == KEY
    assert task_key_of(mpijob("Created", managed=False), OURS) is None
    assert task_key_of(mpijob("Created", deployment=THEIRS), OURS) is None
    assert (
        task_key_of(mpijob("Created", deployment=None), OURS) is None
    )  # a rendered manifest, an older release
    mapped = TaskKey("dag", "train", RUN, 3)
    assert task_key_of(mpijob(key=mapped), OURS) == mapped


def test_the_try_that_made_a_job_comes_from_its_label_and_annotation():
    assert job_try(mpijob(try_number=3, ti_id="0193-uuid")) == JobTry(3, "0193-uuid")
    assert job_try(mpijob(try_number=2)) == JobTry(2, None)
    assert job_try(mpijob(recorded=False)) == JobTry(None, None)
    disagreeing = mpijob(try_number=2)
    disagreeing["metadata"]["annotations"][TRY_NUMBER_LABEL] = "1"
    assert job_try(disagreeing).try_number is None


@pytest.mark.parametrize("state", sorted(FINISHED_TI_STATES))
def test_live_job_of_a_finished_task_instance_is_an_orphan(state):
    assert is_orphan(mpijob("Created", "Running"), OURS, TryState(state, 1))
    assert is_orphan(mpijob(), OURS, TryState(state, 1))  # not even Created yet
    assert is_orphan(
        mpijob(recorded=False), OURS, TryState(state, 1)
    )  # the database judges an older release's job
    assert is_orphan(
        mpijob(try_number=1), OURS, TryState(state, 2)
    )  # a later try reattached to it, then finished


@pytest.mark.parametrize(
    "state",
    ["running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting", None],
)
def test_job_of_a_task_instance_that_may_still_run_is_kept(state):
    assert not is_orphan(mpijob("Created", "Running"), OURS, TryState(state, 1))


def test_live_job_of_a_deleted_task_instance_is_an_orphan():
    assert is_orphan(mpijob("Created"), OURS, None)


@pytest.mark.parametrize(
    "job",
    [
        mpijob("Created", "Succeeded"),
        mpijob("Created", "Failed"),
        mpijob("Created", deleting=True),
        mpijob("Created", managed=False),
        mpijob("Created", "Running", deployment=THEIRS),
        mpijob("Created", "Running", deployment=None),
    ],
)
def test_finished_deleting_or_foreign_jobs_are_never_orphans(job):
    """Another deployment's live job is never ours, whatever our database says of a task of the same name."""
    failed = TryState("failed", 1)
    assert not is_orphan(job, OURS, None) and not is_orphan(job, OURS, failed, failed)


def test_orphans_picks_by_each_jobs_own_task_instance_and_deployment():
    other = TaskKey("dag", "eval", RUN, -1)
    jobs = [
        mpijob("Created", key=KEY),
        mpijob("Created", key=other),
        mpijob("Created", key=KEY, deployment=THEIRS),
    ]
    assert orphans(jobs, OURS, {KEY: TryState("failed", 1), other: TryState("running", 1)}) == [jobs[0]]
    # a finish request speaks for its own task instance only
    assert orphans(
        jobs, OURS, {KEY: TryState("running", 1), other: TryState("running", 1)}, {KEY: TryState("failed", 1)}
    ) == [jobs[0]]


def test_the_sweeps_selector_names_the_deployment():
    assert deployment_selector(OURS) == f"app.kubernetes.io/managed-by=airflow-mpi,{DEPLOYMENT_LABEL}={OURS}"


# A finish request is judged when the sweeper gets to it: the state it carries is about one try.


@pytest.mark.parametrize("ids", [("ti-1", "ti-2"), (None, None)], ids=["airflow-3", "airflow-2"])
def test_a_stale_request_never_deletes_the_job_a_newer_try_made_under_the_same_name(ids):
    """Issue 32, item 4: try 1 marked failed, cleared; try 2 made its job (same name) and runs; then the request of
    try 1 is handled: the database says running, the job says try 2 made it."""
    stale = TryState("failed", 1, ids[0])
    assert not is_orphan(
        mpijob("Created", "Running", try_number=2, ti_id=ids[1]), OURS, TryState("running", 2, ids[1]), stale
    )


@pytest.mark.parametrize("ids", [("ti-1", "ti-1b"), (None, None)], ids=["airflow-3", "airflow-2"])
def test_a_request_still_deletes_the_job_of_its_own_try_after_a_clear(ids):
    """Try 1 marked failed, cleared (Airflow 3 gives the task instance a new id), try 2 not started yet: the job try
    1 made stops, as asked."""
    job = mpijob("Created", "Running", try_number=1, ti_id=ids[0])
    assert is_orphan(job, OURS, TryState(None, 1, ids[1]), TryState("failed", 1, ids[0]))
    assert is_orphan(
        job, OURS, TryState("queued", 2, "ti-2" if ids[0] else None), TryState("failed", 1, ids[0])
    )


def test_a_request_not_committed_yet_wins_over_the_database_for_its_own_try():
    job = mpijob("Created", "Running", try_number=2, ti_id="ti-2")
    assert is_orphan(job, OURS, TryState("deferred", 2, "ti-2"), TryState("failed", 2, "ti-2"))


def test_a_request_judges_an_older_tries_job_only_while_the_database_holds_the_reported_try():
    """Try 2 reattached to try 1's live job and was marked failed: that job stops; once a clear replaced try 2
    (Airflow 3: a new id), the stale request leaves it to the next try, which reattaches to it."""
    job = mpijob("Created", "Running", try_number=1, ti_id="ti-1")
    assert is_orphan(job, OURS, TryState("running", 2, "ti-2"), TryState("failed", 2, "ti-2"))
    assert not is_orphan(job, OURS, TryState(None, 2, "ti-2b"), TryState("failed", 2, "ti-2"))


def test_a_request_about_another_dag_run_under_the_same_run_id_deletes_nothing():
    """The run was deleted and made again: its task instance has another id, and maybe an earlier try number."""
    job = mpijob("Created", "Running", try_number=1, ti_id="new-1")
    assert not is_orphan(job, OURS, TryState("running", 1, "new-1"), TryState("failed", 1, "old-1"))
    assert not is_orphan(job, OURS, TryState("running", 1, "new-1"), TryState("failed", 3, "old-3"))
    assert not is_orphan(mpijob("Created", try_number=1), OURS, TryState("running", 1), TryState("failed", 3))


def test_an_older_releases_job_is_left_to_the_database_and_the_sweep_can_say_why():
    job, failed = mpijob("Created", "Running", recorded=False), TryState("failed", 1, "ti-1")
    assert not is_orphan(job, OURS, TryState("running", 1, "ti-1"), failed)
    assert unsure(job, failed) and not unsure(mpijob("Created"), failed) and not unsure(job, None)
    assert is_orphan(job, OURS, TryState("failed", 1, "ti-1"), failed)


def test_a_job_newer_than_the_database_says_is_left_alone():
    assert not is_orphan(mpijob("Created", try_number=3), OURS, TryState("failed", 2))


class TaskInstanceLife(RuleBasedStateMachine):
    """One task instance over time: its database row, its live job (one name for every try) and the finish requests
    queued for the sweeper, which gets to the oldest one whenever it likes. ``mode``: "ids" (Airflow 3: a new id at
    each clear), "numbers" (2.11: requests carry no id), "unrecorded" (jobs of an older release: no try label/id)."""

    @initialize(mode=st.sampled_from(["ids", "numbers", "unrecorded"]))
    def start(self, mode: str) -> None:
        self.mode, self.try_number, self.ti_id, self.clears = mode, 1, "ti-0", 0
        self.committed: str | None = "running"  # the database's state
        self.pending = False  # marked failed: the listener saw it, the database has not committed it yet
        self.job: JobTry | None = JobTry(1, self.ti_id)
        self.queue: list[TryState] = []

    def ids(self) -> str | None:
        return self.ti_id if self.mode == "ids" else None

    @precondition(lambda self: self.committed == "running" and not self.pending)
    @rule()
    def mark_failed(self) -> None:
        self.pending = True
        self.queue.append(TryState("failed", self.try_number, self.ids()))

    @precondition(lambda self: self.pending)
    @rule()
    def commit(self) -> None:
        self.committed, self.pending = "failed", False

    @precondition(lambda self: self.committed in FINISHED_TI_STATES)
    @rule()
    def clear(self) -> None:
        self.committed, self.clears = None, self.clears + 1
        self.ti_id = (
            f"ti-{self.clears}"  # Airflow 3: prepare_db_for_next_try gives the task instance a new id
        )

    @precondition(lambda self: self.committed is None)
    @rule()
    def next_try(self) -> None:
        """Scheduled (try + 1) and started: it reattaches to the live job, or makes one under the same name."""
        self.try_number, self.committed = self.try_number + 1, "running"
        self.job = self.job or JobTry(self.try_number, self.ti_id)

    @precondition(lambda self: self.job is not None)
    @rule()
    def job_ends(self) -> None:
        """Its own try deleted it (a trigger's on_kill), or it ended: gone from the sweep's view."""
        self.job = None

    @precondition(lambda self: self.queue)
    @rule()
    def sweep(self) -> None:
        request = self.queue.pop(0)
        if self.job is None:
            return
        made, db = self.job, TryState(self.committed, self.try_number, self.ids())
        job = mpijob(
            "Created",
            "Running",
            try_number=made.try_number,
            ti_id=made.ti_id,
            recorded=self.mode != "unrecorded",
        )
        deleted = is_orphan(job, OURS, db, request)
        if db.state in FINISHED_TI_STATES:
            assert deleted, "the database says finished"
        elif self.mode == "unrecorded":
            assert not deleted, "an older release's job was deleted on a request alone"
        elif made.try_number > request.try_number:
            assert not deleted, f"a request of try {request.try_number} deleted try {made.try_number}'s job"
        elif made.try_number == request.try_number:
            assert deleted, "the request's own try's job was kept"
        if deleted:
            self.job = None

    def teardown(self) -> None:
        while getattr(self, "queue", None):  # the sweeper gets to every request in the end
            self.sweep()


TestTaskInstanceLife = TaskInstanceLife.TestCase  # any order of marks, commits, clears, tries and sweeps
