"""The kinds by api_version: the three built in, and any a distribution registers under the entry point group
``airflow_mpi.job_kinds`` (each entry point names a JobKind; an in-house operator's CRD becomes a plug-in).

Entry points are read once, the first time an api_version is asked for that is not built in (reading installed
distributions' metadata is the registry's only side effect; the kinds themselves are pure data).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from airflow_mpi.jobspec.kinds.kind import JobKind
from airflow_mpi.jobspec.kinds.mpijob_v1 import MPIJOB_V1
from airflow_mpi.jobspec.kinds.mpijob_v2beta1 import MPIJOB_V2BETA1
from airflow_mpi.jobspec.kinds.trainjob import TRAINJOB

ENTRY_POINT_GROUP = "airflow_mpi.job_kinds"
DEFAULT_KIND = MPIJOB_V2BETA1  # what a task gets without api_version

_KINDS: dict[str, JobKind] = {k.api_version: k for k in (MPIJOB_V2BETA1, MPIJOB_V1, TRAINJOB)}
_loaded = False


def register(kind: JobKind) -> JobKind:
    """Add ``kind`` (refused when another kind already has its api_version)."""
    if not isinstance(kind, JobKind):
        raise TypeError(f"a job kind must be a JobKind, not {type(kind).__name__}")
    known = _KINDS.get(kind.api_version)
    if known is not None and known is not kind:
        raise ValueError(f"api_version {kind.api_version!r} is already registered ({known.controller})")
    _KINDS[kind.api_version] = kind
    return kind


def load_plugins() -> None:
    """Register the kinds of the ``airflow_mpi.job_kinds`` entry points (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        register(point.load())


def kind_for(api_version: object) -> JobKind | None:
    """The kind of ``api_version``, or None when no kind (built in or plugged in) has it."""
    if not isinstance(api_version, str):
        return None
    if api_version not in _KINDS:
        load_plugins()
    return _KINDS.get(api_version)


def kind_or_default(api_version: object) -> JobKind:
    """The kind of ``api_version``; the default kind's where it has none (a spec that validation will refuse
    still has to be laid out and named as something)."""
    return kind_for(api_version) or DEFAULT_KIND


def kinds() -> tuple[JobKind, ...]:
    """Every known kind (plug-ins included), the built-in ones first."""
    load_plugins()
    return tuple(_KINDS.values())


def api_versions() -> tuple[str, ...]:
    """Every api_version a kind is known for (plug-ins included)."""
    load_plugins()
    return tuple(_KINDS)
