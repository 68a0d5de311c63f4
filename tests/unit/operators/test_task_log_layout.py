"""What a try's task log looks like in Airflow's log views: the settings' provenance and the manifest folded in one
group, the ranks' output and attempt headers unfolded, and the verdict a framed line of its own, outside any group."""

from __future__ import annotations

import pytest

from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.version_compat import AirflowException
from airflow_mpi.wait.log_groups import ESCAPE
from tests.unit.log_views import Group, LevelRecorder, airflow2_view, airflow3_view, groups
from tests.unit.operators.test_mpijob_operator import context, make, result, wait_result

VIEWS = [airflow3_view, airflow2_view]


@pytest.fixture
def log(monkeypatch) -> LevelRecorder:
    recorder = LevelRecorder()
    monkeypatch.setattr(MPIJobOperator, "log", property(lambda self: recorder))
    return recorder


def _run(op: MPIJobOperator, monkeypatch, **outcome) -> dict:
    async def wait(name, namespace, submitted_at, deadline, uid=None):
        op.log.info("========== launcher attempt 1, pod %s-launcher-a ==========", name)
        op.log.info("[1,0]<stdout>:pi is approximately 3.14")
        return wait_result(name=name, namespace=namespace, **outcome)

    monkeypatch.setattr(op, "_wait", wait)
    return op.execute(context())


@pytest.mark.parametrize("view", VIEWS)
def test_settings_and_manifest_are_one_folded_group_and_the_verdict_ends_the_log(monkeypatch, log, view):
    op = make(command=["sh", "-c", "echo ::group::mine; echo ::endgroup::"])
    name = _run(op, monkeypatch)["name"]
    shown = view(log.records)
    (group,) = groups(shown)  # one group, not nested in another, nothing nested in it
    assert group.title == f"MPIJob ns/{name}: settings and manifest"
    text = "\n".join(group.items)
    assert (
        text.startswith("Each field: parameter > base manifest > default: ")
        and "workers=2 (parameter)" in text
    )
    assert "Retries: " in text and "MPIJob manifest:" in text and f"name: {name}" in text
    assert f"echo ::{ESCAPE}group::mine; echo ::{ESCAPE}endgroup::" in text  # the command, escaped, inside
    unfolded = [item for item in shown if not isinstance(item, Group)]
    header = f"========== launcher attempt 1, pod {name}-launcher-a =========="
    assert shown.index(group) < shown.index(header)  # before the job is submitted
    assert "[1,0]<stdout>:pi is approximately 3.14" in unfolded
    assert log.records[-1] == ("INFO", f"========== MPIJob ns/{name}: m ==========")


@pytest.mark.parametrize("view", VIEWS)
def test_a_failed_trys_verdict_is_an_error_line_outside_any_group_before_the_exception(
    monkeypatch, log, view
):
    op = make(get_logs=False)
    with pytest.raises(AirflowException) as err:
        op.execute_complete(
            context(), result("failed", message="BackoffLimitExceeded", launcher_exit_codes=[1])
        )
    verdict = "MPIJob ns/n failed: BackoffLimitExceeded; launcher exit codes: 1"
    assert log.records[-1] == ("ERROR", f"========== {verdict} ==========")
    assert str(err.value).splitlines()[0] == verdict  # the exception's message is unchanged
    assert groups(view(log.records)) == []


def test_a_manifest_that_cannot_be_built_leaves_no_group_open(monkeypatch, log):
    op = make()
    monkeypatch.setattr(op, "_log_manifest", lambda manifest: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        op.execute(context())
    assert log.records[-1] == ("INFO", "::endgroup::")
    log.error("Task failed with exception")  # what Airflow logs next: not folded
    assert airflow3_view(log.records)[-1] == "Task failed with exception"
