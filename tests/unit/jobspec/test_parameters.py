"""Operator parameters -> MPIJobSpec: nothing coerced or ignored silently, errors under the user's names."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec import Defaults, MPIJobValidationError
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.parameters import as_int, resolve_parameters, spec_from_parameters

BASE = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "spec": {
        "mpiReplicaSpecs": {
            "Launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "i"}]}}},
            "Worker": {"replicas": 0, "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}}},
        }
    },
}


@pytest.mark.parametrize(
    "value, expected", [(3, 3), ("3", 3), (" 12 ", 12), ("-1", -1), (None, None), (0, 0)]
)
def test_as_int_takes_ints_and_rendered_digit_strings(value, expected):
    errors = ErrorList()
    assert as_int(errors, "workers", value) == expected
    assert not len(errors)


@pytest.mark.parametrize("value", [2.0, 2.5, True, False, "2.5", "two", "", [2], {"n": 2}])
def test_as_int_refuses_everything_else_naming_the_parameter(value):
    errors = ErrorList()
    assert as_int(errors, "workers", value) is None
    assert [(e.field, e.value) for e in errors.items] == [("workers", value)]
    assert "must be an integer" in errors.items[0].reason


def errors_of(**values) -> list[tuple[str, object]]:
    values.setdefault("name", "job")
    values.setdefault("image", "img")
    with pytest.raises(MPIJobValidationError) as info:
        resolve_parameters(values, defaults=Defaults())
    return [(e.field, e.value) for e in info.value.errors]


@pytest.mark.parametrize(
    "values, expected",
    [
        ({"workers": 0}, ("workers", 0)),
        ({"workers": "0"}, ("workers", 0)),  # rendered, then range-checked
        ({"slots_per_worker": "1.5"}, ("slots_per_worker", "1.5")),
        ({"gpus_per_worker": -1}, ("gpus_per_worker", -1)),
        ({"worker_resources": {"limits": {"memory": "2 GB"}}}, ("worker_resources.limits.memory", "2 GB")),
        ({"launcher_resources": {"limits": {"cpu": 0.5}}}, ("launcher_resources.limits.cpu", 0.5)),
        ({"backoff_limit": -2}, ("backoff_limit", -2)),
        ({"clean_pod_policy": "Always"}, ("clean_pod_policy", "Always")),
        ({"scheduling_policy": {"queue": ""}}, ("scheduling_policy.queue", "")),
        ({"scheduling_policy": {"minAvailable": 1.5}}, ("scheduling_policy.minAvailable", 1.5)),
        ({"scheduling_policy": ["q"]}, ("scheduling_policy", ["q"])),
        ({"node_selector": {"bad key!": "x"}}, ("node_selector", "bad key!")),
        ({"command": "sh -c 'unclosed"}, ("command", "sh -c 'unclosed")),
        ({"program": ["pi"], "command": ["sh"]}, ("command", ["sh"])),
        ({"program": ["pi"], "mpirun_args": 5}, ("mpirun_args", 5)),
        ({"mpirun_args": ["-v"]}, ("mpirun_args", ["-v"])),
        ({"program": []}, ("program", [])),
        ({"worker": {"replicas": 2}, "workers": 3}, ("worker.replicas", 2)),
        (
            {"launcher": {"resources": {}}, "launcher_resources": {"limits": {"cpu": "1"}}},
            ("launcher.resources", {}),
        ),
        ({"worker": {"gpus": "x"}}, ("worker.gpus", "x")),
        ({"worker": ["image"]}, ("worker", ["image"])),
        ({"launcher": {"colour": "red"}}, ("launcher.colour", "red")),
        ({"api_version": "kubeflow.org/v1", "mpi_implementation": "Intel"}, ("mpi_implementation", "Intel")),
        (
            {"api_version": "kubeflow.org/v1", "run_launcher_as_worker": True},
            ("run_launcher_as_worker", True),
        ),
        ({"main_container": "mpi"}, ("main_container", "mpi")),
        (
            {"base_manifest": BASE, "worker": {"container_name": "missing"}},
            ("worker.container_name", "missing"),
        ),
    ],
)
def test_each_bad_parameter_is_refused_under_its_own_name(values, expected):
    assert expected in errors_of(**values)


def test_a_problem_of_the_base_manifest_keeps_the_manifest_path():
    assert errors_of(base_manifest=BASE, image=None) == [("worker.replicas", 0)]  # not the workers parameter
    assert ("workers", 0) in errors_of(base_manifest=BASE, image=None, workers=0)


def test_a_shared_parameter_is_reported_once():
    assert errors_of(image="") == [("image", "")]


def test_shell_strings_are_split_as_a_shell_would():
    launcher = resolve_parameters(
        {
            "name": "job",
            "image": "i",
            "program": "python 'my script.py'",
            "mpirun_args": "-x NCCL_DEBUG=INFO",
        },
        defaults=Defaults(),
    ).manifest["spec"]["mpiReplicaSpecs"]["Launcher"]
    command = launcher["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == ["-x", "NCCL_DEBUG=INFO", "python", "my script.py"]


def test_role_dicts_override_shared_parameters_for_their_role():
    spec, given = spec_from_parameters(
        {"image": "both", "env": {"A": "1"}, "worker": {"image": "worker-only", "labels": {"r": "w"}}}
    )
    assert (spec.launcher.image, spec.worker.image) == ("both", "worker-only")
    assert spec.worker.env == {"A": "1"} and spec.worker.labels == {"r": "w"}
    assert given["image"] == "both"


def test_scheduling_policy_takes_both_key_styles():
    spec, _ = spec_from_parameters(
        {"scheduling_policy": {"minAvailable": "2", "schedule_timeout_seconds": 30}}
    )
    policy = spec.run_policy.scheduling_policy
    assert (policy.min_available, policy.schedule_timeout_seconds) == (2, 30)
