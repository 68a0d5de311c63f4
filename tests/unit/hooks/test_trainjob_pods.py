"""The hooks' pod listings of a TrainJob (hooks/ownership.role_pods): its launcher is the pod its batch Job made,
that Job controlled by the JobSet the TrainJob controls (a GET of the TrainJob, its JobSet and both Jobs), never a
pod that only carries the JobSet's labels; a role that may not read JobSets follows no pod and says which grant."""

from __future__ import annotations

import logging
from unittest import mock

from k8s_fakes import FakeResponse, api_error, controlled_by, pod, pod_list
from test_mpijob_hook import make_hook

from airflow_mpi.jobspec.kinds.trainjob import API_TRAINJOB
from tests.unit.trainjob_objects import JOB_UIDS, batch_job, jobset, trainjob

LAUNCHER_JOB = controlled_by("Job", "pi-launcher-0", JOB_UIDS["launcher"])


def _objects(denied: str | None = None):
    def get(**kw):
        if kw["plural"] == denied:
            raise api_error(403, reason="Forbidden")
        if kw["plural"] == "trainjobs":
            return trainjob()
        if kw["plural"] == "jobsets":
            return jobset()
        return batch_job(kw["name"].split("-")[1])

    return get


def test_launcher_log_reads_the_launcher_its_chain_leads_to_not_a_pod_with_its_labels(monkeypatch):
    hook = make_hook(API_TRAINJOB)
    task_log = mock.Mock()
    monkeypatch.setattr(type(hook), "log", task_log)
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("pi-launcher-0-0-x7k2q", "2026-11-22T10:00:00", owner=LAUNCHER_JOB),
        pod("pi-launcher-0-0-forge", "2026-11-22T10:05:00", owner=None),
    )
    hook.custom_object_client.get_namespaced_custom_object.side_effect = _objects()
    hook.api_client.call_api.return_value = FakeResponse([b"2026-11-22T10:00:00Z real\n"])
    assert list(hook.launcher_log("pi", "ns")) == ["real"]
    assert hook.api_client.call_api.call_args.kwargs["path_params"]["name"] == "pi-launcher-0-0-x7k2q"
    selector = hook.core_v1_client.list_namespaced_pod.call_args.kwargs["label_selector"]
    assert selector == "jobset.sigs.k8s.io/jobset-name=pi,jobset.sigs.k8s.io/replicatedjob-name=launcher"
    gets = [c.kwargs for c in hook.custom_object_client.get_namespaced_custom_object.call_args_list]
    read = ["trainjobs.trainer.kubeflow.org/pi", "jobsets.jobset.x-k8s.io/pi", "jobs.batch/pi-launcher-0"]
    assert [f"{g['plural']}.{g['group']}/{g['name']}" for g in gets] == [*read, "jobs.batch/pi-node-0"]
    ignored = (
        "Ignoring pod pi-launcher-0-0-forge: it carries the TrainJob's labels, but the TrainJob's controllers "
        "did not make it (someone else's pod: not read, not counted)"
    )
    assert [c.args[0] % c.args[1:] for c in task_log.info.call_args_list if "forge" in str(c.args)] == [
        ignored
    ]


def test_a_role_that_may_not_read_jobsets_follows_no_pod_and_names_the_grant(caplog):
    hook = make_hook(API_TRAINJOB)
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("pi-launcher-0-0-x7k2q", "2026-11-22T10:00:00", owner=LAUNCHER_JOB)
    )
    hook.custom_object_client.get_namespaced_custom_object.side_effect = _objects(denied="jobsets")
    with caplog.at_level(logging.WARNING):
        assert list(hook.launcher_log("pi", "ns")) == []
    assert any("grant get on jobsets.jobset.x-k8s.io" in r.getMessage() for r in caplog.records)
