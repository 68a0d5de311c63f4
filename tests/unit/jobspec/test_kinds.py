"""Job kinds (jobspec/kinds/): each built-in kind is asked through the same seam the model, the request layer and
the wait engine use (resolve, pod_selectors, assess, the hub's selector), and its answers are its own data: no test
of one kind reads another kind's branches. A kind registered through the entry point group is found by api_version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from airflow_mpi.hooks.requests import EVENTS, pod_selectors, split_api_version
from airflow_mpi.jobspec import Defaults, MPIJobSpec, ReplicaSpec, RunPolicy, resolve
from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.kinds import (
    ATTEMPT_IS_CONTAINER_RESTART,
    ATTEMPT_IS_POD,
    ENTRY_POINT_GROUP,
    MPIJOB_V1,
    MPIJOB_V2BETA1,
    JobKind,
    PodLabels,
    api_versions,
    kind_for,
    register,
    registry,
)
from airflow_mpi.jobspec.status import job_state
from airflow_mpi.wait.contract import Outcome
from airflow_mpi.wait.progress import EventSummary, Timeouts, assess
from airflow_mpi.wait.summaries import pod_role
from airflow_mpi.wait.watch_hub import watch_selector

KINDS = [MPIJOB_V2BETA1, MPIJOB_V1]
IDS = [k.api_version for k in KINDS]
NOW = datetime(2026, 11, 28, tzinfo=UTC)


def _spec(kind: JobKind, **kwargs) -> MPIJobSpec:
    return MPIJobSpec(
        name="pi", namespace="ns", api_version=kind.api_version,
        launcher=ReplicaSpec(image="img", command=["mpirun", "hostname"]),
        worker=ReplicaSpec(image="img", replicas=2), **kwargs,
    )  # fmt: skip


def _launcher(manifest: dict) -> dict:
    return manifest["spec"]["mpiReplicaSpecs"]["Launcher"]


# ------------------------------------------------------------------ registry
@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_each_built_in_kind_is_found_by_its_api_version(kind):
    assert kind_for(kind.api_version) is kind
    assert kind.api_version in api_versions()
    assert split_api_version(kind.api_version) == (kind.group, kind.version)


def test_an_unknown_api_version_has_no_kind_and_is_refused_by_the_model():
    assert kind_for("kubeflow.org/v9") is None
    with pytest.raises(MPIJobValidationError, match="api_version"):
        resolve(MPIJobSpec(name="pi", api_version="kubeflow.org/v9", worker=ReplicaSpec(image="i")))


def test_a_second_kind_for_a_registered_api_version_is_refused():
    impostor = JobKind(group="kubeflow.org", version="v1", kind="MPIJob", plural="mpijobs", controller="x",
                       restart_policies=("Never",), managed_by=(), container_names={})  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        register(impostor)


@pytest.fixture
def plugin_distribution(tmp_path, monkeypatch):
    """A real installed distribution (a dist-info on sys.path) whose entry point names an in-house kind."""
    package = tmp_path / "inhouse_mpi_kind.py"
    package.write_text(
        "from airflow_mpi.jobspec.kinds import JobKind\n"
        "KIND = JobKind(group='batch.example.com', version='v1', kind='MPIJob', plural='mpijobs',\n"
        "               controller='in-house MPI operator', restart_policies=('Never',), managed_by=(),\n"
        "               container_names={'Launcher': 'launcher', 'Worker': 'worker'},\n"
        "               invalid_reasons=('FailedCreate',))\n"
    )
    info = tmp_path / "inhouse_mpi_kind-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: inhouse-mpi-kind\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ninhouse = inhouse_mpi_kind:KIND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    monkeypatch.setattr(registry, "_loaded", False)


def test_a_kind_registered_through_the_entry_point_group_is_found(plugin_distribution):
    kind = kind_for("batch.example.com/v1")
    assert kind is not None and kind.controller == "in-house MPI operator"
    assert split_api_version("batch.example.com/v1") == ("batch.example.com", "v1")
    assert "batch.example.com/v1" in api_versions()
    assert kind.is_invalid_event("FailedCreate")


# ------------------------------------------------------------------ the retries mapping, through resolve()
@pytest.mark.parametrize("kind", KINDS, ids=IDS)
@pytest.mark.parametrize("retries", [0, 1, 3])
def test_the_retries_mapping_is_the_kinds_and_the_manifest_passes_its_rules(kind, retries):
    mapping = kind.retries_mapping(retries)
    resolved = resolve(_spec(kind, defaults=Defaults(retries=retries)))
    assert resolved.manifest["spec"]["runPolicy"]["backoffLimit"] == mapping.backoff_limit
    assert _launcher(resolved.manifest)["restartPolicy"] == mapping.launcher_restart_policy
    assert mapping.launcher_restart_policy in kind.restart_policies


def test_v2beta1_retries_are_pods_of_the_launcher_job():
    """The launcher Job counts failed pods: backoffLimit = retries, a failed pod stays failed (Never)."""
    resolved = resolve(_spec(MPIJOB_V2BETA1, defaults=Defaults(retries=2)))
    assert resolved.manifest["spec"]["runPolicy"]["backoffLimit"] == 2
    assert _launcher(resolved.manifest)["restartPolicy"] == "Never"
    assert MPIJOB_V2BETA1.launcher_attempt == ATTEMPT_IS_POD


@pytest.mark.parametrize("retries", [1, 2, 5])
def test_v1_runs_its_launcher_once_per_job_and_leaves_the_retries_to_airflow(retries):
    """training-operator v1 cannot run a launcher exactly retries + 1 times in one job (a Never launcher that fails
    fails the job; an OnFailure one is stopped when the restart that reaches backoffLimit starts one more
    container): each job runs its launcher once, and the mapping says the task keeps its retries."""
    mapping = MPIJOB_V1.retries_mapping(retries)
    assert not mapping.mapped
    resolved = resolve(_spec(MPIJOB_V1, defaults=Defaults(retries=retries)))
    assert resolved.manifest["spec"]["runPolicy"]["backoffLimit"] == 0
    assert _launcher(resolved.manifest)["restartPolicy"] == "Never"
    assert MPIJOB_V1.attempts_allowed(0, "Never") == 1
    assert MPIJOB_V1.launcher_attempt == ATTEMPT_IS_CONTAINER_RESTART


def test_v2beta1_maps_the_retries_into_the_job():
    assert all(MPIJOB_V2BETA1.retries_mapping(r).mapped for r in (0, 1, 3))


@pytest.mark.parametrize("limit, attempts", [(0, 2), (1, 2), (3, 4)])
def test_a_v1_on_failure_launcher_begins_one_attempt_more_than_its_limit_counts(limit, attempts):
    """The restart that brings the restart count to backoffLimit creates one more container (stopped by the
    controller); a Never launcher runs once whatever the limit."""
    assert MPIJOB_V1.attempts_allowed(limit, "OnFailure") == attempts
    assert MPIJOB_V1.attempts_allowed(limit, "Never") == 1


def test_v1_without_retries_runs_its_launcher_once():
    resolved = resolve(_spec(MPIJOB_V1, defaults=Defaults(retries=0)))
    assert resolved.manifest["spec"]["runPolicy"]["backoffLimit"] == 0
    assert _launcher(resolved.manifest)["restartPolicy"] == "Never"


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_an_explicit_backoff_limit_turns_the_kinds_mapping_off(kind):
    resolved = resolve(_spec(kind, defaults=Defaults(retries=3), run_policy=RunPolicy(backoff_limit=1)))
    assert resolved.manifest["spec"]["runPolicy"]["backoffLimit"] == 1
    assert "restartPolicy" not in _launcher(resolved.manifest)


# ------------------------------------------------------------------ names, fields
@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_derived_names(kind):
    assert kind.launcher_name("pi") == "pi-launcher"
    assert kind.worker_name("pi", 3) == "pi-worker-3"


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_the_main_containers_default_to_the_kinds_names(kind):
    manifest = resolve(_spec(kind)).manifest
    for role in ("Launcher", "Worker"):
        containers = manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"]
        assert containers[0]["name"] == kind.container_names[role]


def test_v1_names_its_main_containers_mpi_and_honours_main_container():
    manifest = resolve(_spec(MPIJOB_V1, main_container="ranks")).manifest
    assert manifest["spec"]["mainContainer"] == "ranks"
    assert MPIJOB_V1.container_names == {"Launcher": "mpi", "Worker": "mpi"}


def test_v1_refuses_v2beta1_only_parameters_naming_them():
    with pytest.raises(MPIJobValidationError, match="launcher_creation_policy.*training-operator"):
        resolve(_spec(MPIJOB_V1, launcher_creation_policy="AtStartup"))


# ------------------------------------------------------------------ pods, events, state
POD_LABELS = {
    MPIJOB_V2BETA1.api_version: {
        "launcher": {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "launcher"},
        "worker": {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "worker"},
    },
    MPIJOB_V1.api_version: {  # training-operator v1.9.4 (pkg/controller.v1/mpi): the launcher's job-role is master
        "launcher": {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/replica-type": "launcher",
                     "training.kubeflow.org/job-role": "master"},
        "worker": {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/replica-type": "worker"},
    },
}  # fmt: skip


def _matches(selector: str, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",")))


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
@pytest.mark.parametrize("role", ["launcher", "worker"])
def test_the_first_selector_of_a_role_selects_its_pods_and_their_labels_tell_the_role(kind, role):
    labels = POD_LABELS[kind.api_version]
    first = pod_selectors(kind.api_version, "pi", role)[0]
    assert [r for r in labels if _matches(first, labels[r])] == [role]
    assert kind.pod_labels.role_of(labels[role]) == role


def test_v1_tries_the_labels_of_training_operator_1_4_second():
    assert pod_selectors(MPIJOB_V1.api_version, "pi", "worker")[1] == "mpi-job-name=pi,mpi-job-role=worker"


def test_a_pod_whose_labels_tell_no_role_is_a_worker():
    assert PodLabels("a", "b").role_of({}) == "worker"


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
@pytest.mark.parametrize("role", ["launcher", "worker"])
def test_the_wait_tells_a_pods_role_by_its_kinds_labels(kind, role):
    pod = SimpleNamespace(metadata=SimpleNamespace(labels=POD_LABELS[kind.api_version][role]))
    assert pod_role(pod) == role


def _uncreated(kind: JobKind) -> dict:
    return {"apiVersion": kind.api_version, "metadata": {"name": "pi"}, "status": {}}


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_the_kinds_invalid_event_fails_the_wait_at_once_with_the_controllers_message(kind):
    (reason,) = kind.invalid_reasons
    event = EventSummary("Warning", reason, "the controller's message", "pi")
    verdict = assess(job_state(_uncreated(kind)), [], [event], now=NOW, submitted_at=NOW, timeouts=Timeouts(),
                     kind=kind)  # fmt: skip
    assert verdict.outcome == Outcome.INVALID
    assert verdict.message == "the controller's message"
    assert watch_selector(EVENTS, kind)["field_selector"].endswith(f"reason={reason}")


def test_v1_invalid_reason_is_the_training_operators():
    assert MPIJOB_V1.invalid_reasons == (
        "MPIJobFailedValidation",
    )  # NewReason(MPIJobKind, "FailedValidation")


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_a_startup_timeout_names_the_kinds_controller(kind):
    verdict = assess(job_state(_uncreated(kind)), [], [], now=NOW + timedelta(seconds=121), submitted_at=NOW,
                     timeouts=Timeouts(startup_timeout=120), kind=kind)  # fmt: skip
    assert verdict.outcome == Outcome.STARTUP_TIMEOUT
    assert f"is the {kind.controller} running" in verdict.message


# ------------------------------------------------------------------ the launcher command, per kind
def _launcher_command(kind: JobKind, implementation: str, **params) -> list[str]:
    from airflow_mpi.jobspec.parameters import resolve_parameters

    values = {"api_version": kind.api_version, "name": "pi", "image": "img", "program": ["/pi"], "workers": 2,
              "slots_per_worker": 2, "mpi_implementation": implementation, **params}  # fmt: skip
    return _launcher(resolve_parameters(values).manifest)["template"]["spec"]["containers"][0]["command"]


@pytest.mark.parametrize("implementation", ["Intel", "MPICH"])
def test_v1_runs_hydra_with_its_hostfile_rewritten_and_the_launchers_address(implementation):
    """training-operator v1 writes an Open MPI hostfile ("host slots=N", refused by Hydra) and makes no Service for
    the launcher's name: Hydra's mpirun gets the hostfile in its own syntax and gives its proxies an address."""
    sh, dash_c, script, mpirun, *rest = _launcher_command(MPIJOB_V1, implementation)
    assert (sh, dash_c, mpirun) == ("sh", "-c", "mpirun")
    assert rest == [
        "-n",
        "4",
        "-ppn",
        "2",
        "/pi",
    ]  # sized as on any kind, the controller's hostfile not named
    assert 'sed "s/ slots=/:/" /etc/mpi/hostfile > "$h"' in script
    wiring = {
        "Intel": '-iface eth0 -hostfile "$h"',
        "MPICH": '-launcher rsh -launcher-exec /etc/mpi/kubexec.sh -f "$h" -localhost "$(hostname -i)"',
    }
    assert script.endswith(f'exec "$0" {wiring[implementation]} "$@"')


def test_v1_runs_open_mpi_as_given_and_v2beta1_every_implementation_as_given():
    assert _launcher_command(MPIJOB_V1, "OpenMPI")[0] == "mpirun"
    for implementation in ("OpenMPI", "Intel", "MPICH"):
        assert MPIJOB_V2BETA1.launcher_command(implementation, ["mpirun", "/pi"]) == ["mpirun", "/pi"]


def test_v1_drops_the_task_decorators_mpich_address_wrapper_for_its_own():
    """@task.mpi's MPICH launch (connect_by_ip) wraps mpirun to give Hydra the launcher's IP; v1's launcher command
    does that itself (``hydra_address_wired``), so the resolved command carries one ``-localhost``, not two."""
    from airflow_mpi.jobspec.commands import Mpirun
    from airflow_mpi.jobspec.parameters import resolve_parameters

    assert MPIJOB_V1.hydra_address_wired
    values = {"api_version": MPIJOB_V1.api_version, "name": "pi", "image": "img", "program": ["/pi"], "workers": 1,
              "mpi_implementation": "MPICH"}  # fmt: skip
    manifest = resolve_parameters(
        values, launch=lambda errors, v: Mpirun(v["program"], connect_by_ip=True)
    ).manifest
    command = _launcher(manifest)["template"]["spec"]["containers"][0]["command"]
    assert command[3:] == ["mpirun", "-n", "1", "-ppn", "1", "/pi"] and command[2].count("-localhost") == 1
