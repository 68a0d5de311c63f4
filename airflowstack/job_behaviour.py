"""What the launcher of a test's MPIJob does: the ONE place the e2e and fault suites choose it.

On the local cluster's simulated nodes (kwok) a launcher's lifetime and exit code are pod template
labels/annotations (``localcluster/behaviour.py``); on a real node they are what the container runs.
Tests ask for a behaviour (succeed after N seconds, fail with an exit code, run until deleted) and pass
the resulting ``launcher`` and ``command`` to a DAG through its conf; only this module knows how a
behaviour is produced, so pointing the suites at a real node changes this file and nothing else.
"""

from __future__ import annotations

from localcluster import behaviour as bh

SUCCEED, FAIL, RUN = bh.SUCCEED, bh.FAIL, bh.RUN


def launcher_conf(outcome: str = SUCCEED, seconds: float = 0.0, exit_code: int = 1) -> dict:
    """``{"launcher": <ReplicaSpec overrides>, "command": [...]}`` for a DAG's conf."""
    if outcome == RUN:
        metadata = bh.pod_metadata(RUN)
        command = ["sleep", "infinity"]
    elif outcome == SUCCEED:
        metadata = bh.pod_metadata(SUCCEED, run_duration=seconds)
        command = ["sh", "-c", f"sleep {seconds}"]
    elif outcome == FAIL:
        metadata = bh.pod_metadata(FAIL, run_duration=seconds, exit_code=exit_code)
        command = ["sh", "-c", f"sleep {seconds}; exit {exit_code}"]
    else:
        raise ValueError(f"outcome must be one of {(SUCCEED, FAIL, RUN)}, not {outcome!r}")
    return {"launcher": metadata, "command": command}


def finish_launcher(api_client, namespace: str, job_name: str) -> None:
    """End a launcher started with ``RUN`` now, successfully (simulated nodes: its pod's lifecycle becomes
    ``SUCCEED`` with no run time left, so the test decides when the job ends instead of a fixed duration)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    pods = core.list_namespaced_pod(namespace, label_selector="training.kubeflow.org/job-role=launcher").items
    (pod,) = [p for p in pods if p.metadata.name.startswith(f"{job_name}-launcher")]
    core.patch_namespaced_pod(
        pod.metadata.name,
        namespace,
        {"metadata": {"labels": {bh.LIFECYCLE: SUCCEED}, "annotations": {bh.RUN_DURATION: "0s"}}},
    )


def numbered_lines(name: str) -> list[str]:
    """Launcher messages of one batch: ten lines, then three that ``stamped_lines`` gives one timestamp."""
    return [f"{name} line {i}" for i in range(10)] + [f"{name} tie {i}" for i in range(3)]


def stamped_lines(name: str) -> list[str]:
    """``numbered_lines(name)`` as CRI log lines stamped now, in order as a kubelet writes them: ten lines a
    millisecond apart, then three sharing one timestamp (a second-precision ``sinceTime`` re-reads them)."""
    import time

    from localcluster.pod_logs import cri_lines

    start = time.time()
    messages = numbered_lines(name)
    return cri_lines(messages[:10], start=start) + cri_lines(messages[10:], start=start + 0.011, step=0)
