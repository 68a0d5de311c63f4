"""Which launcher log streams exist, in attempt order.

Every launcher attempt is either a new pod (restartPolicy Never: the Job controller creates one
per attempt and keeps the failed ones) or a restarted container in the same pod (OnFailure:
only the immediately previous container's log is still retrievable, with ``previous=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_mpi.wait.logs import stream_key
from airflow_mpi.wait.progress import PodSummary


@dataclass(frozen=True)
class LogStream:
    key: str
    pod: str
    container: str
    restart: int
    previous: bool  # read with previous=True (an earlier container of a restarted pod)
    finished: bool  # the container has terminated: one read gets everything
    retrievable: bool = True  # Kubernetes keeps only the last terminated container's log


def launcher_streams(pods: list[PodSummary]) -> list[LogStream]:
    """Readable (or started) launcher streams, oldest attempt first."""
    streams: list[LogStream] = []
    ordered = sorted(pods, key=lambda p: (p.created is None, p.created or 0, p.name))
    for pod in ordered:
        container = pod.container or "launcher"
        for restart in range(pod.restart_count):
            streams.append(LogStream(stream_key(pod.name, container, restart), pod.name, container, restart,
                                     previous=True, finished=True, retrievable=restart == pod.restart_count - 1))
        if pod.state in ("running", "terminated"):
            streams.append(LogStream(stream_key(pod.name, container, pod.restart_count), pod.name, container,
                                     pod.restart_count, previous=False, finished=pod.state == "terminated"))
    return streams


def attempt_header(number: int, max_attempts: int | None, stream: LogStream) -> str:
    """The line that opens one attempt's log section in the task log."""
    of = f" of {max_attempts}" if max_attempts else ""
    restart = f", container restart {stream.restart}" if stream.restart else ""
    lost = " (log no longer retrievable: Kubernetes keeps only the previous container's log)" if not stream.retrievable else ""
    return f"========== launcher attempt {number}{of}, pod {stream.pod}{restart}{lost} =========="
