"""P1 on a REAL node: launcher container end -> the wait's event / execute's return, and when a real kubelet
ends a follow stream of that container's log (issue 11: "P1 with logs is verified on the real node").

    python -m localcluster node mpi-images openmpi
    python -m localcluster node up --name p1-real
    python -m localcluster node load airflow-mpi/mpi-pi:openmpi --name p1-real
    python -m benchmarks.waits --real-node p1-real --previous docs/benchmarks.json
    python -m localcluster node down --name p1-real

Each run is a real MPIJob of images/mpi's Open MPI image (tests/integration/test_real_mpi.py's conventions):
one worker, mpirun starting ``sh -c 'echo start; sleep 2; echo end'``, run by MPIJobOperator as Airflow runs it:
``execute`` (sync) or ``execute`` -> ``TaskDeferred`` -> the trigger's ``run()`` in this process -> ``execute_complete``
(deferrable), logs on and off, round robin. ``poll_interval`` is the default 10 s: nothing is polled.

Container end: the pod status's ``finishedAt`` has 1 s resolution (truncated), so the end is the later of it and the
kubelet's timestamp of the container's last log line (nanoseconds; mpirun exits right after forwarding it). The
trigger's ``not_before`` hold (Airflow 3's deferral race, wait/deferral.py: 12 s after deferring) is left out:
it only applies when a job ends within 12 s of deferring, and it is not the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator

from kubernetes import client

from benchmarks import cluster_load as load

PROGRAM = ["sh", "-c", "echo start; sleep 2; echo end"]
LAST_LINE = "end"
LAUNCHER_SELECTOR = "training.kubeflow.org/job-role=launcher"
JOB_LABEL = "training.kubeflow.org/job-name"
# (label, deferrable, logs)
VARIANTS = (
    ("sync execute, logs on", False, True),
    ("sync execute, logs off", False, False),
    ("deferrable trigger run(), logs on", True, True),
    ("deferrable trigger run(), logs off", True, False),
)


def container_end(finished_at: float, last_line: float | None) -> float:
    """The container's end: ``finishedAt`` (truncated to the second) or, when later, its last log line's time."""
    return finished_at if last_line is None else max(finished_at, last_line)


class LauncherWatcher(load.EndWatcher):
    """Per job (its name): when its launcher container is seen running and ended, its ``finishedAt``; follows each
    running launcher's log in a thread of its own, as ``kubectl logs -f`` does, to time the kubelet's end of it."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.seen: dict[str, dict] = {}
        self.followers: dict[str, threading.Thread] = {}

    def _follow(self, core: client.CoreV1Api) -> None:
        for event in self._watch.stream(
            core.list_namespaced_pod, self.namespace, label_selector=LAUNCHER_SELECTOR, timeout_seconds=3600
        ):
            pod = event["object"]
            job = (pod.metadata.labels or {}).get(JOB_LABEL)
            statuses = pod.status.container_statuses or []
            if not job or not statuses:
                continue
            state, seen = statuses[0].state, self.seen.setdefault(job, {})
            if state.running and job not in self.followers:
                follower = threading.Thread(
                    target=self._follow_log,
                    args=(core, pod.metadata.name, statuses[0].name, seen),
                    daemon=True,
                )
                self.followers[job] = follower
                follower.start()
            if state.terminated and "seen_ended" not in seen:
                seen["seen_ended"] = time.time()
                seen["finished_at"] = state.terminated.finished_at.timestamp()
                seen["exit_code"] = state.terminated.exit_code

    def _follow_log(self, core: client.CoreV1Api, pod: str, container: str, seen: dict) -> None:
        from airflow_mpi.hooks.answers import split_timestamp

        try:
            resp = core.read_namespaced_pod_log(
                pod, self.namespace, container=container, follow=True, timestamps=True, _preload_content=False
            )
            for raw in resp:
                stamp, message = split_timestamp(raw.decode().rstrip("\n"))
                if stamp is not None and message.strip() == LAST_LINE:
                    seen["last_line"] = stamp[0] + stamp[1] / 1e9
            seen["follow_ended"] = time.time()
            resp.release_conn()
        except Exception as err:  # reported with the run; its follow_ended stays unseen
            seen["follow_error"] = f"{type(err).__name__}: {err}"[:300]

    def result(self, job: str, timeout: float = 30) -> dict:
        """What was seen of ``job``'s launcher, once its container ended and the follow stream closed."""
        deadline = time.time() + timeout
        while "seen_ended" not in self.seen.get(job, {}) and time.time() < deadline:
            time.sleep(0.1)
        if "seen_ended" not in self.seen.get(job, {}):
            raise RuntimeError(f"the launcher of {job} was not seen ending (pod watch of {self.namespace})")
        if job in self.followers:
            self.followers[job].join(max(deadline - time.time(), 0.1))
        return dict(self.seen[job])


class JobCompleteWatcher(load.EndWatcher):
    """Records when each launcher Job's Complete condition is first seen (by MPIJob name): the Job
    controller's share."""

    def _follow(self, core: client.CoreV1Api) -> None:
        batch = client.BatchV1Api(self.api)
        for event in self._watch.stream(batch.list_namespaced_job, self.namespace, timeout_seconds=3600):
            job = event["object"]
            if any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or []):
                self.ended.setdefault(job.metadata.name.removesuffix("-launcher"), time.time())


class LineClock:
    """Stands in for the operator's and trigger's ``self.log``: when the launcher's last line reached the task log,
    and how many times; and when each of the provider's follow streams ended, by the log server ("eof") or cut by
    the log pump ("cut")."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.follows: list[tuple[float, str]] = []

    def __getattr__(self, level: str):
        def record(msg, *args, **kwargs) -> None:
            if (str(msg) % args if args else str(msg)).strip() == LAST_LINE:
                self.times.append(time.time())

        return record


@contextlib.contextmanager
def task_log(clock: LineClock) -> Iterator[None]:
    """``clock`` as the task log, and timing the async hook's follow streams (the benchmark's instrument only)."""
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook
    from airflow_mpi.operators import MPIJobOperator
    from airflow_mpi.triggers import MPIJobTrigger

    read_pod_log = AsyncMPIJobHook.read_pod_log

    async def timed(self, *args, follow: bool = False, **kwargs):
        ended_by = "cut"
        try:
            async for line in read_pod_log(self, *args, follow=follow, **kwargs):
                yield line
            ended_by = "eof"
        finally:
            if follow:
                clock.follows.append((time.time(), ended_by))

    saved = {cls: cls.__dict__.get("log") for cls in (MPIJobOperator, MPIJobTrigger)}
    for cls in saved:
        cls.log = property(lambda self: clock)
    AsyncMPIJobHook.read_pod_log = timed
    try:
        yield
    finally:
        AsyncMPIJobHook.read_pod_log = read_pod_log
        for cls, attr in saved.items():
            if attr is None:
                del cls.log
            else:
                cls.log = attr


def _first_event(trigger) -> tuple[dict, float]:
    async def first() -> tuple[dict, float]:
        async for event in trigger.run():
            return event.payload, time.time()
        raise RuntimeError("the trigger ended without an event")

    return asyncio.run(first())


def one_run(namespace: str, task_id: str, *, deferrable: bool, logs: bool) -> tuple[str, float, LineClock]:
    """Run one MPIJob to its end as Airflow would; returns its name, when the wait was done, the task log's clock."""
    from airflow_mpi.operators import MPIJobOperator
    from airflow_mpi.triggers import MPIJobTrigger
    from airflow_mpi.version_compat import TaskDeferred
    from tests.integration.test_operator import ctx
    from tests.integration.test_real_mpi import real_job

    params = {**real_job("openmpi"), "poll_interval": 10.0}
    op = MPIJobOperator(
        task_id=task_id,
        namespace=namespace,
        program=PROGRAM,
        workers=1,
        deferrable=deferrable,
        get_logs=logs,
        **params,
    )
    clock = LineClock()
    with task_log(clock):
        if not deferrable:
            xcom = op.execute(ctx(task_id))
            return xcom["name"], time.time(), clock
        try:
            op.execute(ctx(task_id))
        except TaskDeferred as deferred:
            kwargs = deferred.trigger.serialize()[1]
            kwargs.pop("not_before", None)  # see the module docstring
            payload, done = _first_event(MPIJobTrigger(**kwargs))
            op.execute_complete(ctx(task_id), payload)
            return payload["name"], done, clock
    raise RuntimeError(f"{task_id}: deferrable execute did not defer")


def p1_real(kubeconfig: str, runs: int) -> dict:
    """Raw times of every run by variant (epoch seconds), the node's kubelet version."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    namespace = f"bench-p1-real-{uuid.uuid4().hex[:6]}"
    load.ensure_namespace(api, namespace)
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig, "namespace": namespace}}
    )
    node = client.CoreV1Api(api).list_node().items[0].status.node_info
    watchers = launchers, complete, succeeded = (
        LauncherWatcher(api, namespace),
        JobCompleteWatcher(api, namespace),
        load.SucceededWatcher(api, namespace),
    )
    for watcher in watchers:
        watcher.start()
    measured: dict[str, list[dict]] = {label: [] for label, _, _ in VARIANTS}
    try:
        for i in range(runs):
            for v, (label, deferrable, logs) in enumerate(VARIANTS):
                name, done, clock = one_run(namespace, f"p1real_{v}_{i}", deferrable=deferrable, logs=logs)
                seen = launchers.result(name)
                run = {
                    **seen,
                    "done": done,
                    "succeeded": succeeded.ended.get(name),
                    "task_log_end": clock.times,
                    "job_complete": complete.ended.get(name),
                    "pump_follows": clock.follows,
                    "container_end": container_end(seen["finished_at"], seen.get("last_line")),
                }
                measured[label].append(run)
                print(f"P1 real {label} #{i}: {json.dumps(latencies(run))}", flush=True)
    finally:
        for watcher in watchers:
            watcher.stop()
        client.CoreV1Api(api).delete_namespace(namespace)
    return {
        "kubelet": node.kubelet_version,
        "runtime": node.container_runtime_version,
        "runs": measured,
        "program": " ".join(PROGRAM[:2]) + f" '{PROGRAM[2]}'",
    }


def latencies(run: dict) -> dict[str, float | None]:
    """Seconds from the container's end to each thing seen after it (None: not seen)."""
    end = run["container_end"]
    lines, follows = run.get("task_log_end") or [], run.get("pump_follows") or []
    at = {
        "status_seen": run.get("seen_ended"),
        "follow_ended": run.get("follow_ended"),
        "pump_follow_ended": follows[-1][0] if follows else None,
        "task_log_end": lines[0] if lines else None,
        "job_complete": run.get("job_complete"),
        "succeeded": run.get("succeeded"),
        "done": run["done"],
    }
    return {k: None if t is None else round(t - end, 3) for k, t in at.items()}
