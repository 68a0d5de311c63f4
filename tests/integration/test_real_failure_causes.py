"""A failed try names its cause, on the real node: which pod, which container, why, and its log's last lines.

The MPIJob's own condition says only that the launcher Job ran out of attempts (kubeflow/mpi-operator#90); the
causes below are produced for real by the kernel and the kubelet, and read by the wait before the mpi-operator's
``cleanPodPolicy`` deletes the workers (kubeflow/mpi-operator#461):

* a rank that allocates past its worker's memory limit: on this cgroup v1 node the kernel kills the rank (a
  process of the worker container), sshd lives on, and the container shows ``OOMKilled`` once the clean-up ends
  it; the error names the worker pod, OOMKilled and the limit (deferrable: the trigger's event carries it);
* a worker container that exits non-zero under a running job: its exit code and its last log lines.
"""

from __future__ import annotations

import pytest

from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowFailException, TaskDeferred
from tests.integration.test_operator import ctx, record, run_trigger  # noqa: F401
from tests.integration.test_real_mpi import launcher_pods, pod_log, real_operator

MEMORY_LIMIT = "96Mi"
# the rank fills 400 MiB of pages (a bytearray is zeroed: every page is touched), far past the limit
GREEDY_RANK = [
    "python3",
    "-c",
    "import sys; print('rank allocating', flush=True); "
    "data = bytearray(400 * 1024 * 1024); print('never printed', len(data))",
]
# The worker container's own process: sshd in the background, and an exit with code 3 when a rank asks for it
# (SIGUSR1 to the container's first process, the shell); its last words go to the container log.
STOPPING_WORKER = [
    "sh",
    "-c",
    "trap 'echo worker told to stop by its rank; exit 3' USR1; "
    "/usr/sbin/sshd -De -f /home/mpiuser/.sshd_config & echo worker sshd started; "
    "while :; do wait; done",
]
RANK_STOPPING_ITS_WORKER = ["sh", "-c", "echo rank stops its worker; kill -USR1 1; sleep 120"]


def run(op, deferrable: bool) -> None:
    """Execute the task as Airflow would (sync, or defer / trigger / execute_complete)."""
    if not deferrable:
        op.execute(ctx(op.task_id))
        return
    op.deferrable = True
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx(op.task_id))
    event = run_trigger(
        MPIJobTrigger(**deferred.value.trigger.serialize()[1])
    )  # as the triggerer rebuilds it
    op.execute_complete(ctx(op.task_id), event)


def test_a_rank_over_its_workers_memory_limit_is_named_oomkilled_with_the_limit_deferred(
    real_k8s, real_namespace, real_conn, record
):
    op = real_operator(
        "oom",
        real_namespace,
        program=GREEDY_RANK,
        workers=1,
        worker_resources={"limits": {"memory": MEMORY_LIMIT}},
    )
    with pytest.raises(AirflowFailException) as failure:
        run(op, deferrable=True)
    message = str(failure.value)
    name = op.build_manifest(ctx("oom"))["metadata"]["name"]
    causes = [line for line in message.splitlines() if line.startswith("cause: ")]
    assert any(
        line.startswith(f"cause: worker pod {name}-worker-0 (container ")
        and f"OOMKilled: out of memory, memory limit {MEMORY_LIMIT}" in line
        for line in causes
    ), message
    assert "rank allocating" in record.lines and not any(
        line.startswith("never printed") for line in record.lines
    )


def test_a_worker_that_exits_non_zero_gives_its_exit_code_and_last_lines(
    real_k8s, real_namespace, real_conn, record
):
    op = real_operator(
        "worker_exits",
        real_namespace,
        program=RANK_STOPPING_ITS_WORKER,
        workers=1,
        worker={"command": STOPPING_WORKER},
        on_finish_action="keep",
    )
    with pytest.raises(AirflowFailException) as failure:
        run(op, deferrable=False)
    message = str(failure.value)
    worker = f"{op.build_manifest(ctx('worker_exits'))['metadata']['name']}-worker-0"
    assert f"cause: worker pod {worker} (container " in message and "exit code 3" in message, message
    tail = message[message.index(f"log lines of worker {worker}") :]
    assert "worker sshd started" in tail and "worker told to stop by its rank" in tail, message
    # The launcher's log, as the kubelet keeps it, is in the task log once and in order. (Whether the rank's own line
    # reached mpirun is Open MPI's race: its worker, and the daemon forwarding its output, end right after the echo.)
    (launcher,) = launcher_pods(real_k8s, real_namespace)
    launcher_lines = pod_log(real_k8s, real_namespace, launcher.metadata.name)
    assert launcher_lines and [ln for ln in record.lines if ln in set(launcher_lines)] == launcher_lines
