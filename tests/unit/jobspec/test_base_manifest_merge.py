"""deep_merge, load_base_manifest, and how parameters take precedence over a base manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_mpi.jobspec import (
    API_V1,
    MPIJobSpec,
    MPIJobValidationError,
    ReplicaSpec,
    RunPolicy,
    build_manifest,
    deep_merge,
    load_base_manifest,
)

BASE = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "from-base", "namespace": "base-ns", "labels": {"team": "a", "tier": "gold"}},
    "spec": {
        "slotsPerWorker": 1,
        "runPolicy": {"cleanPodPolicy": "All", "backoffLimit": 6},
        "mpiReplicaSpecs": {
            "Launcher": {
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [{"name": "main", "image": "base/launcher:1"}]}},
            },
            "Worker": {
                "replicas": 3,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "base/worker:1",
                                "env": [
                                    {
                                        "name": "TOKEN",
                                        "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
                                    },
                                    {"name": "KEEP", "value": "base"},
                                ],
                                "resources": {"limits": {"memory": "4Gi", "cpu": "2"}},
                                "volumeMounts": [
                                    {"name": "data", "mountPath": "/data", "subPath": "x", "readOnly": True}
                                ],
                            },
                            {"name": "sidecar", "image": "base/sidecar:1"},
                        ],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}],
                        "tolerations": [{"key": "a", "operator": "Exists"}],
                        "imagePullSecrets": [{"name": "base-secret"}],
                    }
                },
            },
        },
    },
}


def worker_pod(manifest: dict) -> dict:
    return manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]


def spec(**kwargs) -> MPIJobSpec:
    kwargs.setdefault("base_manifest", BASE)
    kwargs.setdefault("name", None)
    return MPIJobSpec(**kwargs)


# ---------------------------------------------------------------- deep_merge


def test_deep_merge_dicts_recursively_and_override_wins():
    assert deep_merge({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3, "z": 4}, "c": 5}) == {
        "a": {"x": 1, "y": 3, "z": 4},
        "b": 1,
        "c": 5,
    }


def test_deep_merge_none_does_not_override():
    assert deep_merge({"a": 1, "b": {"c": 2}}, {"a": None, "b": {"c": None}}) == {"a": 1, "b": {"c": 2}}
    assert deep_merge({"a": 1}, None) == {"a": 1}
    assert deep_merge({}, {"a": None, "b": {"c": None}}) == {"b": {}}


def test_deep_merge_named_lists_merge_by_name_keeping_base_order():
    base = [{"name": "a", "x": 1, "y": 1}, {"name": "b", "x": 1}]
    override = [{"name": "c", "x": 3}, {"name": "a", "y": 2}]
    assert deep_merge(base, override) == [
        {"name": "a", "x": 1, "y": 2},
        {"name": "b", "x": 1},
        {"name": "c", "x": 3},
    ]


@pytest.mark.parametrize(
    "base, override",
    [
        ([1, 2, 3], [4]),  # scalars
        ([{"key": "a"}], [{"key": "b"}]),  # dicts without names (e.g. tolerations)
        ([{"name": "a"}], []),  # an explicit empty list clears
        ([{"name": "a"}], [{"name": "b"}, "x"]),  # mixed
    ],
)
def test_deep_merge_other_lists_are_replaced(base, override):
    assert deep_merge(base, override) == override


def test_deep_merge_keeps_duplicate_names_so_validation_can_report_them():
    base = [{"name": "a", "x": 1}, {"name": "a", "x": 2}]
    assert deep_merge(base, [{"name": "a", "y": 3}]) == [{"name": "a", "x": 1, "y": 3}, {"name": "a", "x": 2}]
    assert deep_merge([{"name": "a"}], [{"name": "a", "x": 1}, {"name": "a", "x": 2}]) == [
        {"name": "a", "x": 1},
        {"name": "a", "x": 2},
    ]


def test_deep_merge_does_not_modify_its_inputs():
    base = {"l": [{"name": "a", "v": {"x": 1}}], "d": {"k": [1]}}
    override = {"l": [{"name": "a", "v": {"y": 2}}], "d": {"k": [2]}}
    base_copy, override_copy = json.loads(json.dumps(base)), json.loads(json.dumps(override))
    merged = deep_merge(base, override)
    merged["l"][0]["v"]["z"] = 3
    merged["d"]["k"].append(9)
    assert base == base_copy and override == override_copy


# ---------------------------------------------------------------- parameters over a base manifest


def test_base_supplies_what_parameters_leave_none():
    manifest = build_manifest(spec())
    assert manifest["metadata"]["name"] == "from-base"
    assert manifest["metadata"]["namespace"] == "base-ns"
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert manifest["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 6}
    assert manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] == 1  # filled in: the only valid value


def test_parameters_win_over_the_base():
    manifest = build_manifest(
        spec(
            name="from-param",
            namespace="param-ns",
            labels={"team": "b"},
            worker=ReplicaSpec(replicas=5, image="param/worker:2"),
            launcher=ReplicaSpec(restart_policy="Never"),
            run_policy=RunPolicy(backoff_limit=0),
        )
    )
    assert manifest["metadata"] == {
        "name": "from-param",
        "namespace": "param-ns",
        "labels": {"team": "b", "tier": "gold"},
    }
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 5
    assert manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"
    assert manifest["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 0}
    main = worker_pod(manifest)["containers"][0]
    assert main["name"] == "main" and main["image"] == "param/worker:2"


def test_parameters_merge_into_the_base_main_container_and_keep_sidecars():
    manifest = build_manifest(spec(worker=ReplicaSpec(resources={"limits": {"cpu": "4"}}, gpus=1)))
    containers = worker_pod(manifest)["containers"]
    assert [c["name"] for c in containers] == ["main", "sidecar"]
    assert containers[0]["resources"] == {"limits": {"memory": "4Gi", "cpu": "4", "nvidia.com/gpu": 1}}
    assert containers[1] == {"name": "sidecar", "image": "base/sidecar:1"}


def test_container_name_selects_the_main_container_and_moves_it_first():
    manifest = build_manifest(spec(worker=ReplicaSpec(container_name="sidecar", command=["sshd"])))
    containers = worker_pod(manifest)["containers"]
    assert [c["name"] for c in containers] == ["sidecar", "main"]
    assert containers[0]["command"] == ["sshd"]


def test_env_given_as_parameter_replaces_the_base_entry_of_that_name_in_place():
    manifest = build_manifest(spec(worker=ReplicaSpec(env={"TOKEN": "plain", "NEW": "1"})))
    assert worker_pod(manifest)["containers"][0]["env"] == [
        {"name": "TOKEN", "value": "plain"},  # no valueFrom left over from the base
        {"name": "KEEP", "value": "base"},
        {"name": "NEW", "value": "1"},
    ]


def test_volumes_and_mounts_given_as_parameters_replace_base_items_of_that_name():
    manifest = build_manifest(
        spec(
            worker=ReplicaSpec(
                volumes=[{"name": "data", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}],
                volume_mounts=[{"name": "data", "mountPath": "/scratch"}],
            )
        )
    )
    pod = worker_pod(manifest)
    assert pod["volumes"] == [{"name": "data", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/scratch"}]


def test_unnamed_lists_are_replaced_and_named_ones_unioned():
    manifest = build_manifest(
        spec(
            worker=ReplicaSpec(
                tolerations=[{"key": "b", "operator": "Exists"}], image_pull_secrets=["param-secret"]
            )
        )
    )
    pod = worker_pod(manifest)
    assert pod["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "base-secret"}, {"name": "param-secret"}]


def test_the_base_manifest_is_not_modified():
    before = json.dumps(BASE, sort_keys=True)
    build_manifest(
        spec(name="x", worker=ReplicaSpec(env={"TOKEN": "v"}, volumes=[{"name": "data", "emptyDir": {}}]))
    )
    assert json.dumps(BASE, sort_keys=True) == before


def test_merged_result_is_validated_too():
    bad_base = json.loads(json.dumps(BASE))
    bad_base["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][1]["image"] = ""
    with pytest.raises(MPIJobValidationError) as info:
        build_manifest(spec(base_manifest=bad_base))
    assert info.value.field == "worker.containers[sidecar].image"


def test_v1_clean_pod_policy_parameter_also_overrides_the_base_run_policy_copy():
    base = {
        "apiVersion": API_V1,
        "spec": {
            "runPolicy": {"cleanPodPolicy": "All"},
            "mpiReplicaSpecs": {"Worker": {"replicas": 1}},
        },
    }
    manifest = build_manifest(
        MPIJobSpec(
            name="v1job",
            api_version=API_V1,
            base_manifest=base,
            run_policy=RunPolicy(clean_pod_policy="Running"),
            launcher=ReplicaSpec(image="i"),
            worker=ReplicaSpec(image="i"),
        )
    )
    assert manifest["spec"]["cleanPodPolicy"] == "Running"
    assert manifest["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


# ---------------------------------------------------------------- load_base_manifest

BASE_YAML = yaml.safe_dump(BASE, sort_keys=False)


def test_load_from_dict_is_a_copy():
    loaded = load_base_manifest(BASE)
    assert loaded == BASE
    loaded["metadata"]["name"] = "changed"
    assert BASE["metadata"]["name"] == "from-base"


@pytest.mark.parametrize(
    "text", [BASE_YAML, json.dumps(BASE), json.dumps(BASE, indent=2), "---\n" + BASE_YAML]
)
def test_load_from_yaml_or_json_text(text):
    assert load_base_manifest(text) == BASE


@pytest.mark.parametrize(
    "suffix, text", [(".yaml", BASE_YAML), (".yml", BASE_YAML), (".json", json.dumps(BASE))]
)
def test_load_from_file_path_as_str_or_path(tmp_path, suffix, text):
    path = tmp_path / f"base{suffix}"
    path.write_text(text)
    assert load_base_manifest(str(path)) == BASE
    assert load_base_manifest(path) == BASE


@pytest.mark.parametrize("as_text", [True, False])
def test_spec_accepts_the_base_manifest_as_text_or_path(tmp_path, as_text):
    path = tmp_path / "base.yaml"
    path.write_text(BASE_YAML)
    manifest = build_manifest(spec(base_manifest=BASE_YAML if as_text else str(path)))
    assert manifest["metadata"]["name"] == "from-base"
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3


@pytest.mark.parametrize(
    "src, reason",
    [
        ("/nonexistent/base.yaml", "cannot read file"),
        (Path("/nonexistent/base.json"), "cannot read file"),
        ("spec: [unclosed", "is not valid YAML"),
        ('{"spec": ', "is not valid JSON"),
        ("a: 1\n---\nb: 2\n", "holds 2 YAML documents"),
        ("- a\n- b\n", "must be a mapping"),
        ("", "must be a mapping"),
        (42, "must be a dict, YAML/JSON text or a file path"),
    ],
)
def test_load_errors_name_the_base_manifest(src, reason):
    with pytest.raises(MPIJobValidationError) as info:
        load_base_manifest(src)
    assert info.value.field == "base_manifest"
    assert reason in info.value.reason
    assert str(info.value).startswith("base_manifest=")


def test_file_with_invalid_content_reports_the_path(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("metadata: {name: [\n")
    with pytest.raises(MPIJobValidationError) as info:
        load_base_manifest(path)
    assert info.value.value == str(path)
