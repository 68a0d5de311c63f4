"""The fault suite on the real node (issue 23 item 1): faults only a kubelet, containerd and real MPI processes
produce, while the provider streams a real launcher's log.

The operator runs as Airflow runs it (execute, or defer / trigger / execute_complete) against the real node's cluster
(localcluster.node_container: the kubelet rotates a container's log past 64 KiB, checked every 3 s). Every rank
prints numbered lines (``<tag> rank <r> line <i> xxx...``), so each run is measured like the simulated suite's
(tests/faults/record.py): MPIJobs per task instance (every job is kept, ``on_finish_action="keep"``, and nothing here
deletes one, so the count is of all the jobs the task created: 0 or 2 fails), orphans, launcher lines lost or
doubled, spurious failures and the final message. A run's expected lines are every line its ranks printed (a program
that completes), or the lines the kubelet still holds for the launcher (a program the fault cut short). Each
scenario runs ``AIRFLOW_MPI_FAULT_REPEAT`` times (default 1); the table goes to ``.artifacts/faults/real-node.md``.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import NamedTuple

import pytest
from kubernetes import client
from kubernetes.stream import stream

from airflow_mpi.jobspec.naming import TASK_ID_LABEL
from airflow_mpi.jobspec.status import job_state
from airflowstack import wait_until
from localcluster.node_container import NodeCluster, docker
from tests.faults.record import Results, Run
from tests.integration.conftest import ARTIFACTS
from tests.integration.test_operator import Background, ctx, mpijobs, record  # noqa: F401
from tests.integration.test_real_failure_causes import run
from tests.integration.test_real_mpi import launcher_pods, pod_log, real_operator

REPEAT = int(os.environ.get("AIRFLOW_MPI_FAULT_REPEAT", "1"))
TIMEOUT = 240  # a launcher's stream, plus the mpi-operator's lease after an API server restart
HEADER = "========== launcher attempt"
PAD = 100  # bytes of padding per line: a chatty program fills 64 KiB in a few hundred lines
STAT_EVERY = (
    0.5  # seconds between stats of the launchers' log files (a rotated file is compressed 3 s or more later)
)


@pytest.fixture(params=range(REPEAT), ids=lambda i: f"run{i + 1}")
def repeat(request) -> int:
    return request.param


@pytest.fixture(scope="module")
def results():
    table = Results()
    yield table
    (ARTIFACTS.parent / "faults").mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    (ARTIFACTS.parent / "faults" / "real-node.md").write_text(
        table.markdown(started, REPEAT, "tests/integration/test_real_node_faults.py", "real-node.md")
    )


def numbered(tag: str, count: int, interval: float, first_attempt: int | None = None) -> list[str]:
    """A rank program: ``count`` lines, one every ``interval`` seconds, flushed each (a real program's stdout).
    With ``first_attempt``, the first run of the program on its pod prints that many lines instead (a marker file
    in the pod's /tmp tells; the workers outlive a launcher attempt): a stream long enough to be cut by a fault
    however late the test sees it, then a short one for the retry."""
    lines = (
        (
            f"({count} if os.path.exists('/tmp/{tag}.ran') else (open('/tmp/{tag}.ran', 'w').close() or "
            f"{first_attempt}))"
        )
        if first_attempt
        else str(count)
    )
    code = (
        f"import os, time; r = os.environ.get('OMPI_COMM_WORLD_RANK', '0'); "
        f"[(print('{tag} rank %s line %d ' % (r, i) + 'x' * {PAD}, flush=True), time.sleep({interval})) "
        f"for i in range({lines})]"
    )
    return ["python3", "-c", code]


def printed(tag: str, count: int, ranks: int = 1) -> list[str]:
    return [f"{tag} rank {r} line {i} " + "x" * PAD for r in range(ranks) for i in range(count)]


class Job:
    """One task instance's operator on the real node, run in a thread as a worker (or the triggerer) runs it."""

    def __init__(
        self,
        namespace: str,
        tag: str,
        *,
        deferrable: bool,
        count: int,
        interval: float = 0.05,
        ranks: int = 1,
        first_attempt: int | None = None,
        **kwargs,
    ) -> None:
        kwargs.setdefault("workers", ranks)
        kwargs.setdefault("on_finish_action", "keep")  # counted at the end: every MPIJob the task created
        self.tag, self.count, self.ranks, self.namespace = tag, count, ranks, namespace
        self.op = real_operator(
            tag,
            namespace,
            program=numbered(tag, count, interval, first_attempt),
            deferrable=deferrable,
            **kwargs,
        )
        self.name = self.op.build_manifest(ctx(tag))["metadata"]["name"]
        self.deferrable = deferrable
        self._run = Background(run, self.op, deferrable)

    def lines(self, record) -> list[str]:
        return [ln for ln in list(record.lines) if ln.startswith(f"{self.tag} rank ")]

    def streaming(self, record, at_least: int = 10) -> None:
        """Until ``at_least`` of its lines are in the task log (the stream is attached)."""
        wait_until(
            lambda: len(self.lines(record)) >= at_least,
            timeout=TIMEOUT,
            interval=0.2,
            ignore=(),
            what=f"{at_least} lines of {self.tag} in the task log",
        )

    def result(self):
        return self._run.result(TIMEOUT)

    def launcher(self, k8s) -> client.V1Pod:
        """Its launcher pod, as the API shows it now (one attempt)."""
        (launcher,) = [
            p for p in launcher_pods(k8s, self.namespace) if p.metadata.name.startswith(f"{self.name}-")
        ]
        return launcher

    def measure(
        self,
        results: Results,
        scenario: str,
        k8s,
        namespace: str,
        record,
        expected: list[str],
        outcome: str = "success",
        per_attempt: list[list[str]] | None = None,
        unserved: list[str] = (),
    ) -> Run:
        """Wait for the task's end; then count its MPIJobs, orphans (live jobs), lost and doubled lines: of
        ``expected`` in the whole task log, or of ``per_attempt[i]`` under the header of launcher attempt i + 1.
        ``unserved``: expected lines the API never served (counted apart, not as lost)."""
        error = self.result()
        jobs = [j for j in mpijobs(k8s, namespace) if j["metadata"]["labels"].get(TASK_ID_LABEL) == self.tag]
        live = [j for j in jobs if not j["metadata"].get("deletionTimestamp") and not job_state(j).terminal]
        sections = (
            list(zip(attempts(record.lines), per_attempt)) if per_attempt else [(record.lines, expected)]
        )
        lost = doubled = 0
        for lines, wanted in sections:
            wanted_set = set(wanted)
            seen = Counter(ln for ln in lines if ln in wanted_set)
            lost += sum(1 for ln in wanted if not seen[ln] and ln not in unserved)
            doubled += sum(n - 1 for n in seen.values() if n > 1)
        state = "failed" if isinstance(error, Exception) else "success"
        if (
            state != outcome
        ):  # shown by pytest when the test fails: the task's error with its pods' last lines
            print(f"{self.tag}: {state}, expected {outcome}:\n{error}")
        text = (
            "; ".join(
                [
                    *str(error).splitlines()[:1],
                    *(ln for ln in str(error).splitlines() if ln.startswith("cause: ")),
                ][:2]
            )
            if state == "failed"
            else "launcher succeeded"
        )
        return results.add(
            Run(
                f"{scenario} ({'deferrable' if self.deferrable else 'sync'})",
                jobs=len(jobs),
                orphans=len(live),
                lost=lost,
                doubled=doubled,
                state=state,
                message=re.sub(
                    r"-launcher-[a-z0-9]{5}\b",
                    "-launcher-<pod>",
                    text.replace(self.name, "<job>").replace(namespace, "<ns>"),
                ),
                spurious=int(state != outcome),
                unserved=len(unserved),
            )
        )

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
def test_a_node_process_killed_and_restarted_mid_stream(
    real_node, real_k8s, real_namespace, real_conn, record, results, repeat, process, caplog
):
    """SIGKILL of the node's kubelet, containerd or kube-apiserver (serve's supervision starts it again, as systemd
    or the kubelet would) while a sync and a deferrable task stream their launchers: the follow streams break (the
    kubelet's, or the API server's proxy of it); each reader resumes where it was. Containers live on
    (containerd's shims outlive it). Every line once, both tasks succeed.

    That the fault hit live streams is shown without the provider's word, for each launcher: its container ended
    after the kill (its finishedAt); its program had not printed all its lines by the kill (it sleeps ``interval``
    after each line, so by then it had printed at most 1 + (kill - its process's start, by ps on the node) /
    interval); the killed process has a new PID once serve started it again, and lines reached the task log after
    that. The provider's own warnings (a read that failed...), if any, are printed: pytest shows them on failure."""
    # 18 s: mid-stream at the kill though a task log gets the first lines 3-7 s after the program starts; 300 lines
    # (52 KB) stay under the rotation size (a reader attaching after a rotation misses the rotated file: not this test)
    interval = 0.06
    jobs = [
        Job(real_namespace, f"{kind}-{process}", deferrable=kind == "deferred", count=300, interval=interval)
        for kind in ("sync", "deferred")
    ]
    for job in jobs:
        job.streaming(record)
    starts = [program_start(real_node, job.tag) for job in jobs]
    pid = node_pid(real_node, process)
    before_kill = datetime.now(UTC)
    real_node.kill_process(process)
    after_kill = datetime.now(UTC)
    wait_until(
        lambda: node_pid(real_node, process) not in (None, pid),
        timeout=60,
        interval=0.2,
        ignore=(),
        what=f"{process} started again (a new PID)",
    )
    in_log_at_restart = [len(job.lines(record)) for job in jobs]
    runs = [
        job.measure(
            results,
            f"{process} SIGKILL + restart mid-stream",
            real_k8s,
            real_namespace,
            record,
            printed(job.tag, job.count),
        )
        for job in jobs
    ]
    print(
        *(
            f"{r.threadName}: {r.getMessage()}"
            for r in caplog.records
            if r.name.startswith("airflow_mpi") and r.levelname == "WARNING"
        ),
        sep="\n",
    )
    for job, run_, start, at_restart in zip(jobs, runs, starts, in_log_at_restart):
        assert clean(run_) == (1, 0, 0, 0, 0), run_
        ended = job.launcher(real_k8s).status.container_statuses[0].state.terminated
        assert ended.finished_at > before_kill, f"{job.tag}: the launcher ended before the kill ({ended})"
        at_most = 1 + (after_kill - start).total_seconds() / interval
        assert at_most < job.count, (
            f"{job.tag}: by the kill its program (started {start}) may have printed all"
        )
        assert len(job.lines(record)) > at_restart, (
            f"{job.tag}: no line reached the task log after the restart"
        )


def node_sh(node: NodeCluster, script: str) -> str:
    """``script``'s output, run by sh on the node (fails quietly: an empty answer)."""
    return docker("exec", node.container, "sh", "-c", script, check=False).stdout


def program_start(node: NodeCluster, tag: str) -> datetime:
    """When the newest process running ``tag``'s program on the node started (ps lstart: to the second, rounded
    down, so never after it; the node's clock is UTC)."""
    rows = [
        ln.split(None, 5) for ln in node_sh(node, "ps -eo lstart=,args=").splitlines() if f"{tag} rank" in ln
    ]
    assert rows, f"no process of {tag}'s program on the node"
    started = max(datetime.strptime(" ".join(row[:5]), "%a %b %d %H:%M:%S %Y") for row in rows)
    return started.replace(tzinfo=UTC)


def node_pid(node: NodeCluster, process: str) -> str | None:
    """The PID of the node's process ``process``, None while none runs (what kill_process signals)."""
    return next(iter(node_sh(node, f"pgrep -x {process}").split()), None)


# ------------------------------------------------------------------ log rotation
class FileStat(NamedTuple):
    size: int
    mtime_ns: int
    ctime_ns: int


def test_log_rotation_during_long_streams(
    real_node, real_k8s, real_namespace, real_conn, record, results, repeat
):
    """The kubelet rotates each launcher's log four or five times (64 KiB, checked every 3 s) while a sync and a
    deferrable task follow it. Measured against the node's own files (the pods are kept): every line was written
    there once, the log really rotated, and every line the kubelet served is in the task log once. The task log
    says, once per launcher, that its log rotated while followed and where the node keeps the rotated files.

    What a follower can miss: at a rotation the kubelet renames ``0.log`` to ``0.log.<its clock, to the second>``,
    then containerd creates a new ``0.log`` and swaps its writer, while the old writer can still write what it had
    read from the program (a line or two) into the renamed file. The kubelet's follow (k8s.io/cri-client logs.go)
    reads the old file to its end at every event of the directory until the new file's create event (the rename's
    events come before it), then switches without reading the old file again: a line it misses was written to a
    rotated file after the rename. Such a line is counted apart ("never served") only when the node's files say so:
    it is one of the file's last two lines, its CRI time is no earlier than the second in the file's name, and the
    file was written after its rename: ctime == mtime (a write sets both; the rename sets ctime alone, so a file
    renamed after its last write has ctime > mtime), stat'ed before the kubelet compressed it (the .gz is a new
    file, at the next rotation) at the size its content has (its final state). File times are the kernel's coarse
    clock (4 ms ticks here): "after" means "not before the rename's tick". Any other missing line fails the test."""
    with log_stats(real_node, real_namespace) as stats:
        jobs = [
            Job(real_namespace, f"rotated-{kind}", deferrable=kind == "deferred", count=3000, interval=0.004)
            for kind in ("sync", "deferred")
        ]
        for job in jobs:
            job.result()
    for job in jobs:
        launcher = job.launcher(real_k8s).metadata.name
        files = log_files(real_node, real_namespace, launcher)
        assert len(files) >= 3, f"the log rotated {len(files) - 1} times"
        on_node = [cri_text(ln) for f in files.values() for ln in f if cri_text(ln).startswith(job.tag)]
        assert on_node == printed(job.tag, job.count), (
            "the node did not keep each printed line once, in order"
        )
        own_stats = {name: st for (p, name), st in stats.items() if p == launcher}
        tails = rotation_tails(files, own_stats)
        served = set(record.lines)
        missing = [ln for ln in on_node if ln not in served]
        run_ = job.measure(
            results,
            "kubelet log rotation (64 KiB) during the stream",
            real_k8s,
            real_namespace,
            record,
            printed(job.tag, job.count),
            unserved=[ln for ln in missing if any(ln in t for t in tails.values())],
        )
        said = [
            ln
            for ln in record.lines
            if f"launcher log {launcher}/launcher/0: the kubelet rotated this log while it was followed" in ln
            and "/var/log/pods/" in ln
        ]
        assert len(said) == 1, f"the task log said the rotation {len(said)} times"
        evidence = [
            f"{name}: {brief(cri_text(f[0]))} .. {brief(cri_text(f[-1]))}; "
            f"{own_stats.get(name.removesuffix('.gz'))}; may miss {list(map(brief, tails.get(name, [])))}"
            for name, f in files.items()
            if f
        ]
        assert clean(run_) == (1, 0, 0, 0, 0), (
            f"{run_}\nmissing: {list(map(brief, missing))}\nfiles:\n" + "\n".join(evidence)
        )


@contextlib.contextmanager
def log_stats(node: NodeCluster, namespace: str) -> Iterator[dict[tuple[str, str], FileStat]]:
    """(pod, rotated file) -> its last stat, for each launcher of ``namespace``: sampled every ``STAT_EVERY`` s while
    the block runs, and once after it (a rotated file's own times are gone once the kubelet compressed it)."""
    latest: dict[tuple[str, str], FileStat] = {}
    script = f"stat -c '%n %s %.9Y %.9Z' /var/log/pods/{namespace}_*/launcher/0.log.*[0-9] 2>/dev/null"

    def sample() -> None:
        for row in node_sh(node, script).splitlines():
            path, size, mtime, ctime = row.rsplit(" ", 3)
            key = PurePosixPath(path).parts[-3].split("_")[1], PurePosixPath(path).name
            latest[key] = FileStat(int(size), int(mtime.replace(".", "")), int(ctime.replace(".", "")))

    def every() -> None:
        while not stop.wait(STAT_EVERY):
            sample()

    stop = threading.Event()
    sampler = threading.Thread(target=every, daemon=True)
    sampler.start()
    try:
        yield latest
    finally:
        stop.set()
        sampler.join()
        sample()


def log_files(node: NodeCluster, namespace: str, pod_: str) -> dict[str, list[str]]:
    """A launcher's files on the node by name (NodeCluster.container_log_files gives them in this order)."""
    names = node_sh(node, f"cd /var/log/pods/{namespace}_{pod_}_*/launcher && ls").split()
    files = node.container_log_files(namespace, pod_, "launcher")
    names = sorted(
        (n for n in names if n.startswith("0.log")), key=lambda n: (n == "0.log", n.removesuffix(".gz"))
    )
    assert len(names) == len(files), (names, len(files))
    return dict(zip(names, files))


def cri_text(line: str) -> str:
    """A CRI log line's text (``<time> <stream> F <text>``: the launcher's lines are short, never partial)."""
    return line.split(" ", 3)[3]


def brief(text: str) -> str:
    """``<tag> rank <r> line <i>`` of a printed line (without its padding)."""
    return " ".join(text.split(" ", 5)[:5])


def rotation_tails(files: dict[str, list[str]], stats: dict[str, FileStat]) -> dict[str, list[str]]:
    """Rotated file -> the texts of its lines the rotation race may have kept from a follower, by the node's files
    alone (see test_log_rotation_during_long_streams): of its last two lines, those stamped no earlier than the
    second in its name, when its final state was stat'ed with ctime == mtime; none otherwise."""
    tails: dict[str, list[str]] = {}
    for name, lines in list(files.items())[:-1]:  # the live 0.log is the last
        stat = stats.get(name.removesuffix(".gz"))
        if stat and stat.ctime_ns == stat.mtime_ns and stat.size == sum(len(ln.encode()) + 1 for ln in lines):
            renamed = datetime.strptime(name.split(".")[2], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)  # node: UTC
            tails[name] = [
                cri_text(ln) for ln in lines[-2:] if datetime.fromisoformat(ln.split(" ", 1)[0]) >= renamed
            ]
    return tails


def test_clean_pod_policy_all_and_ttl_with_real_exits(
    real_k8s, real_namespace, real_conn, record, results, repeat
):
    """``cleanPodPolicy: All`` + ``ttlSecondsAfterFinished: 1``: the launcher prints its last lines as it exits and its
    pod goes within a second. The kubelet ends the follow stream when the container exits, so the reader knows it
    read everything: every line once, and no "could not be read to its end" in the task log."""
    jobs = [
        Job(
            real_namespace,
            f"ttl-{kind}",
            deferrable=kind == "deferred",
            count=60,
            interval=0.02,
            clean_pod_policy="All",
            ttl_seconds_after_finished=1,
        )
        for kind in ("sync", "deferred")
    ]
    for job in jobs:
        run_ = job.measure(
            results,
            "cleanPodPolicy All + ttlSecondsAfterFinished 1",
            real_k8s,
            real_namespace,
            record,
            printed(job.tag, job.count),
        )
        assert clean(run_) == (1, 0, 0, 0, 0), run_
    assert not [ln for ln in record.lines if "could not be read" in ln], record.lines


# ------------------------------------------------------------------ a process or a pod of one job
def test_a_ranks_process_killed_fails_the_job_naming_the_rank(
    real_k8s, real_namespace, real_conn, record, results, repeat
):
    """SIGKILL of the MPI rank in worker 1 (a process of the worker container, sshd lives on): mpirun aborts the
    job, the launcher fails, backoffLimit 0 ends the MPIJob Failed. The task fails; its first cause names the rank,
    its worker pod and the signal, as mpirun reports them in the launcher's last lines."""
    job = Job(real_namespace, "rank-killed", deferrable=False, count=2000, interval=0.05, ranks=2)
    job.streaming(record, at_least=20)
    worker = f"{job.name}-worker-1"
    killer = (
        f"import os; [os.kill(int(p), 9) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()"
        f" and b'{job.tag} rank' in open(f'/proc/{{p}}/cmdline', 'rb').read()]"
    )
    stream(
        client.CoreV1Api(real_k8s).connect_get_namespaced_pod_exec,
        worker,
        real_namespace,
        command=["python3", "-c", killer],
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
    )
    error = job.failed(
        results, "SIGKILL of a rank (worker 1's MPI process)", real_k8s, real_namespace, record
    )
    first_cause = next(ln for ln in str(error).splitlines() if ln.startswith("cause: "))
    assert re.fullmatch(
        rf"cause: rank 1 on {worker}\S*: signal 9 \(SIGKILL\), as mpirun reports it", first_cause
    ), error


def test_the_launchers_container_killed_with_a_retry_left(
    real_node, real_k8s, real_namespace, real_conn, record, results, repeat
):
    """SIGKILL of the launcher container's process (from the node: exit 137, restartPolicy Never): a failed attempt;
    ``retries=1`` (backoffLimit 1) gives a second launcher pod, whose log comes under its own header. Attempt 1's
    lines up to the kill and all of attempt 2's, each once; the task succeeds. Attempt 1's program would print 1,000
    lines (60 s, under the 64 KiB rotation for 30 s), so it still runs when the test kills it, however late the test
    sees its 20th line (a CI run under load saw the 150-line program end first: no process to kill)."""
    job = Job(
        real_namespace,
        "launcher-killed",
        deferrable=True,
        count=150,
        interval=0.06,
        retries=1,
        first_attempt=1000,
    )
    job.streaming(record, at_least=20)
    (first,) = launcher_pods(real_k8s, real_namespace)
    real_node.kill_container(
        pod(real_k8s, real_namespace, first.metadata.name).status.container_statuses[0].container_id
    )
    job.result()
    first_pod, _second_pod = launcher_pods(real_k8s, real_namespace)
    assert first_pod.status.container_statuses[0].state.terminated.exit_code == 137
    cut_short = [
        ln for ln in pod_log(real_k8s, real_namespace, first_pod.metadata.name) if ln.startswith(job.tag)
    ]
    assert 20 <= len(cut_short) < 1000
    run_ = job.measure(
        results,
        "SIGKILL of the launcher's container, a retry left",
        real_k8s,
        real_namespace,
        record,
        [],
        per_attempt=[cut_short, printed(job.tag, job.count)],
    )
    assert clean(run_) == (1, 0, 0, 0, 0), run_
    headers = [ln.split(",")[0] for ln in record.lines if ln.startswith(HEADER)]
    assert headers == [f"{HEADER} 1 of 2", f"{HEADER} 2 of 2"], headers


def test_a_worker_evicted_fails_the_job(real_k8s, real_namespace, real_conn, record, results, repeat):
    """The Eviction API on worker 0 while its rank runs: the kubelet stops the container (sshd and the rank with it),
    mpirun loses the rank and fails; backoffLimit 0 ends the MPIJob Failed and the task fails saying why."""
    job = Job(real_namespace, "evicted", deferrable=True, count=2000, interval=0.05, ranks=2)
    job.streaming(record, at_least=20)
    client.CoreV1Api(real_k8s).create_namespaced_pod_eviction(
        f"{job.name}-worker-0",
        real_namespace,
        client.V1Eviction(
            metadata=client.V1ObjectMeta(name=f"{job.name}-worker-0", namespace=real_namespace)
        ),
    )
    error = job.failed(results, "eviction of a worker pod (the job fails)", real_k8s, real_namespace, record)
    assert any(
        ln.startswith(f"cause: worker pod {job.name}-worker-0 (container ")
        and "disrupted (EvictionByEvictionAPI: " in ln
        for ln in str(error).splitlines()
    ), error
