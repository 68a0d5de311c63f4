"""Remote logging (issue 23): the launcher's lines in the task log as the API server serves it from an S3-compatible
store, a deferrable task, with no fault and with its triggerer stopped mid-stream (SIGKILL, SIGTERM) and restarted.

This module starts its own Airflow 3 deployment (PostgreSQL, api-server, scheduler, dag-processor, triggerer) beside
the package's, on the same simulated cluster and namespace, with remote logging to moto's S3 server (started here on
a free port, bucket ``BUCKET``) through the Amazon provider's S3 task handler and an ``aws`` connection whose
``endpoint_url`` is that server. Every row goes to the package's results table (docs/faults.md).

What Airflow does with the logs (apache-airflow-core 3.3.2, apache-airflow-providers-amazon 9.39.0):

* a triggerer writes a trigger's records to ``<task log>.trigger.<its job id>.log`` on its own disk and uploads the
  file only when the trigger ends (``TriggerRunnerSupervisor._handle_request``: ``finished`` ->
  ``upload_to_remote``); ``S3RemoteLogIO.upload`` appends it to the object of the same name, then empties the local
  file (``delete_local_logs = False``, the default) or removes its whole folder (``True``). A SIGKILLed triggerer
  uploads nothing, and nothing else ever uploads its file;
* the API server reads the remote objects of the try (every key under ``<task log>``); while the task is deferred
  or running it adds the local files and the triggerer's log server, once the task has ended it serves the remote
  objects alone (``FileTaskHandler._read``).
* the trigger's end and the task's are not ordered: the task resumes on a worker once the trigger's event is
  stored, while the triggerer uploads the trigger's file when its runner reports the trigger finished. On a loaded
  machine the task ended first (run R, 2026-12-05: the log read at the task's end lacked the successor's 26 lines;
  read again a moment later, it held all 39 once). The tests therefore read the log once the trigger objects they
  expect are in the bucket (``_uploaded``): the claim is about the log as uploaded, not about that window.

So the successor of a killed triggerer that resumed past the lines in the dead one's local file (exactly-once on one
disk, wait/log_ledger.py) left those lines out of the log served once the task had ended: 13 of 39 lines lost in
the SIGKILL scenario below before the fix. The trigger now hands the dead triggerer's file over to remote storage
(uploads it as its triggerer would have) before it resumes past it. Measured here, once the task has ended, every
launcher line exactly once in the log served from S3: no fault; SIGKILL and SIGTERM (a graceful stop uploads
nothing either) with the successor on the same machine; SIGKILL with the successor on another machine (it cannot
read the dead one's file, logs the lines since the deferral again, and those are the only copy that reaches S3).

Where exactly-once is not kept (unit tests in tests/unit/wait/test_log_readback.py, not run end to end): a handler
that removes the log folder on upload (``delete_local_logs = True``), streams records as they come (CloudWatch),
cannot be loaded or fails to upload: the dead file's positions are not used, lines since the deferral repeat, none
is lost. A successor killed between its hand-over and the position mark it logs right after: its own successor
repeats those lines. While the task is still deferred, an API server that reads the dead triggerer's disk too
shows the other-machine scenario's repeated lines twice until the task ends.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal

import pytest

from airflowstack import AirflowStack, S3Server, wait_until
from airflowstack.job_behaviour import finish_launcher
from tests.e2e.conftest import NAMESPACE
from tests.faults.scenario import (
    DEFERRED,
    TIMEOUT,
    launcher_lines,
    lines_while_triggerer_down,
    more_lines,
    record,
    streamed,
    waiting_job,
)

BUCKET = "airflow-logs"
REMOTE_BASE = f"s3://{BUCKET}/logs"
REMOTE_ENV = {
    # a killed triggerer's triggers go to a live one once its heartbeat (every 5 s) is this old (default 30 s)
    "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "15",
}


class Remote:
    """The module's deployment: ``stack``, its ``client`` and the ``s3`` server its logs go to."""

    def __init__(self, stack: AirflowStack, s3: S3Server):
        self.stack, self.s3 = stack, s3
        self.client = stack.client()

    def keep_served_log(self, scenario: str, run_id: str) -> None:
        """The task log as the API server serves it, kept under .artifacts/faults/remote-logging/ for a look."""
        folder = self.stack.home.parent / "remote-logging"
        folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^a-zA-Z0-9]+", "-", f"{scenario} {run_id}").strip("-")
        (folder / f"{name}.log").write_text(self.client.task_log(DEFERRED.dag, run_id, DEFERRED.task) + "\n")

    def remote_keys(self, dag: str, run_id: str) -> list[str]:
        """The objects of a DAG run's task logs in the bucket."""
        return sorted(self.s3.keys(BUCKET, f"logs/dag_id={dag}/run_id={run_id}/"))


@pytest.fixture(scope="module")
def remote(cluster, airflow_stack, dags_folder, artifacts_dir):
    home = artifacts_dir / "airflow-home-remote"
    shutil.rmtree(home, ignore_errors=True)
    with S3Server(log_dir=home / "service-logs") as s3:
        s3.create_bucket(BUCKET)
        stack = AirflowStack(
            dags_folder,
            home=home,
            kubeconfig=cluster.kubeconfig,
            namespace=NAMESPACE,
            extra_env={**s3.remote_logging_env(REMOTE_BASE), **REMOTE_ENV},
            service_kubeconfigs=airflow_stack.service_kubeconfigs or None,
        )
        try:
            stack.start()
            deployment = Remote(stack, s3)
            deployment.client.wait_for_dags([DEFERRED.dag], timeout=180)
            yield deployment
        finally:
            for name in list(stack.services):  # thrown away: no graceful stop (its triggerer's takes ~10 s)
                with contextlib.suppress(Exception):
                    stack.stop_service(name, signal.SIGKILL)
            stack.stop()


def _uploaded(remote: Remote, run_id: str, trigger_logs: int) -> None:
    """Wait until ``trigger_logs`` trigger log objects of the run are in the bucket: the triggerer uploads a trigger's
    file when the trigger ends, which may come after the task ended (module docstring)."""
    wait_until(
        lambda: (
            len([k for k in remote.remote_keys(DEFERRED.dag, run_id) if ".trigger." in k]) >= trigger_logs
            or None
        ),
        timeout=TIMEOUT,
        ignore=(),
        what=f"{trigger_logs} trigger log(s) of {run_id} in s3://{BUCKET}",
    )


def _served_from_remote(remote: Remote, run_id: str) -> list[str]:
    """The sources of the task log the API server serves now: once the task has ended, the S3 objects alone."""
    events = remote.client.task_log_events(DEFERRED.dag, run_id, DEFERRED.task)
    start, end = events.index("::group::Log message source details"), events.index("::endgroup::")
    sources = events[start + 1 : end]
    assert sources and all(s.startswith(f"s3://{BUCKET}/") for s in sources), sources
    return sources


def test_remote_log_holds_every_launcher_line_once(remote, cluster, custom_api, results, repeat):
    """No fault: a deferrable task streams two batches of launcher lines (the second while it is deferred); the log
    the API server serves from S3 once the task has ended holds each line once."""
    client = remote.client
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    more_lines(client, cluster, DEFERRED, run_id, expected, "later")
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    _uploaded(remote, run_id, trigger_logs=1)
    run = record(
        results,
        "remote logging (S3), no fault (deferrable)",
        client,
        custom_api,
        DEFERRED,
        run_id,
        expected,
        job,
    )
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (
        "success",
        1,
        0,
        0,
        0,
        0,
    ), run
    remote.keep_served_log("remote logging no fault", run_id)
    sources = _served_from_remote(remote, run_id)
    assert any(".trigger." in s for s in sources), sources  # the trigger's log was uploaded and is served
    assert launcher_lines(client, DEFERRED, run_id) == expected


def test_triggerer_sigkill_and_restart_mid_stream_with_remote_logging(
    remote, cluster, custom_api, results, repeat
):
    """The triggerer is SIGKILLed while the launcher logs, more lines come while none runs, a new one (same machine,
    same log folder) takes the trigger over, a last batch follows. Once the task has ended, the log served from S3
    holds every launcher line exactly once: the dead triggerer's file, which Airflow never uploads, was handed over
    by the successor's trigger (its object is in the bucket) before it resumed past its lines."""
    sources = _failover(
        remote,
        cluster,
        custom_api,
        results,
        "remote logging (S3): triggerer SIGKILL + restart mid-wait",
        lambda stack: stack.stop_service("triggerer", signal.SIGKILL),
        trigger_logs=2,
    )
    assert len([s for s in sources if ".trigger." in s]) == 2, (
        sources
    )  # the dead triggerer's file and its successor's


def test_triggerer_sigterm_and_restart_mid_stream_with_remote_logging(
    remote, cluster, custom_api, results, repeat
):
    """The same with a graceful stop (SIGTERM, as a rolling restart sends): Airflow's triggerer cancels its triggers
    without uploading their logs either, so the successor hands the file over the same way. Exactly once."""
    sources = _failover(
        remote,
        cluster,
        custom_api,
        results,
        "remote logging (S3): triggerer SIGTERM + restart mid-wait",
        lambda stack: stack.stop_service("triggerer"),
        trigger_logs=2,
    )
    assert len([s for s in sources if ".trigger." in s]) == 2, sources


def test_triggerer_sigkill_and_restart_on_another_machine_with_remote_logging(
    remote, cluster, custom_api, results, repeat, artifacts_dir
):
    """The successor runs where the dead triggerer's file is not (another machine: here another log folder). It
    cannot read the dead one's position back and resumes from the defer-time one, so it logs the lines since the
    deferral again; the dead triggerer uploaded none of them, so once the task has ended the log served from S3
    (the successor's file and the task's) holds every line exactly once. Its file stays behind on the dead
    triggerer's disk, never uploaded (Airflow's behaviour); while the task is deferred, an API server that reads
    that disk too shows those lines twice."""
    stack = remote.stack
    triggerer = stack.services["triggerer"]
    own_env = dict(triggerer.env)
    other = artifacts_dir / "airflow-home-remote" / f"other-machine-logs-{repeat}"
    shutil.rmtree(other, ignore_errors=True)

    def to_another_machine(stack):
        stack.stop_service("triggerer", signal.SIGKILL)
        triggerer.env = {**own_env, "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(other)}

    try:
        sources = _failover(
            remote,
            cluster,
            custom_api,
            results,
            "remote logging (S3): triggerer SIGKILL + restart on another machine",
            to_another_machine,
            trigger_logs=1,
        )
    finally:  # back on this machine for what follows (no trigger runs now: no takeover to wait for)
        stack.stop_service("triggerer", signal.SIGKILL)
        triggerer.env = own_env
        stack.start_service("triggerer")
    assert len([s for s in sources if ".trigger." in s]) == 1, sources  # the successor's only


def _failover(
    remote: Remote, cluster, custom_api, results, scenario: str, stop, trigger_logs: int
) -> list[str]:
    """A deferred task streaming its launcher's log; ``stop(stack)`` stops its triggerer, more lines come, a new
    triggerer starts and takes the trigger over, a last batch follows, the launcher ends. Once the ``trigger_logs``
    trigger files are uploaded, every launcher line must be in the log served from S3 exactly once; returns that
    log's sources."""
    client, stack = remote.client, remote.stack
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    lines_while_triggerer_down(stack, cluster, stop, expected)
    streamed(client, DEFERRED, run_id, expected)
    more_lines(client, cluster, DEFERRED, run_id, expected, "after-restart")
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    _uploaded(remote, run_id, trigger_logs)
    run = record(results, scenario, client, custom_api, DEFERRED, run_id, expected, job)
    served = launcher_lines(client, DEFERRED, run_id)
    remote.keep_served_log(scenario, run_id)
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (
        "success",
        1,
        0,
        0,
        0,
        0,
    ), (run, served, remote.remote_keys(DEFERRED.dag, run_id))
    assert served == expected
    return _served_from_remote(remote, run_id)
