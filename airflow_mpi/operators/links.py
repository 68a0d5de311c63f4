"""Extra links from a task to its MPIJob: the job and its launcher pod in the cluster's console, its logs in a log
system, each from a URL template in the Kubernetes connection's extras (docs/links-and-logs.md).

The worker renders the templates, where the connection is at hand, and keeps the URLs in the XCom
``LINKS_XCOM_KEY``; a link only reads that XCom. So it works after the run, whoever asks: Airflow 2.11's webserver
calls ``get_link`` on every view, Airflow 3 calls it once in the worker at the try's end and stores what it returns
(the UI then shows that). A template that is not set, or names a value not known yet (the launcher pod before
one started), gives no link; a link never fails a task.

Placeholders (exactly these, in braces; any other brace is left as it is, so a Loki query's ``{namespace="..."}``
needs no escaping): ``{namespace}``, ``{name}`` (the MPIJob), ``{uid}``, ``{pod}`` (the newest launcher pod),
``{start_ms}``, ``{end_ms}`` (epoch milliseconds of the job's start and end, ``now`` while it runs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol
from urllib.parse import quote

from airflow.providers.common.compat.sdk import BaseOperatorLink

from airflow_mpi.jobspec.kinds.trainjob import TRAINJOB_KIND
from airflow_mpi.jobspec.vocabulary import MPIJOB_KIND

if TYPE_CHECKING:
    from airflow_mpi.wait.contract import WaitResult

LINKS_XCOM_KEY = "airflow_mpi_links"
# the link's kind -> the connection extra holding its URL template
TEMPLATE_EXTRAS = {
    "job": "airflow_mpi_job_url",
    "pod": "airflow_mpi_pod_url",
    "logs": "airflow_mpi_logs_url",
}
PLACEHOLDERS = ("namespace", "name", "uid", "pod", "start_ms", "end_ms")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


@dataclass(frozen=True)
class LinkValues:
    """What the templates may name, as far as the try knows it."""

    namespace: str
    name: str
    uid: str | None = None
    launcher_pods: Sequence[str] = ()  # oldest first
    start: datetime | None = None
    end: datetime | None = None  # None: the job has not ended

    def fields(self) -> dict[str, str]:
        known = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "pod": self.launcher_pods[-1] if self.launcher_pods else None,
            "start_ms": _epoch_ms(self.start),
            "end_ms": _epoch_ms(self.end) if self.end else "now",
        }
        return {key: value for key, value in known.items() if value}

    @classmethod
    def of_result(cls, result: WaitResult, now: datetime) -> LinkValues | None:
        """At a try's end: the launcher pods are known, and the job's time range (a job that ended without a
        completion time, e.g. a Failed one, ends now)."""
        if not (result.name and result.namespace):
            return None
        return cls(
            result.namespace,
            result.name,
            result.uid,
            tuple(result.launcher_pods),
            _parse(result.start_time),
            _parse(result.completion_time) or now,
        )


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _epoch_ms(moment: datetime | None) -> str | None:
    return str(int(moment.timestamp() * 1000)) if moment else None


def render_links(extras: Mapping[str, Any], values: LinkValues) -> dict[str, str]:
    """The URL of each link whose template ``extras`` sets and whose placeholders are all known."""
    fields = values.fields()
    links = {}
    for kind, extra in TEMPLATE_EXTRAS.items():
        template = extras.get(extra)
        if not isinstance(template, str) or not template.strip():
            continue
        named = set(_PLACEHOLDER.findall(template))
        if named <= fields.keys():
            links[kind] = _PLACEHOLDER.sub(lambda m: quote(fields[m.group(1)], safe=""), template.strip())
    return links


def persist_links(context: Any, hook: LinkTemplates, values: LinkValues | None, log: Any) -> None:
    """Keep this try's URLs in the XCom the links read, from the templates of ``hook``'s connection. Nothing is
    kept when no template is set or nothing is known (no context: a unit test; no job); a failure is a warning
    (links are no reason to fail a task)."""
    if context is None or values is None:
        return
    try:
        links = render_links(hook.connection_extras(), values)
        ti = context["ti"]
        if links and hasattr(ti, "xcom_push"):
            ti.xcom_push(key=LINKS_XCOM_KEY, value=links)
    except Exception as err:
        log.warning("No extra links for MPIJob %s/%s: %s", values.namespace, values.name, err)


class LinkTemplates(Protocol):
    """Where the templates are: the hook's connection (hooks/mpijob.py)."""

    def connection_extras(self) -> Mapping[str, Any]: ...


class _MPIJobConsoleLink(BaseOperatorLink):
    """A URL the worker kept in the XCom ``LINKS_XCOM_KEY`` (see the module docstring); '' when there is none."""

    name: ClassVar[str]
    kind: ClassVar[str]

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.providers.common.compat.sdk import XCom

        links = XCom.get_value(ti_key=ti_key, key=LINKS_XCOM_KEY)
        url = links.get(self.kind) if isinstance(links, dict) else None
        return url if isinstance(url, str) else ""


class MPIJobLink(_MPIJobConsoleLink):
    """The MPIJob in the cluster's console (connection extra ``airflow_mpi_job_url``)."""

    name = MPIJOB_KIND  # the button's label
    kind = "job"


class MPIJobLauncherPodLink(_MPIJobConsoleLink):
    """The newest launcher pod in the cluster's console (``airflow_mpi_pod_url``), once the try has ended."""

    name = "MPIJob launcher pod"
    kind = "pod"


class MPIJobLogsLink(_MPIJobConsoleLink):
    """The job's logs in a log system, over the job's time range (``airflow_mpi_logs_url``)."""

    name = "MPIJob logs"
    kind = "logs"


class TrainJobLink(MPIJobLink):
    """The TrainJob in the cluster's console (the same extra: only the button's label names the kind)."""

    name = TRAINJOB_KIND


class TrainJobLauncherPodLink(MPIJobLauncherPodLink):
    name = f"{TRAINJOB_KIND} launcher pod"


class TrainJobLogsLink(MPIJobLogsLink):
    name = f"{TRAINJOB_KIND} logs"


LINKS = (MPIJobLink, MPIJobLauncherPodLink, MPIJobLogsLink)
TRAINJOB_LINKS = (TrainJobLink, TrainJobLauncherPodLink, TrainJobLogsLink)


def extra_links(links: tuple[type[_MPIJobConsoleLink], ...] = LINKS) -> tuple[BaseOperatorLink, ...]:
    """The links of a task class of the provider (a fresh tuple of instances: Airflow keeps them per class); the
    buttons' labels name the job's kind (TRAINJOB_LINKS: TrainJobOperator's)."""
    return tuple(link() for link in links)
