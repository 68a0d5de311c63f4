"""MPIJobHook request logic, with the kubernetes clients replaced at the ApiClient / CustomObjectsApi /
CoreV1Api boundary."""

from __future__ import annotations

import json
import pickle
from unittest import mock

import pytest
from k8s_fakes import (
    NOT_FOUND_OBJECT,
    NOT_FOUND_URL,
    FakeResponse,
    annotations_of,
    api_error,
    labels_of,
    manifest,
    mpijob,
    pod,
    pod_list,
    split_bytes,
)
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from airflow_mpi.hooks import MPIJobConflictError, MPIJobHook, WatchExpired
from airflow_mpi.hooks.errors import MPIJobAPIUnavailable, PodLogUnavailable
from airflow_mpi.jobspec.vocabulary import LAUNCHER, WORKER

GVP = {"group": "kubeflow.org", "version": "v2beta1", "plural": "mpijobs"}


class _CoreV1Used:
    """The CoreV1Api methods the hook calls (autospeccing all of CoreV1Api is slow); real signatures."""

    list_namespaced_pod = k8s.CoreV1Api.list_namespaced_pod


def make_hook(api_version="kubeflow.org/v2beta1", **kwargs) -> MPIJobHook:
    hook = MPIJobHook(api_version=api_version, **kwargs)
    # cached_property values live in the instance dict: replace the clients (autospec: real signatures),
    # keep everything above them real
    hook.__dict__["custom_object_client"] = mock.create_autospec(k8s.CustomObjectsApi, instance=True)
    hook.__dict__["core_v1_client"] = mock.create_autospec(_CoreV1Used, instance=True)
    hook.__dict__["api_client"] = mock.create_autospec(k8s.ApiClient, instance=True)
    # the MPIJob ``job`` whose pods (k8s_fakes.pod: controlled by uid-job) the pod listings keep (hooks/ownership.py)
    hook.custom_object_client.get_namespaced_custom_object.return_value = mpijob() | {
        "metadata": {**mpijob()["metadata"], "uid": "uid-job"}
    }
    return hook


@pytest.fixture
def hook():
    return make_hook()


# --------------------------------------------------------------------------- identity / connection
def test_registered_as_its_own_connection_type_using_kubernetes_default():
    assert MPIJobHook.conn_type == "kubernetes_mpijob"
    assert MPIJobHook.hook_name
    assert MPIJobHook.default_conn_name == "kubernetes_default"
    assert MPIJobHook().conn_id == "kubernetes_default"
    assert MPIJobHook(conn_id="other").conn_id == "other"


def test_api_version_must_be_kubeflow_group():
    assert (
        MPIJobHook(api_version="kubeflow.org/v1").group,
        MPIJobHook(api_version="kubeflow.org/v1").version,
    ) == (
        "kubeflow.org",
        "v1",
    )
    with pytest.raises(ValueError, match="api_version"):
        MPIJobHook(api_version="batch/v1")
    with pytest.raises(ValueError, match="api_version"):
        MPIJobHook(api_version="v2beta1")


def test_namespace_explicit_beats_connection(connection, in_cluster_namespace):
    connection(namespace="conn-ns")
    hook = MPIJobHook()
    assert hook.resolve_namespace("explicit") == "explicit"
    assert hook.resolve_namespace(None) == "conn-ns"
    assert hook.get_namespace() == "conn-ns"


def test_namespace_connection_missing_falls_back_to_pod_namespace(connection, in_cluster_namespace):
    connection(namespace="")  # the UI stores unset fields as ""
    assert MPIJobHook().resolve_namespace(None) == "pod-ns"


def test_namespace_defaults_to_default_outside_a_pod():
    assert MPIJobHook().resolve_namespace() == "default"


def test_namespace_from_legacy_prefixed_extra(connection):
    connection(extra__kubernetes__namespace="legacy-ns")
    assert MPIJobHook().resolve_namespace() == "legacy-ns"


def test_connection_settings_are_the_constructor_settings():
    hook = MPIJobHook(config_file="/k/config", cluster_context="ctx", disable_verify_ssl=True)
    assert hook.connection_settings() == {
        "config_file": "/k/config",
        "cluster_context": "ctx",
        "disable_verify_ssl": True,
    }
    assert MPIJobHook().connection_settings() == {}


@pytest.fixture
def default_k8s_configuration():
    yield
    k8s.Configuration.set_default(None)  # the stock sync hook loads into the global default


def test_sync_client_is_built_from_the_connection_kube_config_path(
    connection, tmp_path, default_k8s_configuration
):
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "main",
                "clusters": [{"name": "c", "cluster": {"server": "https://from-conn-path:6443"}}],
                "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "tok"}}],
            }
        )
    )
    connection(kube_config_path=str(path), in_cluster="false")
    hook = MPIJobHook()
    assert hook.api_client.configuration.host == "https://from-conn-path:6443"
    assert hook.is_in_cluster is False


# --------------------------------------------------------------------------- create
def test_create_sends_group_version_plural_namespace_and_body(hook):
    hook.custom_object_client.create_namespaced_custom_object.return_value = {"created": True}
    original = manifest(namespace="ignored-ns")
    original.pop("apiVersion")
    original.pop("kind")
    snapshot = json.loads(json.dumps(original))

    assert hook.create_mpijob(original, "team-a") == {"created": True}

    kwargs = hook.custom_object_client.create_namespaced_custom_object.call_args.kwargs
    assert {k: kwargs[k] for k in ("group", "version", "plural", "namespace")} == {
        **GVP,
        "namespace": "team-a",
    }
    body = kwargs["body"]
    assert body["apiVersion"] == "kubeflow.org/v2beta1"
    assert body["kind"] == "MPIJob"
    assert body["metadata"]["namespace"] == "team-a"
    assert body["metadata"]["labels"] == original["metadata"]["labels"]
    assert original == snapshot  # the caller's manifest is not modified
    hook.custom_object_client.get_namespaced_custom_object.assert_not_called()


def test_create_namespace_defaults_to_manifest_then_connection(connection):
    connection(namespace="conn-ns")
    hook = make_hook()
    hook.create_mpijob(manifest(namespace="manifest-ns"))
    assert (
        hook.custom_object_client.create_namespaced_custom_object.call_args.kwargs["namespace"]
        == "manifest-ns"
    )
    hook.create_mpijob(manifest())
    assert (
        hook.custom_object_client.create_namespaced_custom_object.call_args.kwargs["namespace"] == "conn-ns"
    )


def test_create_v1_uses_version_v1():
    hook = make_hook("kubeflow.org/v1")
    body = manifest()
    body.pop("apiVersion")
    hook.create_mpijob(body, "ns")
    kwargs = hook.custom_object_client.create_namespaced_custom_object.call_args.kwargs
    assert kwargs["version"] == "v1"
    assert kwargs["body"]["apiVersion"] == "kubeflow.org/v1"


def test_create_requires_a_name(hook):
    with pytest.raises(ValueError, match="metadata.name"):
        hook.create_mpijob({"metadata": {"generateName": "x-"}}, "ns")


def test_create_409_adopts_the_same_task_from_an_earlier_try(hook):
    existing = mpijob(labels=labels_of(try_number=1))
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(409, reason="Conflict")
    hook.custom_object_client.get_namespaced_custom_object.return_value = existing

    assert hook.create_mpijob(manifest(labels=labels_of(try_number=2)), "ns") is existing

    hook.custom_object_client.create_namespaced_custom_object.assert_called_once()
    hook.custom_object_client.get_namespaced_custom_object.assert_called_once_with(
        **GVP, namespace="ns", name="job"
    )


def test_create_409_of_another_task_raises_conflict_naming_job_and_owner(hook):
    existing = mpijob(labels=labels_of(dag="other_dag", try_number=1))
    existing["metadata"]["annotations"] = {"airflow-mpi.io/dag-id": "other_dag"}
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(409)
    hook.custom_object_client.get_namespaced_custom_object.return_value = existing

    with pytest.raises(MPIJobConflictError) as info:
        hook.create_mpijob(manifest(labels=labels_of(dag="dag", try_number=1)), "ns")

    err = info.value
    assert (err.name, err.namespace) == ("job", "ns")
    assert err.differences == {"airflow-mpi.io/dag-id": ("other_dag", "dag")}
    assert "ns/job" in str(err)
    assert "dag_id=other_dag" in str(err)
    hook.custom_object_client.create_namespaced_custom_object.assert_called_once()


def test_create_409_of_an_unmanaged_object_is_a_conflict(hook):
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(409)
    hook.custom_object_client.get_namespaced_custom_object.return_value = mpijob(
        labels={"team": "x"}, annotations={}
    )
    with pytest.raises(MPIJobConflictError, match="no airflow-mpi.io identity labels"):
        hook.create_mpijob(manifest(), "ns")


def test_create_409_without_identity_labels_never_adopts(hook):
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(409)
    hook.custom_object_client.get_namespaced_custom_object.return_value = mpijob(labels={})
    with pytest.raises(MPIJobConflictError, match="ownership cannot be established"):
        hook.create_mpijob(manifest(labels={}), "ns")


def test_create_409_then_gone_creates_again(hook):
    hook.custom_object_client.create_namespaced_custom_object.side_effect = [api_error(409), {"created": 2}]
    hook.custom_object_client.get_namespaced_custom_object.side_effect = api_error(404, NOT_FOUND_OBJECT)
    assert hook.create_mpijob(manifest(), "ns") == {"created": 2}
    assert hook.custom_object_client.create_namespaced_custom_object.call_count == 2


def test_create_connection_error_looks_up_and_adopts_instead_of_replaying(hook):
    existing = mpijob(labels=labels_of(try_number=2))
    hook.custom_object_client.create_namespaced_custom_object.side_effect = ProtocolError(
        "Connection aborted."
    )
    hook.custom_object_client.get_namespaced_custom_object.return_value = existing

    assert hook.create_mpijob(manifest(), "ns") is existing
    hook.custom_object_client.create_namespaced_custom_object.assert_called_once()


def test_create_connection_error_with_nothing_created_creates_again(hook):
    hook.custom_object_client.create_namespaced_custom_object.side_effect = [
        ReadTimeoutError(None, "/apis", "read timed out"),
        {"created": True},
    ]
    hook.custom_object_client.get_namespaced_custom_object.side_effect = api_error(404, NOT_FOUND_OBJECT)

    assert hook.create_mpijob(manifest(), "ns") == {"created": True}
    assert hook.custom_object_client.create_namespaced_custom_object.call_count == 2
    assert hook.custom_object_client.get_namespaced_custom_object.call_count == 1


def test_create_connection_error_then_found_other_owner_raises_conflict(hook):
    hook.custom_object_client.create_namespaced_custom_object.side_effect = ConnectionResetError()
    hook.custom_object_client.get_namespaced_custom_object.return_value = mpijob(
        labels=labels_of(task="other")
    )
    with pytest.raises(MPIJobConflictError):
        hook.create_mpijob(manifest(), "ns")


def test_create_transient_errors_give_up_after_the_retry_budget(hook):
    hook.api_retries = 3
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(503)
    hook.custom_object_client.get_namespaced_custom_object.side_effect = api_error(404, NOT_FOUND_OBJECT)
    with pytest.raises(ApiException) as info:
        hook.create_mpijob(manifest(), "ns")
    assert info.value.status == 503
    assert hook.custom_object_client.create_namespaced_custom_object.call_count == 3
    assert hook.custom_object_client.get_namespaced_custom_object.call_count == 3


@pytest.mark.parametrize("status", [400, 403, 422])
def test_create_rejected_request_raises_without_retry_or_lookup(hook, status):
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(status)
    with pytest.raises(ApiException):
        hook.create_mpijob(manifest(), "ns")
    hook.custom_object_client.create_namespaced_custom_object.assert_called_once()
    hook.custom_object_client.get_namespaced_custom_object.assert_not_called()


def test_create_when_the_crd_is_not_served_raises_api_unavailable(hook):
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(404, NOT_FOUND_URL)
    with pytest.raises(MPIJobAPIUnavailable, match="kubeflow.org/v2beta1"):
        hook.create_mpijob(manifest(), "ns")


def test_create_in_a_missing_namespace_raises_the_api_error(hook):
    missing_ns = {
        "kind": "Status",
        "code": 404,
        "message": 'namespaces "nope" not found',
        "details": {"name": "nope", "kind": "namespaces"},
    }
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(404, missing_ns)
    with pytest.raises(ApiException) as info:
        hook.create_mpijob(manifest(), "nope")
    assert info.value.status == 404


# --------------------------------------------------------------------------- get / delete / list
def test_get_returns_the_object(hook):
    hook.custom_object_client.get_namespaced_custom_object.return_value = mpijob()
    assert hook.get_mpijob("job", "ns") == mpijob()
    hook.custom_object_client.get_namespaced_custom_object.assert_called_once_with(
        **GVP, namespace="ns", name="job"
    )


def test_get_missing_returns_none(hook):
    hook.custom_object_client.get_namespaced_custom_object.side_effect = api_error(404, NOT_FOUND_OBJECT)
    assert hook.get_mpijob("job", "ns") is None


def test_get_retries_transient_errors(hook):
    hook.custom_object_client.get_namespaced_custom_object.side_effect = [
        api_error(503),
        api_error(429),
        ProtocolError("reset"),
        mpijob(),
    ]
    assert hook.get_mpijob("job", "ns") == mpijob()
    assert hook.custom_object_client.get_namespaced_custom_object.call_count == 4


@pytest.mark.parametrize("status", [401, 403, 409])
def test_get_does_not_retry_permanent_errors(hook, status):
    hook.custom_object_client.get_namespaced_custom_object.side_effect = api_error(status)
    with pytest.raises(ApiException):
        hook.get_mpijob("job", "ns")
    hook.custom_object_client.get_namespaced_custom_object.assert_called_once()


def test_delete_sends_the_propagation_policy(hook):
    assert hook.delete_mpijob("job", "ns") is True
    kwargs = hook.custom_object_client.delete_namespaced_custom_object.call_args.kwargs
    assert {k: kwargs[k] for k in ("group", "version", "plural", "namespace", "name")} == {
        **GVP,
        "namespace": "ns",
        "name": "job",
    }
    assert kwargs["body"]["propagationPolicy"] == "Foreground"

    hook.delete_mpijob("job", "ns", propagation_policy="Background", grace_period_seconds=0)
    body = hook.custom_object_client.delete_namespaced_custom_object.call_args.kwargs["body"]
    assert body["propagationPolicy"] == "Background"
    assert body["gracePeriodSeconds"] == 0


def test_delete_of_a_missing_job_returns_false(hook):
    hook.custom_object_client.delete_namespaced_custom_object.side_effect = api_error(404, NOT_FOUND_OBJECT)
    assert hook.delete_mpijob("job", "ns") is False


def test_delete_retries_transient_errors(hook):
    hook.custom_object_client.delete_namespaced_custom_object.side_effect = [api_error(502), {}]
    assert hook.delete_mpijob("job", "ns") is True
    assert hook.custom_object_client.delete_namespaced_custom_object.call_count == 2


def test_list_returns_items_filtered_by_label_selector(hook):
    hook.custom_object_client.list_namespaced_custom_object.return_value = {
        "items": [mpijob("a"), mpijob("b")]
    }
    assert [j["metadata"]["name"] for j in hook.list_mpijobs("ns", label_selector="x=y")] == ["a", "b"]
    hook.custom_object_client.list_namespaced_custom_object.assert_called_once_with(
        **GVP, namespace="ns", label_selector="x=y"
    )


def test_list_when_the_crd_is_not_served_raises_api_unavailable(hook):
    hook.custom_object_client.list_namespaced_custom_object.side_effect = api_error(404, NOT_FOUND_URL)
    with pytest.raises(MPIJobAPIUnavailable):
        hook.list_mpijobs("ns")


def test_wait_for_deleted(hook):
    hook.custom_object_client.get_namespaced_custom_object.side_effect = [
        mpijob(),
        mpijob(),
        api_error(404, NOT_FOUND_OBJECT),
    ]
    assert hook.wait_for_deleted("job", "ns", timeout=5, poll_interval=0) is True
    hook.custom_object_client.get_namespaced_custom_object.side_effect = None
    hook.custom_object_client.get_namespaced_custom_object.return_value = mpijob()
    assert hook.wait_for_deleted("job", "ns", timeout=0, poll_interval=0) is False


# --------------------------------------------------------------------------- pods
V2_LAUNCHER = "training.kubeflow.org/job-name=job,training.kubeflow.org/job-role=launcher"


def test_launcher_pods_v2beta1_selector_and_newest_first(hook):
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-launcher-aaaaa", "2026-11-22T10:00:00", phase="Failed"),
        pod("job-launcher-ccccc", "2026-11-22T10:05:00"),
        pod("job-launcher-bbbbb", "2026-11-22T10:02:00", phase="Failed"),
    )
    pods = hook._role_pods("job", "ns", LAUNCHER)
    assert [p.metadata.name for p in pods] == [
        "job-launcher-ccccc",
        "job-launcher-bbbbb",
        "job-launcher-aaaaa",
    ]
    hook.core_v1_client.list_namespaced_pod.assert_called_once_with(
        namespace="ns", label_selector=V2_LAUNCHER
    )


def test_launcher_pods_same_second_prefers_the_live_one(hook):
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-launcher-zzzzz", "2026-11-22T10:00:00", phase="Failed"),
        pod("job-launcher-aaaaa", "2026-11-22T10:00:00", phase="Running"),
    )
    assert hook._role_pods("job", "ns", LAUNCHER)[0].metadata.name == "job-launcher-aaaaa"


def test_launcher_pods_v1_uses_training_operator_labels():
    hook = make_hook("kubeflow.org/v1")
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-launcher", "2026-11-22T10:00:00")
    )
    assert [p.metadata.name for p in hook._role_pods("job", "ns", LAUNCHER)] == ["job-launcher"]
    hook.core_v1_client.list_namespaced_pod.assert_called_once_with(
        namespace="ns",
        label_selector="training.kubeflow.org/job-name=job,training.kubeflow.org/replica-type=launcher",
    )


def test_launcher_pods_v1_falls_back_to_legacy_labels():
    hook = make_hook("kubeflow.org/v1")
    hook.core_v1_client.list_namespaced_pod.side_effect = [
        pod_list(),
        pod_list(pod("job-launcher", "2026-11-22T10:00:00")),
    ]
    assert [p.metadata.name for p in hook._role_pods("job", "ns", LAUNCHER)] == ["job-launcher"]
    assert [c.kwargs["label_selector"] for c in hook.core_v1_client.list_namespaced_pod.call_args_list] == [
        "training.kubeflow.org/job-name=job,training.kubeflow.org/replica-type=launcher",
        "mpi-job-name=job,mpi-job-role=launcher",
    ]


def test_launcher_pods_none_yet(hook):
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list()
    assert hook._role_pods("job", "ns", LAUNCHER) == []
    hook.core_v1_client.list_namespaced_pod.assert_called_once()


def test_worker_pods_selector_and_index_order(hook):
    idx = "training.kubeflow.org/replica-index"
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-worker-10", "2026-11-22T10:00:00", labels={idx: "10"}),
        pod("job-worker-2", "2026-11-22T10:00:00", labels={idx: "2"}),
        pod("job-worker-0", "2026-11-22T10:00:00", labels={idx: "0"}),
    )
    assert [p.metadata.name for p in hook._role_pods("job", "ns", WORKER)] == [
        "job-worker-0",
        "job-worker-2",
        "job-worker-10",
    ]
    hook.core_v1_client.list_namespaced_pod.assert_called_once_with(
        namespace="ns",
        label_selector="training.kubeflow.org/job-name=job,training.kubeflow.org/job-role=worker",
    )


def test_pod_listing_retries_transient_errors(hook):
    hook.core_v1_client.list_namespaced_pod.side_effect = [api_error(500), pod_list()]
    assert hook._role_pods("job", "ns", WORKER) == []
    assert hook.core_v1_client.list_namespaced_pod.call_count == 2


# --------------------------------------------------------------------------- logs
def _launcher_log(hook, *responses):
    """``launcher_log`` of one launcher pod whose log requests answer ``responses``."""
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-launcher-a", "2026-11-22T10:00:00")
    )
    hook.api_client.call_api.side_effect = list(responses)
    return list(hook.launcher_log("job", "ns"))


def test_launcher_log_of_the_newest_launcher_main_container(hook):
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-launcher-old", "2026-11-22T10:00:00", phase="Failed"),
        pod("job-launcher-new", "2026-11-22T10:05:00", containers=("launcher", "sidecar")),
    )
    hook.api_client.call_api.return_value = FakeResponse([b"2026-11-22T10:00:00Z hi\n"])
    assert list(hook.launcher_log("job", "ns")) == ["hi"]
    args, kwargs = hook.api_client.call_api.call_args
    assert args == ("/api/v1/namespaces/{namespace}/pods/{name}/log", "GET")
    assert kwargs["path_params"] == {"namespace": "ns", "name": "job-launcher-new"}
    assert kwargs["query_params"] == [("container", "launcher"), ("timestamps", "true")]
    assert kwargs["_request_timeout"] == hook.log_request_timeout


def test_launcher_log_without_a_launcher_is_empty(hook):
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list()
    assert list(hook.launcher_log("job", "ns")) == []
    hook.api_client.call_api.assert_not_called()


def test_log_lines_joined_across_chunks_with_the_partial_last_line(hook):
    text = "2026-11-22T10:00:00Z first\r\n2026-11-22T10:00:01Z zweite Zeile: äöü €\n\n2026-11-22T10:00:02Z no newline"
    data = text.encode()
    euro = data.index("€".encode())
    resp = FakeResponse(split_bytes(data, 5, 20, euro + 1 - 25, 1, 1))  # cuts inside the 3-byte €
    assert _launcher_log(hook, resp) == ["first", "zweite Zeile: äöü €", "", "no newline"]
    assert resp.closed and resp.released
    assert resp.stream_args == (65536, True)  # read as consumed, never the whole log at once


def test_log_invalid_utf8_is_replaced(hook):
    assert _launcher_log(hook, FakeResponse([b"2026-11-22T10:00:00Z bad \xff byte\n"])) == ["bad \ufffd byte"]


def test_log_broken_stream_raises_and_releases_the_connection(hook):
    class Broken(FakeResponse):
        def stream(self, amt=None, decode_content=None):
            yield b"2026-11-22T10:00:00Z complete\n2026-11-22T10:00:01Z unfin"
            raise ProtocolError("Connection broken: IncompleteRead")

    resp = Broken()
    with pytest.raises(ProtocolError):
        _launcher_log(hook, resp)
    assert resp.closed and resp.released


@pytest.mark.parametrize("status", [400, 404])
def test_log_unavailable(hook, status):
    message = 'container "launcher" in pod "p" is waiting to start: ContainerCreating'
    with pytest.raises(PodLogUnavailable) as info:
        _launcher_log(hook, api_error(status, {"kind": "Status", "message": message}))
    assert info.value.status == status
    assert info.value.message == message
    hook.api_client.call_api.assert_called_once()


def test_log_request_retries_transient_errors(hook):
    assert _launcher_log(hook, api_error(503), FakeResponse([b"2026-11-22T10:00:00Z x\n"])) == ["x"]


def test_worker_log_tails_strip_timestamps_and_survive_errors(hook):
    idx = "training.kubeflow.org/replica-index"
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-worker-0", "2026-11-22T10:00:00", labels={idx: "0"}, containers=("worker", "sidecar")),
        pod("job-worker-1", "2026-11-22T10:00:00", labels={idx: "1"}, containers=("worker",)),
    )
    hook.api_client.call_api.side_effect = [
        FakeResponse([b"2026-11-22T10:00:00.5Z last words\n"]),
        api_error(404, {"kind": "Status", "message": 'pods "job-worker-1" not found'}),
    ]
    tails = hook.worker_log_tails("job", "ns", 5)
    assert tails["job-worker-0"] == ["last words"]
    assert tails["job-worker-1"][0].startswith("(log unavailable")
    first_query = dict(hook.api_client.call_api.call_args_list[0].kwargs["query_params"])
    assert first_query["tailLines"] == "5"
    assert first_query["container"] == "worker"


# --------------------------------------------------------------------------- errors
def test_errors_survive_pickling():
    err = MPIJobConflictError("job", "ns", labels_of(dag="a"), labels_of(dag="b"))
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)
    assert again.differences == err.differences
    expired = pickle.loads(pickle.dumps(WatchExpired("job", "ns", "42", "too old")))
    assert expired.resource_version == "42"


# --------------------------------------------------------------------------- live-only deletion
def _with_conditions(obj, *types, rv):
    return {
        **obj,
        "metadata": {**obj["metadata"], "resourceVersion": rv, "uid": "u1"},
        "status": {"conditions": [{"type": t, "status": "True"} for t in types]},
    }


def test_delete_live_sends_preconditions_on_the_judged_version(hook):
    hook.custom_object_client.get_namespaced_custom_object.return_value = _with_conditions(
        mpijob(), "Created", rv="8"
    )
    assert hook.delete_live_mpijob("job", "ns") == "deleted"
    body = hook.custom_object_client.delete_namespaced_custom_object.call_args.kwargs["body"]
    assert body["preconditions"] == {"uid": "u1", "resourceVersion": "8"}


def test_delete_live_judges_again_when_the_job_changed_in_between(hook):
    """The job Succeeded between the read and the DELETE: 409 on the precondition, then kept."""
    hook.custom_object_client.get_namespaced_custom_object.side_effect = [
        _with_conditions(mpijob(), "Created", "Running", rv="8"),
        _with_conditions(mpijob(), "Created", "Succeeded", rv="9"),
    ]
    hook.custom_object_client.delete_namespaced_custom_object.side_effect = api_error(409, reason="Conflict")
    assert hook.delete_live_mpijob("job", "ns") == "finished"
    hook.custom_object_client.delete_namespaced_custom_object.assert_called_once()


@pytest.mark.parametrize("obj, outcome", [(None, "gone"), ("Succeeded", "finished"), ("Failed", "finished")])
def test_delete_live_keeps_finished_or_missing_jobs(hook, obj, outcome):
    hook.custom_object_client.get_namespaced_custom_object.side_effect = (
        [api_error(404)] if obj is None else [_with_conditions(mpijob(), "Created", obj, rv="3")]
    )
    assert hook.delete_live_mpijob("job", "ns") == outcome
    hook.custom_object_client.delete_namespaced_custom_object.assert_not_called()


def test_a_delete_pinned_to_a_uid_leaves_another_object_of_the_same_name(hook):
    """The API server checks the uid precondition; its 409 means the name holds another object now."""
    hook.custom_object_client.delete_namespaced_custom_object.side_effect = api_error(409, reason="Conflict")
    assert hook.delete_mpijob("job", "ns", uid="u1") is False
    assert hook.custom_object_client.delete_namespaced_custom_object.call_args.kwargs["body"][
        "preconditions"
    ] == {"uid": "u1"}
    with pytest.raises(ApiException):  # unpinned, a conflict stays an error
        hook.delete_mpijob("job", "ns")


def test_delete_live_of_another_incarnation_is_gone(hook):
    hook.custom_object_client.get_namespaced_custom_object.return_value = _with_conditions(
        mpijob(), "Created", rv="8"
    )
    assert hook.delete_live_mpijob("job", "ns", uid="not-u1") == "gone"
    hook.custom_object_client.delete_namespaced_custom_object.assert_not_called()


def test_create_409_of_a_run_whose_id_is_another_runs_sanitised_label_is_a_conflict(hook):
    """Issue 32 item 2: the labels of both runs agree (sanitised), their raw run ids do not: never adopted."""
    from airflow_mpi.jobspec.naming import sanitize_label_value

    raw = "manual__2026-11-22T10:00:00+00:00"
    crafted = sanitize_label_value(raw)
    hook.custom_object_client.create_namespaced_custom_object.side_effect = api_error(409)
    hook.custom_object_client.get_namespaced_custom_object.return_value = mpijob(
        labels=labels_of(run=raw), annotations=annotations_of(run=raw)
    )
    with pytest.raises(MPIJobConflictError) as info:
        hook.create_mpijob(
            manifest(labels=labels_of(run=crafted), annotations=annotations_of(run=crafted)), "ns"
        )
    assert info.value.differences == {"annotation airflow-mpi.io/run-id": (raw, crafted)}
    assert f"run_id={raw}" in str(info.value)


# --------------------------------------------------------------------------- a TrainJob's deletion
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"


def test_a_trainjob_is_deleted_in_the_background_and_live_ones_too():
    """Trainer v2.3.0 re-creates the JobSet of a TrainJob being deleted in the foreground (jobspec/kinds/trainjob.py):
    the TrainJob goes at once instead, its JobSet after it."""
    hook = make_hook(TRAINJOB_API)
    assert hook.delete_mpijob("pi", "ns") is True
    kwargs = hook.custom_object_client.delete_namespaced_custom_object.call_args.kwargs
    assert (kwargs["group"], kwargs["plural"], kwargs["body"]["propagationPolicy"]) == (
        "trainer.kubeflow.org",
        "trainjobs",
        "Background",
    )
    hook.custom_object_client.get_namespaced_custom_object.return_value = _with_conditions(
        mpijob("pi"), rv="8"
    )
    assert hook.delete_live_mpijob("pi", "ns") == "deleted"
    body = hook.custom_object_client.delete_namespaced_custom_object.call_args.kwargs["body"]
    assert body["propagationPolicy"] == "Background"


def test_waiting_for_a_trainjob_s_deletion_waits_for_its_jobset_too():
    """The next TrainJob of the name must not meet the old one's JobSet (the Trainer would apply onto it)."""
    hook = make_hook(TRAINJOB_API)
    gets = hook.custom_object_client.get_namespaced_custom_object
    gets.side_effect = [
        mpijob("pi"),  # the TrainJob, still there
        api_error(404, NOT_FOUND_OBJECT),  # gone
        {"metadata": {"name": "pi"}},  # its JobSet, still there
        api_error(404, NOT_FOUND_OBJECT),  # gone
    ]
    assert hook.wait_for_deleted("pi", "ns", timeout=5, poll_interval=0) is True
    assert [(c.kwargs["plural"], c.kwargs["name"]) for c in gets.call_args_list] == [
        ("trainjobs", "pi"),
        ("trainjobs", "pi"),
        ("jobsets", "pi"),
        ("jobsets", "pi"),
    ]
    gets.side_effect = [api_error(404, NOT_FOUND_OBJECT), {"metadata": {"name": "pi"}}]
    assert hook.wait_for_deleted("pi", "ns", timeout=0, poll_interval=0) is False  # the JobSet outlived it


def test_an_mpijob_s_deletion_stays_foreground_and_waits_for_the_job_only(hook):
    gets = hook.custom_object_client.get_namespaced_custom_object
    gets.side_effect = [api_error(404, NOT_FOUND_OBJECT)]
    assert hook.wait_for_deleted("job", "ns", timeout=5, poll_interval=0) is True
    assert gets.call_count == 1
    gets.side_effect, gets.return_value = None, _with_conditions(mpijob(), "Created", rv="8")
    assert hook.delete_live_mpijob("job", "ns") == "deleted"
    body = hook.custom_object_client.delete_namespaced_custom_object.call_args.kwargs["body"]
    assert body["propagationPolicy"] == "Foreground"
