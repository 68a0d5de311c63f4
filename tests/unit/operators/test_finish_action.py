"""``on_finish_action``: a closed set of choices that also accepts cncf.kubernetes' spellings
(``keep_pod``, ...), each meaning what its own spelling means."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec import MPIJobValidationError
from airflow_mpi.operators.finish_action import OnFinishAction
from airflow_mpi.version_compat import AirflowException
from tests.unit.operators.test_mpijob_operator import _no_drain, context, make, result

ALIASES = [("keep_pod", "keep"), ("delete_succeeded_pod", "delete_succeeded"), ("delete_pod", "delete")]


@pytest.mark.parametrize("alias, action", ALIASES)
def test_an_alias_names_the_same_action(alias, action):
    assert OnFinishAction(alias) is OnFinishAction(action)
    assert OnFinishAction(alias) == action  # compares as its canonical text


@pytest.mark.parametrize("alias, action", ALIASES)
def test_an_alias_is_accepted_at_parse_time_and_normalised_before_the_finish(alias, action):
    op = make(on_finish_action=alias, get_logs=False)  # parse time: no error
    op.execute_complete(context(), result())
    assert op.on_finish_action == action and type(op.on_finish_action) is str


@pytest.mark.parametrize(
    "given, outcome, deleted",
    [
        ("keep_pod", "success", False),
        ("keep_pod", "failed", False),
        ("delete_succeeded_pod", "success", True),
        ("delete_succeeded_pod", "failed", False),
        ("delete_pod", "success", True),
        ("delete_pod", "failed", True),
    ],
)
def test_an_alias_cleans_up_as_its_action_does(monkeypatch, given, outcome, deleted):
    op = make(on_finish_action=given)
    monkeypatch.setattr(op, "_drain", _no_drain)
    if outcome == "success":
        op.execute_complete(context(), result())
    else:
        with pytest.raises(AirflowException):
            op.execute_complete(context(), result(outcome, message="BackoffLimitExceeded"))
    assert op.hook.deleted == ([("n", "ns")] if deleted else [])


def test_a_templated_alias_is_normalised_once_rendered():
    op = make(on_finish_action="{{ params.action }}")  # parse time: accepted
    op.render_template_fields({"params": {"action": "delete_pod"}})
    op.build_manifest(context())
    assert op.on_finish_action == "delete"


def test_an_unknown_value_names_the_parameter_the_value_and_every_accepted_spelling():
    with pytest.raises(MPIJobValidationError) as err:
        make(on_finish_action="keep_job")
    assert [(e.field, e.value) for e in err.value.errors] == [("on_finish_action", "keep_job")]
    assert (
        "on_finish_action='keep_job': must be one of keep, delete_succeeded, delete, keep_pod, "
        "delete_succeeded_pod, delete_pod"
    ) in str(err.value)


def test_an_unknown_templated_value_fails_once_rendered():
    op = make(on_finish_action="{{ params.action }}")
    op.on_finish_action = "delete_active_pod"  # cncf.kubernetes' one spelling without a counterpart here
    with pytest.raises(MPIJobValidationError, match="on_finish_action='delete_active_pod': must be one of"):
        op.build_manifest(context())
