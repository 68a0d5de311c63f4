"""How tests steer the simulated pods of the local cluster.

The nodes of the local cluster are SIMULATED: kwok plays the kubelet. No container ever runs; a pod's status
follows kwok Stages (see ``localcluster/stages.py``) chosen by the labels/annotations below, which tests put on
the MPIJob's pod templates (``spec.mpiReplicaSpecs.<Role>.template.metadata``).  Everything else in the cluster
is real: kube-apiserver, etcd, kube-controller-manager (Job controller, garbage collector, ...), kube-scheduler and
the mpi-operator.

Defaults (nothing set):

* a launcher pod (owned by a batch/v1 Job, or labelled ``training.kubeflow.org/job-role=launcher`` or
  ``training.kubeflow.org/replica-type=launcher``) runs for ``DEFAULT_RUN_DURATION`` then Succeeds
  (container terminated, exit code 0, reason Completed). A JobSet's pods (a TrainJob's) are owned by Jobs too: only
  those of its replicated job ``launcher`` (label ``jobset.sigs.k8s.io/replicatedjob-name``) count as launchers;
* every other pod (workers, a TrainJob's ``node`` pods, ...) stays Running until it is deleted;
* a deleted pod first turns Failed (exit code 137, like a killed container), then kwok marks it ``REMOVING`` and
  removes it once its finalizers are gone (the Job controller removes its tracking finalizer as on a real cluster).
  Each of these writes is refused for a pod of the same name created since (a kubelet's uid precondition).

Knobs:

* label ``LIFECYCLE`` = ``SUCCEED`` | ``FAIL`` | ``RUN`` overrides the role default;
* annotation ``RUN_DURATION`` (Go duration, e.g. ``"3s"``, or an RFC 3339 time): time spent Running before
  succeeding / failing;
* annotation ``START_DELAY`` (Go duration): time between scheduling and Running (default 0);
* ``FAIL`` uses annotations ``EXIT_CODE`` (default 1), ``REASON`` (default ``Error``) and ``MESSAGE``.
  With ``restartPolicy: Never`` the pod ends Failed.  With ``OnFailure``/``Always`` the container restarts in
  place (``restartCount`` + 1, ``lastState.terminated`` holds the exit code) and runs again;
  annotation ``SUCCEED_AFTER_RESTARTS`` = N makes it succeed once it has restarted N times.
* a pod that must never be scheduled simply requests more GPUs than a node has
  (``unschedulable_gpu_request()``): it stays Pending with a FailedScheduling event from the real scheduler.

Logs: ``LocalCluster.set_launcher_logs(namespace, lines, previous_lines=None)`` writes CRI log files and a kwok
``ClusterLogs`` object selecting the namespace and the ``launcher`` container; the kwok controller then serves them
through the API server's ``pods/log`` endpoint (``follow``, ``timestamps``, ``previous``, ``sinceTime`` work).
"""

from __future__ import annotations

PREFIX = "sim.airflow-mpi.io"

# label
LIFECYCLE = f"{PREFIX}/lifecycle"
SUCCEED = "succeed"
FAIL = "fail"
RUN = "run"
LIFECYCLES = (SUCCEED, FAIL, RUN)

# annotations
RUN_DURATION = f"{PREFIX}/run-duration"
START_DELAY = f"{PREFIX}/start-delay"
EXIT_CODE = f"{PREFIX}/exit-code"
REASON = f"{PREFIX}/reason"
MESSAGE = f"{PREFIX}/message"
SUCCEED_AFTER_RESTARTS = f"{PREFIX}/succeed-after-restarts"
# set by the simulated kubelet on a deleted pod it is removing (the pod's uid: see localcluster/stages.py)
REMOVING = f"{PREFIX}/removing"

DEFAULT_RUN_DURATION = "8s"  # longer than an Airflow worker takes to exit after deferring (see docs/NOTES.md)
DEFAULT_EXIT_CODE = 1
DEFAULT_REASON = "Error"
KILLED_EXIT_CODE = 137

# simulated nodes
NODE_COUNT = 4
NODE_CPU = "32"
NODE_MEMORY = "128Gi"
NODE_PODS = "110"
# a real node's disk: the training-operator's v1 launchers request 5Gi for their kubectl-delivery init container
NODE_EPHEMERAL_STORAGE = "100Gi"
GPU_RESOURCE = "nvidia.com/gpu"
NODE_GPUS = 8
NODE_NAME_PREFIX = "kwok-node-"
NODE_LABEL = "type"  # every simulated node carries type=kwok (+ the usual kubernetes.io/hostname etc.)
NODE_LABEL_VALUE = "kwok"

# a JobSet's pods carry the name of their replicated job; a TrainJob of an MPI runtime has `launcher` and `node`
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_LAUNCHER = "launcher"

LAUNCHER_CONTAINER = "launcher"
WORKER_CONTAINER = "worker"
V1_CONTAINER = "mpi"


def unschedulable_gpu_request() -> dict:
    """`resources` for a container that no simulated node can ever fit (more GPUs than a node has)."""
    n = str(NODE_GPUS + 1)
    return {"limits": {GPU_RESOURCE: n}, "requests": {GPU_RESOURCE: n}}


def pod_metadata(
    lifecycle: str | None = None,
    *,
    run_duration: str | float | None = None,
    start_delay: str | float | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    message: str | None = None,
    succeed_after_restarts: int | None = None,
) -> dict:
    """``{"labels": {...}, "annotations": {...}}`` to merge into a pod template's metadata.

    Numbers for durations are seconds.  Example: ``pod_metadata(FAIL, exit_code=3, run_duration=1)``.
    """
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if lifecycle is not None:
        if lifecycle not in LIFECYCLES:
            raise ValueError(f"lifecycle must be one of {LIFECYCLES}, not {lifecycle!r}")
        labels[LIFECYCLE] = lifecycle
    if run_duration is not None:
        annotations[RUN_DURATION] = _duration(run_duration)
    if start_delay is not None:
        annotations[START_DELAY] = _duration(start_delay)
    if exit_code is not None:
        annotations[EXIT_CODE] = str(int(exit_code))
    if reason is not None:
        annotations[REASON] = reason
    if message is not None:
        annotations[MESSAGE] = message
    if succeed_after_restarts is not None:
        annotations[SUCCEED_AFTER_RESTARTS] = str(int(succeed_after_restarts))
    return {"labels": labels, "annotations": annotations}


def _duration(value: str | float) -> str:
    if isinstance(value, str):
        return value
    return f"{round(float(value) * 1000)}ms"
