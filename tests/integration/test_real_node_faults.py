"""The fault suite on the real node (issue 23 item 1): faults only a kubelet, containerd and real MPI processes
produce, while the provider streams a real launcher's log.

The operator runs as Airflow runs it (execute, or defer / trigger / execute_complete) against the real node's cluster
(localcluster.node_container: the kubelet rotates a container's log past 64 KiB, checked every 3 s). Every rank
prints numbered lines (``<tag> rank <r> line <i> xxx...``), so each run is measured like the simulated suite's
(tests/faults/record.py): MPIJobs per task instance, orphans, launcher lines lost or doubled, spurious failures and
the final message. A run's expected lines are every line its ranks printed (a program that completes), or the lines
the kubelet still holds for the launcher (a program the fault cut short). Each scenario runs
``AIRFLOW_MPI_FAULT_REPEAT`` times (default 1); the table goes to ``.artifacts/faults/real-node.md``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from datetime import datetime, timezone

import pytest
from kubernetes import client
from kubernetes.stream import stream

from airflowstack import wait_until
from airflow_mpi.jobspec.naming import TASK_ID_LABEL
from airflow_mpi.jobspec.status import job_state
from tests.faults.record import Results, Run
from tests.integration.conftest import ARTIFACTS
from tests.integration.test_operator import Background, ctx, mpijobs, record  # noqa: F401
from tests.integration.test_real_failure_causes import run
from tests.integration.test_real_mpi import launcher_pods, pod_log, real_operator

REPEAT = int(os.environ.get("AIRFLOW_MPI_FAULT_REPEAT", "1"))
TIMEOUT = 240  # a launcher's stream, plus the mpi-operator's lease after an API server restart
HEADER = "========== launcher attempt"
PAD = 100  # bytes of padding per line: a chatty program fills 64 KiB in a few hundred lines


@pytest.fixture(params=range(REPEAT), ids=lambda i: f"run{i + 1}")
def repeat(request) -> int:
    return request.param


@pytest.fixture(scope="module")
def results():
    table = Results()
    yield table
    (ARTIFACTS.parent / "faults").mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    (ARTIFACTS.parent / "faults" / "real-node.md").write_text(
        table.markdown(started, REPEAT, "tests/integration/test_real_node_faults.py", "real-node.md"))


def numbered(tag: str, count: int, interval: float) -> list[str]:
    """A rank program: ``count`` lines, one every ``interval`` seconds, flushed each (a real program's stdout)."""
    code = (f"import os, time; r = os.environ.get('OMPI_COMM_WORLD_RANK', '0'); "
            f"[(print('{tag} rank %s line %d ' % (r, i) + 'x' * {PAD}, flush=True), time.sleep({interval})) "
            f"for i in range({count})]")
    return ["python3", "-c", code]


def printed(tag: str, count: int, ranks: int = 1) -> list[str]:
    return [f"{tag} rank {r} line {i} " + "x" * PAD for r in range(ranks) for i in range(count)]


class Job:
    """One task instance's operator on the real node, run in a thread as a worker (or the triggerer) runs it."""

    def __init__(self, namespace: str, tag: str, *, deferrable: bool, count: int, interval: float = 0.05,
                 ranks: int = 1, **kwargs) -> None:
        kwargs.setdefault("workers", ranks)
        self.tag, self.count, self.ranks = tag, count, ranks
        self.op = real_operator(tag, namespace, program=numbered(tag, count, interval), deferrable=deferrable,
                                **kwargs)
        self.name = self.op.build_manifest(ctx(tag))["metadata"]["name"]
        self.deferrable = deferrable
        self._run = Background(run, self.op, deferrable)

    def lines(self, record) -> list[str]:
        return [ln for ln in list(record.lines) if ln.startswith(f"{self.tag} rank ")]

    def streaming(self, record, at_least: int = 10) -> None:
        """Until ``at_least`` of its lines are in the task log (the stream is attached)."""
        wait_until(lambda: len(self.lines(record)) >= at_least, timeout=TIMEOUT, interval=0.2, ignore=(),
                   what=f"{at_least} lines of {self.tag} in the task log")

    def result(self):
        return self._run.result(TIMEOUT)

    def measure(self, results: Results, scenario: str, k8s, namespace: str, record, expected: list[str],
                outcome: str = "success", per_attempt: list[list[str]] | None = None,
                unserved: list[str] = ()) -> Run:
        """Wait for the task's end; then count its MPIJobs, orphans (live jobs), lost and doubled lines: of
        ``expected`` in the whole task log, or of ``per_attempt[i]`` under the header of launcher attempt i + 1.
        ``unserved``: expected lines the API never served (counted apart, not as lost)."""
        error = self.result()
        jobs = [j for j in mpijobs(k8s, namespace) if j["metadata"]["labels"].get(TASK_ID_LABEL) == self.tag]
        live = [j for j in jobs if not j["metadata"].get("deletionTimestamp") and not job_state(j).terminal]
        sections = list(zip(attempts(record.lines), per_attempt)) if per_attempt else [(record.lines, expected)]
        lost = doubled = 0
        for lines, wanted in sections:
            seen = Counter(ln for ln in lines if ln in set(wanted))
            lost += sum(1 for ln in wanted if not seen[ln] and ln not in unserved)
            doubled += sum(n - 1 for n in seen.values() if n > 1)
        state = "failed" if isinstance(error, Exception) else "success"
        if state != outcome:  # shown by pytest when the test fails: the task's error with its pods' last lines
            print(f"{self.tag}: {state}, expected {outcome}:\n{error}")
        text = "; ".join([*str(error).splitlines()[:1], *(ln for ln in str(error).splitlines()
                                                            if ln.startswith("cause: "))][:2]) \
            if state == "failed" else "launcher succeeded"
        return results.add(Run(
            f"{scenario} ({'deferrable' if self.deferrable else 'sync'})", jobs=max(len(jobs), 1),
            orphans=len(live), lost=lost, doubled=doubled, state=state,
            message=re.sub(r"-launcher-[a-z0-9]{5}\b", "-launcher-<pod>",
                           text.replace(self.name, "<job>").replace(namespace, "<ns>")),
            spurious=int(state != outcome), unserved=len(unserved)))

    def failed(self, results: Results, scenario: str, k8s, namespace: str, record) -> Exception:
        """A run the fault made fail, measured against the launcher's log as the kubelet keeps it (what the
        program printed before the fault); its error."""
        error = self.result()
        (launcher,) = launcher_pods(k8s, namespace)
        expected = [ln for ln in pod_log(k8s, namespace, launcher.metadata.name) if ln.startswith(self.tag)]
        run_ = self.measure(results, scenario, k8s, namespace, record, expected, outcome="failed")
        assert clean(run_) == (1, 0, 0, 0, 0), run_
        return error


def attempts(lines: list[str]) -> list[list[str]]:
    """The task log cut at each launcher attempt's header (what comes before the first is dropped)."""
    cuts = [i for i, ln in enumerate(lines) if ln.startswith(HEADER)]
    return [lines[a:b] for a, b in zip(cuts, [*cuts[1:], len(lines)])]


def clean(run: Run) -> tuple:
    return run.jobs, run.orphans, run.lost, run.doubled, run.spurious


def pod(k8s, namespace: str, name: str) -> client.V1Pod:
    return client.CoreV1Api(k8s).read_namespaced_pod(name, namespace)


# ------------------------------------------------------------------ node-wide faults under two streams
@pytest.mark.parametrize("process", ["kubelet", "containerd", "kube-apiserver"])
def test_a_node_process_killed_and_restarted_mid_stream(real_node, real_k8s, real_namespace, real_conn, record,
                                                        results, repeat, process):
    """SIGKILL of the node's kubelet, containerd or kube-apiserver (serve's supervision starts it again, as systemd
    or the kubelet would) while a sync and a deferrable task stream their launchers: the follow streams break (the
    kubelet's, or the API server's proxy of it); each reader resumes where it was. Containers live on
    (containerd's shims outlive it). Every line once, both tasks succeed."""
    jobs = [Job(real_namespace, f"{kind}-{process}", deferrable=kind == "deferred", count=300, interval=0.03)
            for kind in ("sync", "deferred")]
    for job in jobs:
        job.streaming(record)
    real_node.kill_process(process)
    for job in jobs:
        run_ = job.measure(results, f"{process} SIGKILL + restart mid-stream", real_k8s, real_namespace, record,
                           printed(job.tag, job.count))
        assert clean(run_) == (1, 0, 0, 0, 0), run_


def test_log_rotation_during_long_streams(real_node, real_k8s, real_namespace, real_conn, record, results, repeat):
    """The kubelet rotates each launcher's log four or five times (64 KiB, checked every 3 s) while a sync and a
    deferrable task follow it. Measured against the node's own files (kept: ``on_finish_action="keep"``): every
    line was written there once, the log really rotated, and every line the kubelet served is in the task log
    once. What a follower cannot get is a rotated file's last line or two when containerd writes them after the
    kubelet moved its followers to the new file (containerd's old writer drains after the new file exists; the API
    serves only the newest file): those are counted apart, and any other missing line fails the test. The task log
    says, once per launcher, that its log rotated while followed and where the node keeps the rotated files."""
    jobs = [Job(real_namespace, f"rotated-{kind}", deferrable=kind == "deferred", count=3000, interval=0.004,
                on_finish_action="keep") for kind in ("sync", "deferred")]
    for job in jobs:
        job.result()
        (launcher,) = [p for p in launcher_pods(real_k8s, real_namespace) if p.metadata.name.startswith(job.name)]
        files = [[cri_text(ln) for ln in f] for f in
                 real_node.container_log_files(real_namespace, launcher.metadata.name, "launcher")]
        assert len(files) >= 3, f"the log rotated {len(files) - 1} times"
        on_node = [ln for f in files for ln in f if ln.startswith(job.tag)]
        assert on_node == printed(job.tag, job.count), "the node did not keep each printed line once, in order"
        run_ = job.measure(results, "kubelet log rotation (64 KiB) during the stream", real_k8s, real_namespace,
                           record, printed(job.tag, job.count), unserved=rotation_tails(files[:-1], record.lines))
        said = [ln for ln in record.lines if f"launcher log {launcher.metadata.name}/launcher/0: the kubelet rotated "
                "this log while it was followed" in ln and "/var/log/pods/" in ln]
        assert len(said) == 1, f"the task log said the rotation {len(said)} times; lines per file: {list(map(len, files))}"
        missing = [ln.split(" ", 5)[:5] for ln in on_node if ln not in set(record.lines)]
        bounds = [(f[0].split(" ", 5)[:5], f[-1].split(" ", 5)[:5]) for f in files if f]
        assert clean(run_) == (1, 0, 0, 0, 0), f"{run_}\nmissing: {missing}\nfiles (first, last): {bounds}"


def cri_text(line: str) -> str:
    """A CRI log line's text (``<time> <stream> F <text>``: the launcher's lines are short, never partial)."""
    return line.split(" ", 3)[3]


def rotation_tails(rotated: list[list[str]], task_log: list[str]) -> list[str]:
    """The lines at the end of each rotated file that are missing from the task log: what containerd wrote to the
    file after the kubelet's follow moved on (never served by the API)."""
    served = set(task_log)
    tails: list[str] = []
    for lines in rotated:
        kept = len(lines)
        while kept and lines[kept - 1] not in served:
            kept -= 1
        tails += lines[kept:]
    return tails


def test_clean_pod_policy_all_and_ttl_with_real_exits(real_k8s, real_namespace, real_conn, record, results, repeat):
    """``cleanPodPolicy: All`` + ``ttlSecondsAfterFinished: 1``: the launcher prints its last lines as it exits and its
    pod goes within a second. The kubelet ends the follow stream when the container exits, so the reader knows it
    read everything: every line once, and no "could not be read to its end" in the task log."""
    jobs = [Job(real_namespace, f"ttl-{kind}", deferrable=kind == "deferred", count=60, interval=0.02,
                clean_pod_policy="All", ttl_seconds_after_finished=1) for kind in ("sync", "deferred")]
    for job in jobs:
        run_ = job.measure(results, "cleanPodPolicy All + ttlSecondsAfterFinished 1", real_k8s, real_namespace,
                           record, printed(job.tag, job.count))
        assert clean(run_) == (1, 0, 0, 0, 0), run_
    assert not [ln for ln in record.lines if "could not be read" in ln], record.lines


# ------------------------------------------------------------------ a process or a pod of one job
def test_a_ranks_process_killed_fails_the_job_naming_the_rank(real_k8s, real_namespace, real_conn, record, results,
                                                              repeat):
    """SIGKILL of the MPI rank in worker 1 (a process of the worker container, sshd lives on): mpirun aborts the
    job, the launcher fails, backoffLimit 0 ends the MPIJob Failed. The task fails; its first cause names the rank,
    its worker pod and the signal, as mpirun reports them in the launcher's last lines."""
    job = Job(real_namespace, "rank-killed", deferrable=False, count=2000, interval=0.05, ranks=2,
              on_finish_action="keep")
    job.streaming(record, at_least=20)
    worker = f"{job.name}-worker-1"
    killer = (f"import os; [os.kill(int(p), 9) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()"
              f" and b'{job.tag} rank' in open(f'/proc/{{p}}/cmdline', 'rb').read()]")
    stream(client.CoreV1Api(real_k8s).connect_get_namespaced_pod_exec, worker, real_namespace,
           command=["python3", "-c", killer], stderr=True, stdout=True, stdin=False, tty=False)
    error = job.failed(results, "SIGKILL of a rank (worker 1's MPI process)", real_k8s, real_namespace, record)
    first_cause = next(ln for ln in str(error).splitlines() if ln.startswith("cause: "))
    assert re.fullmatch(rf"cause: rank 1 on {worker}\S*: signal 9 \(SIGKILL\), as mpirun reports it", first_cause), error


def test_the_launchers_container_killed_with_a_retry_left(real_node, real_k8s, real_namespace, real_conn, record,
                                                          results, repeat):
    """SIGKILL of the launcher container's process (from the node: exit 137, restartPolicy Never): a failed attempt;
    ``retries=1`` (backoffLimit 1) gives a second launcher pod, whose log comes under its own header. Attempt 1's
    lines up to the kill and all of attempt 2's, each once; the task succeeds."""
    job = Job(real_namespace, "launcher-killed", deferrable=True, count=150, interval=0.03, retries=1,
              on_finish_action="keep")
    job.streaming(record, at_least=20)
    (first,) = launcher_pods(real_k8s, real_namespace)
    real_node.kill_container(pod(real_k8s, real_namespace, first.metadata.name).status.container_statuses[0]
                             .container_id)
    job.result()
    first_pod, second_pod = launcher_pods(real_k8s, real_namespace)
    assert first_pod.status.container_statuses[0].state.terminated.exit_code == 137
    cut_short = [ln for ln in pod_log(real_k8s, real_namespace, first_pod.metadata.name) if ln.startswith(job.tag)]
    assert 20 <= len(cut_short) < job.count
    run_ = job.measure(results, "SIGKILL of the launcher's container, a retry left", real_k8s, real_namespace,
                       record, [], per_attempt=[cut_short, printed(job.tag, job.count)])
    assert clean(run_) == (1, 0, 0, 0, 0), run_
    headers = [ln.split(",")[0] for ln in record.lines if ln.startswith(HEADER)]
    assert headers == [f"{HEADER} 1 of 2", f"{HEADER} 2 of 2"], headers


def test_a_worker_evicted_fails_the_job(real_k8s, real_namespace, real_conn, record, results, repeat):
    """The Eviction API on worker 0 while its rank runs: the kubelet stops the container (sshd and the rank with it),
    mpirun loses the rank and fails; backoffLimit 0 ends the MPIJob Failed and the task fails saying why."""
    job = Job(real_namespace, "evicted", deferrable=True, count=2000, interval=0.05, ranks=2, on_finish_action="keep")
    job.streaming(record, at_least=20)
    client.CoreV1Api(real_k8s).create_namespaced_pod_eviction(
        f"{job.name}-worker-0", real_namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=f"{job.name}-worker-0", namespace=real_namespace)))
    error = job.failed(results, "eviction of a worker pod (the job fails)", real_k8s, real_namespace, record)
    assert any(ln.startswith(f"cause: worker pod {job.name}-worker-0 (container ")
               and "disrupted (EvictionByEvictionAPI: " in ln for ln in str(error).splitlines()), error
