"""The claims that keep a deployment built from a copy of another's database off the original's jobs (issue 32
items 1 and 7), with the cluster faked (tests/unit/fakes.py): what a task and the sweeper decide, and that nothing
is created, reattached to or deleted where they refuse."""

from __future__ import annotations

import logging
from datetime import datetime
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.hooks import identity_claims
from airflow_mpi.jobspec.claims import INSTALLATION_LABEL, claim_body, claim_name
from airflow_mpi.jobspec.naming import identity_annotations, identity_labels
from airflow_mpi.jobspec.orphans import TaskKey
from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.plugins import orphan_listener
from airflow_mpi.version_compat import AirflowFailException
from tests.unit.fakes import FakeSyncHook

PROD, STAGING = "prod-installation", "staging-installation"
ID = "tests-in-process"  # tests/conftest.py pins it, and the installation (tests-in-process) for operators
RUN = "scheduled__2026-11-24T00:00:00+00:00"
KEY = TaskKey("d", "hold", RUN, -1)


def claim(hook, deployment=ID, installation=PROD, namespace="ns"):
    hook.claims[(namespace, claim_name(deployment))] = claim_body(deployment, installation, namespace)


def add_job(hook, name, key=KEY, *conditions, deployment=ID, namespace="ns"):
    hook.jobs[(namespace, name)] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": identity_labels(*key, 1, deployment),
            "annotations": identity_annotations(*key, 1),
        },
        "status": {
            "conditions": [{"type": c, "status": "True"} for c in conditions or ("Created", "Running")]
        },
    }


# ------------------------------------------------------------------------------------------------ tasks
def test_the_first_task_in_a_namespace_claims_it_and_a_copy_of_its_database_is_refused():
    hook = FakeSyncHook()
    assert identity_claims.task_refusal(hook, "ns", ID, PROD) is None
    assert hook.claims[("ns", claim_name(ID))]["spec"]["holderIdentity"] == PROD
    assert identity_claims.task_refusal(hook, "ns", ID, PROD) is None  # its later tasks: one list, no create

    refusal = identity_claims.task_refusal(hook, "ns", ID, STAGING)
    assert refusal.startswith(
        f"airflow-mpi: namespace 'ns' is claimed for deployment id {ID!r} by installation {PROD!r}"
    )
    assert f"this deployment's installation is {STAGING!r}: its database is a copy" in refusal
    assert "[airflow_mpi] deployment_id" in refusal and "airflow_mpi_deployment_id" in refusal
    assert "[airflow_mpi] installation" in refusal
    assert (
        hook.claims[("ns", claim_name(ID))]["spec"]["holderIdentity"] == PROD
    )  # the claim is not taken over


class RacingHook(FakeSyncHook):
    """Another first user's claim lands between this one's read (none) and its create (409)."""

    def __init__(self, other_installation):
        super().__init__()
        self.other = other_installation

    def _run(self, namespace, plan):
        call = plan(self.resolve_namespace(namespace))
        if call.method == "create_namespaced_custom_object" and self.other:
            claim(self, installation=self.other, namespace=call.kwargs["namespace"])
            self.other = None
        return super()._run(namespace, lambda ns: call)


@pytest.mark.parametrize(("other", "refused"), [(PROD, False), (STAGING, True)])
def test_of_two_first_users_the_api_server_keeps_one_claim_and_the_other_reads_it(other, refused):
    hook = RacingHook(other)
    assert (identity_claims.task_refusal(hook, "ns", ID, PROD) is not None) is refused
    assert hook.claims[("ns", claim_name(ID))]["spec"]["holderIdentity"] == other


def test_a_task_refuses_while_jobs_of_an_id_its_installation_held_before_still_run():
    """The id Variable deleted (or changed) while jobs of the old id run: a new id would leave them unswept and
    start a second job beside them; once they are finished, the new id goes ahead."""
    hook = FakeSyncHook()
    claim(hook, deployment="old-id", installation=PROD)
    claim(hook, deployment="someone-elses", installation=STAGING)
    add_job(hook, "old", deployment="old-id")
    add_job(hook, "theirs", deployment="someone-elses")
    refusal = identity_claims.task_refusal(hook, "ns", "new-id", PROD)
    assert (
        "id 'old-id': old" in refusal and "its id is 'new-id'" in refusal and "someone-elses" not in refusal
    )
    assert ("ns", claim_name("new-id")) not in hook.claims
    hook.jobs[("ns", "old")]["status"]["conditions"].append({"type": "Succeeded", "status": "True"})
    assert identity_claims.task_refusal(hook, "ns", "new-id", PROD) is None
    assert identity_claims.live_claims(hook, "ns", STAGING) == {"someone-elses": ["theirs"]}


def operator(hook):
    op = MPIJobOperator(task_id="hold", image="mpi:1", command=["sleep", "3600"], workers=1, namespace="ns")
    op.__dict__["hook"] = hook
    return op


def context():
    return {"ti": NS(dag_id=KEY.dag_id, task_id=KEY.task_id, run_id=RUN, map_index=-1, try_number=1)}


def test_a_task_of_a_copied_database_neither_creates_nor_reattaches_nor_deletes():
    """Prod's job of the same task instance runs (same id, same name); staging's task fails for good, naming both
    installations, and prod's job is neither adopted nor deleted; the same on resuming a copied deferral."""
    hook = FakeSyncHook()
    claim(hook, installation="prod-installation")  # tests/conftest.py: this deployment is tests-in-process
    op = operator(hook)
    manifest = op.build_manifest(context())
    hook.jobs[("ns", manifest["metadata"]["name"])] = {
        **manifest,
        "metadata": {**manifest["metadata"], "uid": "prod-uid"},
    }
    op._wait = lambda *args, **kwargs: pytest.fail("staging's task follows prod's job")
    with pytest.raises(
        AirflowFailException,
        match=r"by installation 'prod-installation'.*installation is "
        r"'tests-in-process'",
    ):
        op.execute(context())
    event = {"status": "success", "name": manifest["metadata"]["name"], "namespace": "ns", "uid": "prod-uid"}
    with pytest.raises(AirflowFailException, match="prod-installation"):
        op.execute_complete(context(), event)
    op.on_kill()
    assert hook.created == [] and hook.deleted == [] and len(hook.jobs) == 1


# ------------------------------------------------------------------------------------------------ the sweeper
@pytest.fixture
def sweeper(monkeypatch):
    """sweep_places against one fake cluster holding the job of KEY (its task instance gone from this database:
    what a copy's database says of every run the original started after the copy)."""
    import airflow_mpi.hooks.orphan_sweep as orphan_sweep

    hook = FakeSyncHook()
    add_job(hook, "j")
    monkeypatch.setattr(orphan_sweep, "BudgetedMPIJobHook", lambda conn_id, api_version, deadline: hook)
    record = {
        "name": "j",
        "namespace": "ns",
        "kubernetes_conn_id": "k8s",
        "api_version": "kubeflow.org/v2beta1",
    }

    def sweep(installation):
        return orphan_listener.sweep_places([(KEY, record)], ID, lambda keys: {}, installation=installation)

    hook.sweep = sweep
    return hook


def test_a_sweeper_whose_installation_is_not_the_claims_deletes_nothing(sweeper, caplog):
    claim(sweeper, installation=PROD)
    with caplog.at_level(logging.ERROR):
        assert sweeper.sweep(STAGING) == []
    assert list(sweeper.jobs) == [("ns", "j")] and sweeper.deleted == []
    assert f"by installation {PROD!r}" in caplog.text and "Not sweeping it" in caplog.text


def test_a_sweeper_claims_a_namespace_first_used_by_it_and_sweeps_there(sweeper):
    assert sweeper.sweep(PROD) == ["j"]
    assert sweeper.claims[("ns", claim_name(ID))]["metadata"]["labels"][INSTALLATION_LABEL] == PROD


def test_a_component_whose_database_records_another_installation_does_not_sweep(monkeypatch, caplog):
    from airflow_mpi import deployment_identity
    from airflow_mpi.plugins import metadata

    monkeypatch.setattr(
        deployment_identity, "in_database", lambda: deployment_identity.Identity(ID, STAGING, PROD)
    )
    monkeypatch.setattr(
        metadata, "job_locations", lambda *a, **k: pytest.fail("a copy looked for places to sweep")
    )
    with caplog.at_level(logging.ERROR):
        assert orphan_listener.handle(orphan_listener.RunFinished("d", RUN)) == []
    assert "this database is a copy" in caplog.text


async def test_a_trigger_deferred_under_another_installation_neither_follows_nor_deletes(monkeypatch):
    """A copy of prod's database holds prod's deferred tasks: its triggerer adopts their triggers once prod's
    triggerer looks dead there. Such a trigger fires an error at once (the resumed task then fails on the claim)
    and deletes nothing when the task is marked failed, nor when its deadline passes."""
    from airflow_mpi.triggers import MPIJobTrigger
    from airflow_mpi.wait.contract import WaitOptions

    deadline = datetime.fromisoformat("2026-11-24T00:00:01+00:00")
    trigger = MPIJobTrigger(
        name="j",
        namespace="ns",
        submitted_at="2026-11-24T00:00:00+00:00",
        options=WaitOptions(deadline=deadline),
        installation="prod-installation",
    )
    trigger._hook = lambda: pytest.fail("the copy's triggerer reached the cluster")
    events = [event async for event in trigger.run()]
    assert [e.payload["status"] for e in events] == ["error"]
    assert "installation 'prod-installation'" in events[0].payload["message"]
    assert "records installation 'tests-in-process'" in events[0].payload["message"]
    await trigger.on_kill()
    await trigger.cleanup()


def test_a_role_without_leases_fails_the_task_for_good_naming_the_grant():
    """An upgrade that did not apply deploy/rbac.yaml again: the claim's GET answers 403; the task fails for good
    (a retry meets the same 403) and says which grant is missing, before anything is created."""
    from kubernetes.client.exceptions import ApiException

    class NoLeases(FakeSyncHook):
        def _run(self, namespace, plan):
            raise ApiException(status=403, reason="Forbidden")

    hook = NoLeases()
    with pytest.raises(AirflowFailException, match=r"leases get/create/list.*deploy/rbac.yaml"):
        operator(hook).execute(context())
    assert hook.created == []
