"""What each caller needs from a hook, as Protocols: the seams the real hooks (hooks/mpijob.py,
hooks/async_mpijob.py) and the tests' doubles both fill, so that no caller asks which one it holds.

* :class:`MPIJobRequests`: the synchronous requests of the operator, the submission (operators/submission.py),
  the decorators and the orphan sweep;
* :class:`PlanSender`: a hook that sends request plans (hooks/requests.py ``Plan``): the claims
  (identity_claims.py);
* :class:`PodLogReader`, :class:`JobReads`: the awaited reads of the log pump, the failure report and the
  monitor;
* :class:`WatchRequests`: what the watch hub lists and watches (wait/watch_hub.py); :class:`WaitHook`: a
  monitor's hook, which the hub shares.

They are ``runtime_checkable`` so that a test can check a hook or a double with ``isinstance`` (method names
only: the signatures are for mypy). Importing this module does not import the Kubernetes clients.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from airflow_mpi.hooks.requests import Call, Steps


@runtime_checkable
class MPIJobRequests(Protocol):
    """The synchronous MPIJob requests: namespaces, find, create, delete, the launcher's log, owned
    Secrets."""

    api_version: str

    def resolve_namespace(self, explicit: str | None = None) -> str: ...

    def configured_namespace(self) -> str | None: ...

    def connection_settings(self) -> dict[str, Any]: ...

    def get_mpijob(self, name: str, namespace: str | None = None) -> Any: ...

    def list_mpijobs(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]: ...

    def create_mpijob(self, manifest: dict[str, Any], namespace: str | None = None) -> dict[str, Any]: ...

    def delete_mpijob(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> Any: ...

    def delete_live_mpijob(
        self, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> Any: ...

    def wait_for_deleted(self, name: str, namespace: str | None = None, timeout: float = 300) -> bool: ...

    def create_owned_secret(
        self, name: str, namespace: str, string_data: dict[str, str], owner: dict[str, Any]
    ) -> dict[str, Any]: ...

    def launcher_log(self, name: str, namespace: str | None = None) -> Iterator[str] | Iterable[str]: ...


@runtime_checkable
class PlanSender(Protocol):
    """A hook that sends a plan of requests in a namespace (hooks/requests.py): what the claims are sent
    through."""

    def _run(self, namespace: str | None, plan: Callable[[str], Steps | Call]) -> Any: ...

    def list_mpijobs(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]: ...


@runtime_checkable
class PodLogReader(Protocol):
    """A pod's log, awaited line by line (each line with its RFC 3339 timestamp): the log pump, failure
    reports."""

    def read_pod_log(
        self, pod: str, namespace: str | None = None, **query: Any
    ) -> AsyncGenerator[str, None]: ...


@runtime_checkable
class JobReads(PodLogReader, Protocol):
    """The awaited reads (and the one delete) of a wait on one MPIJob besides the watch hub's."""

    async def get_mpijob(self, name: str, namespace: str | None = None) -> Any: ...

    async def launcher_pods(self, name: str, namespace: str | None = None) -> list[Any]: ...

    async def job_events(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]: ...

    async def pod_events(
        self, pod_names: Iterable[str], namespace: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def delete_mpijob(
        self, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> Any: ...

    async def delete_live_mpijob(
        self, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> Any: ...


@runtime_checkable
class WatchRequests(Protocol):
    """What the watch hub of one (cluster, namespace) sends: lists and watches of a kind, the GET of a
    launcher Job. ``watch_identity``: equal for hooks that reach the same cluster as the same user (they share
    a hub). Entered (``async with``) while the hub lives, so its requests share one API client."""

    def watch_identity(self) -> Hashable: ...

    async def list_objects(
        self, kind: str, namespace: str, **selectors: Any
    ) -> tuple[list[dict[str, Any]], str | None]: ...

    def watch_objects(
        self, kind: str, namespace: str, **options: Any
    ) -> AsyncIterator[tuple[str, Any, str | None]]: ...

    async def get_launcher_job(self, name: str, namespace: str | None = None) -> Any: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc_info: Any) -> Any: ...


@runtime_checkable
class WaitHook(JobReads, WatchRequests, Protocol):
    """A monitor's hook (wait/monitor.py): its own reads, and the requests of the hub it subscribes
    to."""


__all__ = ["JobReads", "MPIJobRequests", "PlanSender", "PodLogReader", "WaitHook", "WatchRequests"]
