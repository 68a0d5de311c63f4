"""Issue 36, item 3: a wait that outlives its token, on a real API server that does not extend tokens. A
measurement for the issue's closing note, not a test of scripts/test's lanes: it runs only with AIRFLOW_MPI_MEASURE=1
(about 12-13 minutes; the minimum token life the TokenRequest API grants is 600 s):

    AIRFLOW_MPI_MEASURE=1 PYTHONPATH=$PWD .venv/bin/python -m pytest -q -p no:cacheprovider -s \\
        tests/integration/test_expiring_token.py

test_rotating_token.py plays the old token refused by revoking it; here it EXPIRES. A local cluster of the module's
own runs its kube-apiserver with ``--service-account-extend-token-expiration=false`` (a token lives as long as asked).
The provider in a pod (tests/integration/pod_credentials.py) holds token A (600 s); a wait (the hub and a real
``MPIJobTrigger``) starts on a suspended MPIJob as A; at 80 % of A's life token B replaces the file, as kubelet does
(A is not revoked: still accepted then); the test awaits the API server refusing A (401) by itself, then resumes the
job: the wait must end ``success`` with the launcher's log, and the sync hook made before the rotation reads and
deletes the job. The timings (A issued, B written, A refused, the wait's end) are printed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from datetime import UTC, datetime

import pytest

from airflow_mpi.wait import watch_hub
from localcluster.waiting import wait_until
from tests.integration.conftest import REAL_KUBECONFIG, _local
from tests.integration.pod_credentials import TOKEN_SECONDS, PodCredentials, run_in_cluster
from tests.integration.test_rotating_token import (
    all_opened,
    assert_outlived,
    first_event,
    job_trigger,
    recorded_job,
    resume,
)

MEASURE = os.environ.get("AIRFLOW_MPI_MEASURE") == "1"
ROTATE_AT = 0.8  # of the token's life: when kubelet replaces a projected token
REFUSAL_POLL = 2.0  # s between requests as A while awaiting its expiry

pytestmark = [
    pytest.mark.measurement,
    pytest.mark.needs_simulation,  # the launcher's run is kwok's
    pytest.mark.skipif(
        not MEASURE,
        reason="an on-demand measurement (about 12 min: a token's 600 s life): AIRFLOW_MPI_MEASURE=1 runs it",
    ),
    pytest.mark.skipif(
        bool(REAL_KUBECONFIG),
        reason="starts a local cluster of its own (an API server flag); not on a real cluster",
    ),
]

EXTEND_OFF = "kube-apiserver=service-account-extend-token-expiration=false"


@pytest.fixture(scope="module")
def cluster():
    """This module's own local cluster (v2beta1), its API server not extending service-account tokens."""
    yield from _local(f"it-expiry-{os.getpid()}", "v2beta1", artifacts="expiry", extra_args=[EXTEND_OFF])


@pytest.fixture(scope="module")
def k8s(cluster):
    return cluster.api_client()


@pytest.fixture(scope="module")
def provider_role(k8s) -> str:
    from tests.integration.least_privilege import apply_role

    return apply_role(k8s)


@pytest.fixture
def pod(monkeypatch, k8s, namespace, provider_role, tmp_path) -> PodCredentials:
    """This process as a pod of the test's namespace; the waits' watches renewed every 2 s (every one opens again
    after each change of the token); no earlier outage makes a 401 look like one (hooks/retries.py)."""
    from airflow_mpi.hooks import retries

    creds = run_in_cluster(monkeypatch, k8s, namespace, provider_role, tmp_path / "sa")
    monkeypatch.setattr(watch_hub, "WATCH_SECONDS", 2)
    monkeypatch.setattr(retries._Recent, "last", None)
    return creds


def claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


class Clock:
    """Wall-clock marks, relative to the first."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def mark(self, what: str) -> float:
        self.marks[what] = time.time()
        return self.marks[what]

    def report(self, extra: dict[str, float]) -> str:
        start = next(iter(self.marks.values()))
        rows = [*self.marks.items(), *extra.items()]
        return "\n".join(
            f"  {what:<28} {datetime.fromtimestamp(t, UTC).strftime('%H:%M:%S.%f')[:-3]} UTC  +{t - start:7.1f} s"
            for what, t in sorted(rows, key=lambda row: row[1])
        )


async def wait_past_the_expiry(pod: PodCredentials, k8s, name: str, uid: str, clock: Clock, a: str) -> dict:
    """The triggerer's wait on the job from token A (issued at ``clock``'s "A issued") to its end, across B written
    at 80 % of A's life and A's expiry; the trigger's event."""
    trigger = job_trigger(pod.namespace, name, uid)
    from airflow_mpi.hooks import AsyncMPIJobHook
    from airflow_mpi.jobspec.kinds import DEFAULT_KIND

    kinds = watch_hub.watched(DEFAULT_KIND)
    async with watch_hub.subscription(AsyncMPIJobHook(), pod.namespace, name) as sub:
        hub = sub.hub
        await hub.until(lambda h: all_opened(h, {}))  # as A
        wait = asyncio.create_task(first_event(trigger))
        life = claims(a)["exp"] - claims(a)["iat"]
        # kubelet's moment
        await asyncio.sleep(max(0.0, clock.marks["A issued"] + ROTATE_AT * life - time.time()))
        assert not wait.done(), wait
        await asyncio.to_thread(pod.issue, "token-b", TOKEN_SECONDS)
        clock.mark("B written")
        assert await asyncio.to_thread(pod.status_as, a) == 200  # A is not revoked: still accepted
        before = {kind: hub.stats[f"{kind}_opened"] for kind in kinds}
        await asyncio.wait_for(hub.until(lambda h: all_opened(h, before)), 30)  # every watch again, as B
        clock.mark("watches reopened as B")
        await asyncio.to_thread(
            wait_until,
            lambda: pod.status_as(a) == 401,
            life * (1 - ROTATE_AT) + 180,
            "the API server to refuse the expired token A",
            REFUSAL_POLL,
        )
        clock.mark("A refused (401)")
        before = {kind: hub.stats[f"{kind}_opened"] for kind in kinds}
        # A dead: the watches still open (as B)
        await asyncio.wait_for(hub.until(lambda h: all_opened(h, before)), 30)
        assert not wait.done(), wait
        await asyncio.to_thread(resume, k8s, pod.namespace, name)
        clock.mark("job resumed")
        event = await asyncio.wait_for(wait, 120)
        clock.mark("wait ended")
        assert hub.error is None and len(watch_hub.hubs()) == 1  # one hub throughout, never failed
        return event


def test_a_wait_and_the_sync_hook_outlive_their_expired_token(pod, cluster, k8s, monkeypatch):
    clock = Clock()
    a = pod.issue("token-a", TOKEN_SECONDS)
    clock.mark("A issued")
    logged, sync, uid = recorded_job(
        cluster, pod.namespace, monkeypatch, "expiring"
    )  # as A; used again after

    try:
        event = asyncio.run(wait_past_the_expiry(pod, k8s, "expiring", uid, clock, a))
        assert_outlived(event, logged, sync, "expiring", uid)
        clock.mark("sync hook read and deleted")
    finally:
        a_claims = claims(a)
        print(
            f"\nissue 36: a wait outlives its expired token (A asked {TOKEN_SECONDS} s, granted "
            f"{a_claims['exp'] - a_claims['iat']} s; extend-token-expiration=false)\n"
            + clock.report({"A's exp claim": float(a_claims["exp"])})
        )
