"""A watch on the in-stack cluster's objects of one kind, for tests that must see objects the provider creates and
deletes within seconds (a TrainJob lives as long as its run): ``kubectl get --watch`` inside the kube service (the
cluster's API is not published to the host), its events collected by a thread and awaited, never polled."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from localcluster.processes import child_env

Event = dict[str, Any]  # {"type": "ADDED" | "MODIFIED" | "DELETED", "object": {...}}
RUN_ID = "airflow-mpi.io/run-id"  # the annotation holding the raw run id (naming.identity_annotations)


def of_run(run_id: str) -> Callable[[dict], bool]:
    """Whether an object (a job of the provider's) was made for the DAG run ``run_id``."""
    return lambda obj: (obj["metadata"].get("annotations") or {}).get(RUN_ID) == run_id


def event_of_run(run_id: str) -> Callable[[Event], bool]:
    """Whether a watch event's object was made for the DAG run ``run_id``."""
    ours = of_run(run_id)
    return lambda event: ours(event["object"])


class KubeWatch:
    """``kubectl get <resource> --all-namespaces --watch --output-watch-events -o json`` in the kube service.

    kubectl lists the objects there are first (as ADDED events), so an object created before the watch began and
    still there is seen too. ``wait(predicate)`` returns the first event it accepts, as soon as it arrives. The
    kubectl inside ends after ``limit`` s at the latest (coreutils' ``timeout``): a client stopped early leaves no
    watch running in the service."""

    def __init__(self, project: str, kubeconfig: str, resource: str, limit: float = 900) -> None:
        self.events: list[Event] = []
        self._changed = threading.Condition()
        self._ended = False
        kubectl = ["kubectl", f"--kubeconfig={kubeconfig}", "get", resource, "--all-namespaces", "--watch"]
        self._proc = subprocess.Popen(
            ["docker", "compose", "-p", project, "exec", "-T", "kube", "timeout", f"{limit:.0f}", *kubectl,
             "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"watch-{resource}")
        self._reader.start()

    def _read(self) -> None:
        """kubectl prints one JSON value per event: on one line (kubectl 1.35) or indented over several; each is
        decoded as soon as it is complete."""
        assert self._proc.stdout is not None
        decoder, pending = json.JSONDecoder(), ""
        for line in self._proc.stdout:
            pending += line
            while pending.strip():
                try:
                    event, end = decoder.raw_decode(pending.lstrip())
                except json.JSONDecodeError:  # not complete yet
                    break
                pending = pending.lstrip()[end:]
                with self._changed:
                    self.events.append(event)
                    self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait(self, accept: Callable[[Event], bool], timeout: float, what: str) -> Event:
        """The first event (seen so far or to come) that ``accept`` takes; fails after ``timeout`` s or when the
        watch ended, naming ``what`` and the events seen."""
        return self._await(lambda events: next((e for e in events if accept(e)), None), timeout, what)

    def wait_until(self, holds: Callable[[list[Event]], bool], timeout: float, what: str) -> None:
        """Return once ``holds`` is true of the events so far (re-checked at each event); fails as ``wait``."""
        self._await(lambda events: holds(events) or None, timeout, what)

    def _await(self, find: Callable[[list[Event]], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = find(self.events)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    break
                self._changed.wait(left)
        seen = [(e["type"], e["object"]["metadata"]["name"]) for e in self.events]
        stderr = "" if not self._ended or self._proc.stderr is None else self._proc.stderr.read()
        raise AssertionError(
            f"no watch event for {what} within {timeout:.0f}s; seen: {seen} {stderr}".strip()
        )

    def close(self) -> None:
        """Stop the client (the kubectl inside the kube service ends at its ``limit``, or with the stack)."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._reader.join(10)

    def __enter__(self) -> KubeWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
