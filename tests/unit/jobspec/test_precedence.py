"""The one precedence rule (parameter > base manifest > default) and the retries mapping, in the model."""

from __future__ import annotations

import copy

import pytest

from airflow_mpi.jobspec import (
    API_V1,
    BASE_MANIFEST,
    DEFAULT,
    PARAMETER,
    Defaults,
    Horovodrun,
    MPIJobSpec,
    MPIJobValidationError,
    Mpirun,
    ReplicaSpec,
    RunPolicy,
    TaskIdentity,
    resolve,
)
from airflow_mpi.jobspec.settings import CONTROLLER_DEFAULT

IDENTITY = TaskIdentity("dag", "task", "manual__1", -1, 1)


def base(**spec) -> dict:
    """A v2beta1 base manifest: pi-like containers plus ``spec`` fields (``launcher``/``worker``: replica fields)."""
    launcher, worker = spec.pop("launcher", {}), spec.pop("worker", {})
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"labels": {"team": "hpc"}},
        "spec": {
            **spec,
            "mpiReplicaSpecs": {
                "Launcher": {
                    "template": {
                        "spec": {"containers": [{"name": "mpi-launcher", "image": "pi", "args": ["old"]}]}
                    },
                    **launcher,
                },
                "Worker": {
                    "template": {"spec": {"containers": [{"name": "mpi-worker", "image": "pi"}]}},
                    **worker,
                },
            },
        },
    }


def resolved(base_manifest=None, *, retries=2, **kwargs):
    kwargs.setdefault("name", "job")
    if base_manifest is None:
        kwargs.setdefault("launcher", ReplicaSpec(image="i"))
        kwargs.setdefault("worker", ReplicaSpec(image="i"))
    return resolve(MPIJobSpec(base_manifest=base_manifest, defaults=Defaults(retries=retries), **kwargs))


def sources(result) -> dict[str, tuple]:
    return {k: (s.value, s.source) for k, s in result.settings.items()}


def replica(manifest, role):
    return manifest["spec"]["mpiReplicaSpecs"][role]


@pytest.mark.parametrize(
    "base_manifest, worker, expected",
    [
        (None, ReplicaSpec(image="i"), (1, DEFAULT)),
        (base(worker={"replicas": 4}), ReplicaSpec(), (4, BASE_MANIFEST)),
        (base(worker={"replicas": 4}), ReplicaSpec(replicas=3), (3, PARAMETER)),
    ],
)
def test_worker_count_parameter_over_base_over_default(base_manifest, worker, expected):
    result = resolved(base_manifest, worker=worker)
    assert replica(result.manifest, "Worker")["replicas"] == expected[0]
    assert sources(result)["workers"] == expected


def test_retries_mapping_fills_backoff_limit_and_launcher_restart_policy_where_nothing_sets_them():
    result = resolved(retries=3)
    assert result.manifest["spec"]["runPolicy"]["backoffLimit"] == 3
    assert replica(result.manifest, "Launcher")["restartPolicy"] == "Never"
    assert sources(result)["backoff_limit"] == (3, DEFAULT)
    assert sources(result)["launcher.restart_policy"] == ("Never", DEFAULT)


def test_retries_mapping_never_replaces_what_the_base_manifest_sets():
    manifest = base(runPolicy={"backoffLimit": 6}, launcher={"restartPolicy": "OnFailure"})
    result = resolved(manifest, retries=3)
    assert result.manifest["spec"]["runPolicy"]["backoffLimit"] == 6
    assert replica(result.manifest, "Launcher")["restartPolicy"] == "OnFailure"
    assert sources(result)["backoff_limit"] == (6, BASE_MANIFEST)
    assert sources(result)["launcher.restart_policy"] == ("OnFailure", BASE_MANIFEST)


def test_each_half_of_the_retries_mapping_applies_on_its_own():
    result = resolved(base(runPolicy={"backoffLimit": 6}), retries=3)
    assert sources(result)["backoff_limit"] == (6, BASE_MANIFEST)
    assert sources(result)["launcher.restart_policy"] == ("Never", DEFAULT)


def test_an_explicit_backoff_limit_turns_the_retries_mapping_off():
    result = resolved(retries=3, run_policy=RunPolicy(backoff_limit=1))
    assert sources(result)["backoff_limit"] == (1, PARAMETER)
    assert "launcher.restart_policy" not in result.settings
    assert "restartPolicy" not in replica(result.manifest, "Launcher")


def test_controller_defaults_are_reported_but_not_written():
    result = resolved()
    assert (
        "slotsPerWorker" not in result.manifest["spec"] and "mpiImplementation" not in result.manifest["spec"]
    )
    assert sources(result)["slots_per_worker"] == (1, CONTROLLER_DEFAULT)
    assert sources(result)["mpi_implementation"] == ("OpenMPI", CONTROLLER_DEFAULT)
    assert sources(resolved(base(mpiImplementation="Intel")))["mpi_implementation"] == (
        "Intel",
        BASE_MANIFEST,
    )


@pytest.mark.parametrize(
    "run_policy, top_level, expected_top, expected_run_policy",
    [
        (None, None, "Running", None),  # the default goes where v1 reads it
        ({"cleanPodPolicy": "All"}, None, None, "All"),  # the base's copy in runPolicy counts as set
        (None, "None", "None", None),
    ],
)
def test_v1_clean_pod_policy_default_respects_both_places_of_the_base(
    run_policy, top_level, expected_top, expected_run_policy
):
    manifest = {"apiVersion": API_V1, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}}
    if run_policy:
        manifest["spec"]["runPolicy"] = run_policy
    if top_level:
        manifest["spec"]["cleanPodPolicy"] = top_level
    result = resolved(
        manifest, api_version=API_V1, launcher=ReplicaSpec(image="i"), worker=ReplicaSpec(image="i")
    )
    assert result.manifest["spec"].get("cleanPodPolicy") == expected_top
    assert result.manifest["spec"].get("runPolicy", {}).get("cleanPodPolicy") == expected_run_policy


def test_name_parameter_over_base_over_identity_and_identity_labels_added():
    with_base = copy.deepcopy(base())
    with_base["metadata"]["name"] = "from-base"
    suffixed = resolved(with_base, name=None, identity=IDENTITY)
    assert suffixed.manifest["metadata"]["name"] == IDENTITY.job_name(prefix="from-base")
    assert suffixed.manifest["metadata"]["name"].startswith("from-base-")
    assert sources(suffixed)["name"][1] == "base manifest, suffixed per task instance"
    exact = resolved(with_base, name=None, identity=IDENTITY, unique_name_suffix=False)
    assert exact.manifest["metadata"]["name"] == "from-base" and sources(exact)["name"][1] == BASE_MANIFEST
    given = resolved(with_base, name="given", identity=IDENTITY)
    assert given.manifest["metadata"]["name"] == IDENTITY.job_name(prefix="given")
    derived = resolved(base(worker={"replicas": 100}), name=None, identity=IDENTITY)
    assert derived.manifest["metadata"]["name"] == IDENTITY.job_name(
        max_workers=100
    )  # sized for the base's workers
    assert sources(derived)["name"][1] == DEFAULT
    labels = derived.manifest["metadata"]["labels"]
    assert labels == {"team": "hpc", **IDENTITY.labels()}
    assert derived.manifest["metadata"]["annotations"] == IDENTITY.annotations()


def test_namespace_parameter_over_base_over_connection_default():
    spec = dict(defaults=Defaults(namespace="from-connection"), name="job")
    with_base = base()
    with_base["metadata"]["namespace"] = "from-base"
    assert (
        resolve(MPIJobSpec(base_manifest=with_base, **spec)).manifest["metadata"]["namespace"] == "from-base"
    )
    given = resolve(MPIJobSpec(base_manifest=with_base, namespace="given", **spec))
    assert given.manifest["metadata"]["namespace"] == "given"
    fallback = resolve(MPIJobSpec(base_manifest=base(), **spec))
    assert fallback.manifest["metadata"]["namespace"] == "from-connection"


def test_a_container_name_the_base_manifest_lacks_is_refused_not_added():
    with pytest.raises(MPIJobValidationError) as info:
        resolved(base(), launcher=ReplicaSpec(container_name="mpi", image="x"))
    assert (info.value.field, info.value.value) == ("launcher.container_name", "mpi")
    assert "mpi-launcher" in info.value.reason
    named = resolved(base(), launcher=ReplicaSpec(container_name="mpi-launcher", image="x"))
    assert [c["name"] for c in replica(named.manifest, "Launcher")["template"]["spec"]["containers"]] == [
        "mpi-launcher"
    ]


def launcher_container(result) -> dict:
    return replica(result.manifest, "Launcher")["template"]["spec"]["containers"][0]


def test_program_is_sized_from_the_base_manifest_and_replaces_its_command_line():
    manifest = base(slotsPerWorker=2, mpiImplementation="Intel", worker={"replicas": 3})
    result = resolved(manifest, launch=Mpirun(["/home/mpiuser/pi"], "-v"))
    container = launcher_container(result)
    # Intel (and MPICH): in args, as upstream's examples, so the image's entrypoint (waiting for DNS) runs it
    assert container["args"] == [
        "mpirun", "-hostfile", "/etc/mpi/hostfile", "-n", "6", "-ppn", "2", "-v", "/home/mpiuser/pi"
    ]  # fmt: skip
    assert "command" not in container
    with_command = base(slotsPerWorker=2, mpiImplementation="MPICH", worker={"replicas": 3})
    with_command["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"] = [
        "sh"
    ]
    mpich = launcher_container(
        resolved(with_command, launch=Mpirun(["pi"]), launcher=ReplicaSpec(args=["--fast"]))
    )
    assert "command" not in mpich  # the base's command belonged to its own command line
    assert mpich["args"] == ["mpirun", "-n", "6", "-ppn", "2", "pi", "--fast"]
    openmpi = launcher_container(resolved(base(worker={"replicas": 3}), launch=Mpirun(["pi"])))
    assert (
        openmpi["command"][0] == "mpirun" and "args" not in openmpi
    )  # the base's args belonged to its command
    kept = resolved(
        base(worker={"replicas": 1}), launch=Mpirun(["pi"]), launcher=ReplicaSpec(args=["--fast"])
    )
    assert launcher_container(kept)["args"] == ["--fast"]


def test_horovodrun_np_follows_the_resolved_job():
    result = resolved(base(slotsPerWorker=4, worker={"replicas": 2}), launch=Horovodrun(["python", "t.py"]))
    command = launcher_container(result)["command"]
    assert command[:3] == ["horovodrun", "-np", "8"]


def test_v1_mpi_implementation_only_picks_the_flags_of_program():
    v1 = {"apiVersion": API_V1, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}}
    common = dict(api_version=API_V1, launcher=ReplicaSpec(image="i"), worker=ReplicaSpec(image="i"))
    result = resolved(v1, mpi_implementation="Intel", launch=Mpirun(["pi"]), **common)
    command = launcher_container(result)["command"]  # Intel's mpirun, wired as v1 needs (test_kinds.py)
    assert command[3:] == ["mpirun", "-n", "2", "-ppn", "1", "pi"] and "-iface eth0" in command[2]
    assert "mpiImplementation" not in result.manifest["spec"]
    with pytest.raises(MPIJobValidationError, match="without program"):
        resolved(v1, mpi_implementation="Intel", **common)


def test_program_and_a_launcher_command_are_refused_together():
    with pytest.raises(MPIJobValidationError) as info:
        resolved(launch=Mpirun(["pi"]), launcher=ReplicaSpec(image="i", command=["sh"]))
    assert info.value.field == "command"


def test_resolve_leaves_the_spec_and_the_base_manifest_as_they_were():
    manifest = base(worker={"replicas": 4})
    spec = MPIJobSpec(name=None, base_manifest=manifest, identity=IDENTITY, defaults=Defaults(retries=1))
    before_spec, before_base = copy.deepcopy(spec), copy.deepcopy(manifest)
    resolve(spec)
    assert spec == before_spec and manifest == before_base
