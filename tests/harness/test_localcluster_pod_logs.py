"""``LocalCluster.set_launcher_logs`` returns only once kwok serves the logs (localcluster/pod_logs.py): kwok's
informer is seconds late after an API server outage, and kwok 0.8 can keep a cached list without the new object
until the next change, which touching the object makes."""

from __future__ import annotations

import pytest

from localcluster import pod_logs
from localcluster.waiting import ClusterError


class Kwok:
    """kwok's side as ``serve_logs`` sees it: the objects applied, and the reads that answer 400 first."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.applied: list[dict] = []
        self.reads: list[tuple[str, str, bool]] = []

    def apply(self, api, obj: dict) -> None:
        self.applied.append({k: dict(v) if isinstance(v, dict) else v for k, v in obj.items()})

    def serves(self, server: str, namespace: str, container: str, *, previous: bool = False) -> bool:
        self.reads.append((namespace, container, previous))
        self.misses -= 1
        return self.misses < 0


@pytest.fixture
def kwok(monkeypatch, request) -> Kwok:
    fake = Kwok(request.param)
    monkeypatch.setattr(pod_logs, "_apply", fake.apply)
    monkeypatch.setattr(pod_logs, "kwok_serves", fake.serves)
    monkeypatch.setattr(pod_logs, "TOUCH_EVERY", 0)  # every miss touches the object
    return fake


def serve(tmp_path, previous=None, containers=("launcher",)):
    return pod_logs.serve_logs(None, "https://kwok", tmp_path, "ns", ["a line"], previous, containers)


@pytest.mark.parametrize("kwok", [0], indirect=True)
def test_logs_served_at_once_are_applied_once(kwok, tmp_path):
    current = serve(tmp_path)
    assert current.read_text().endswith(" stdout F a line\n")
    assert [o["metadata"] for o in kwok.applied] == [{"name": "logs-ns"}]
    assert kwok.reads == [("ns", "launcher", False)]


@pytest.mark.parametrize("kwok", [3], indirect=True)
def test_while_kwok_does_not_serve_them_the_object_is_touched_until_it_does(kwok, tmp_path):
    serve(tmp_path, previous=["before the restart"], containers=("launcher", "sidecar"))
    touches = [o["metadata"].get("annotations", {}).get("airflow-mpi.test/touch") for o in kwok.applied]
    assert touches == [None, "1", "2", "3"]  # a new resourceVersion after each miss
    assert kwok.reads[-2:] == [
        ("ns", "launcher", True),
        ("ns", "sidecar", True),
    ]  # each container, previous too


@pytest.mark.parametrize("kwok", [10**6], indirect=True)
def test_logs_never_served_fail_naming_the_object(kwok, tmp_path, monkeypatch):
    monkeypatch.setattr(pod_logs, "SERVED_TIMEOUT", 0.3)
    with pytest.raises(ClusterError, match=r"kwok to serve the ClusterLogs logs-ns \(pod logs of ns\)"):
        serve(tmp_path)
