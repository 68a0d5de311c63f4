"""localcluster's JobSet and Kubeflow Trainer add-ons, read from their pinned modules (``go mod download``, no build),
and deploy/trainjob-mpi-runtime.yaml against the Trainer's own CRD.

What the cluster installs is what upstream's kustomize would (the webhook manifests with their patches, the names
the managers expect), pointed at the local processes; the runtime is one the API server takes as written.
"""

from __future__ import annotations

import base64
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from localcluster import build, controllers, node_container, webhook_manifests
from localcluster.build_recipes import ADDONS
from localcluster.cluster import LocalCluster
from localcluster.controllers.webhook_manager import load_crds
from tests.unit.upstream import crd_validator, validation_errors

RUNTIME = Path(__file__).resolve().parents[2] / "deploy" / "trainjob-mpi-runtime.yaml"
URL = "https://127.0.0.1:12345"


@cache
def _data(addon: str, dest: str) -> Path:
    """Where add-on ``addon``'s data file ``dest`` comes from in its module (what a build copies)."""
    moddir, module_path, rel = dict(ADDONS[addon].data)[dest]
    return build.module_dir(moddir, module_path) / rel


def test_choosing_trainer_chooses_jobset_before_it_and_mounts_both_builds_into_a_node():
    assert LocalCluster("a", run_operator=False, controllers=["trainer"]).controllers == ("jobset", "trainer")
    assert LocalCluster("a", "v1", controllers=["trainer", "jobset"]).controllers == ("jobset", "trainer")
    assert controllers.addons(["trainer"]) == ("jobset", "trainer")
    assert node_container.NodeCluster("x", controllers=("trainer",)).addons == ("jobset", "trainer")


def test_json_patch_adds_replaces_and_removes_by_pointer():
    doc = {"a": [{"b": 1}, {"b": 2}], "c/d": {}}
    webhook_manifests.json_patch(
        doc,
        [
            {"op": "replace", "path": "/a/1", "value": {"b": 3}},
            {"op": "add", "path": "/a/0/e", "value": [1]},
            {"op": "add", "path": "/c~1d/f", "value": "g"},
            {"op": "add", "path": "/a/-", "value": 4},
            {"op": "remove", "path": "/a/0/b"},
        ],
    )
    assert doc == {"a": [{"e": [1]}, {"b": 3}, 4], "c/d": {"f": "g"}}
    with pytest.raises(KeyError):
        webhook_manifests.json_patch(doc, [{"op": "replace", "path": "/nope", "value": 1}])


def _served(addon: str, prefix: str = "") -> dict[str, dict]:
    docs = webhook_manifests.kustomized(_data(addon, "webhook"), prefix)
    served = webhook_manifests.served_at(docs, URL, b"CA")
    for doc in served:
        for hook in doc["webhooks"]:
            assert set(hook["clientConfig"]) == {"url", "caBundle"}
            assert re.fullmatch(re.escape(URL) + r"/[a-z0-9-]+", hook["clientConfig"]["url"])
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"CA"
    return {d["metadata"]["name"]: d for d in served}


def test_jobset_webhooks_are_its_kustomize_build_with_its_pod_webhooks_for_jobset_pods_only():
    served = _served("jobset", "jobset-")
    assert sorted(served) == [
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ]
    hooks = [h for d in served.values() for h in d["webhooks"]]
    pod_hooks = [h for h in hooks if h["rules"][0]["resources"] == ["pods"]]
    assert sorted(h["name"] for h in pod_hooks) == ["mpod.kb.io", "vpod.kb.io"]
    selector = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    assert all(h["objectSelector"] == selector for h in pod_hooks)  # not every pod of the cluster
    assert {h["name"] for h in hooks} - {"mpod.kb.io", "vpod.kb.io"} == {"mjobset.kb.io", "vjobset.kb.io"}


def test_trainer_webhooks_carry_the_names_its_main_expects():
    served = _served("trainer")
    main = (_data("trainer", "crd").parents[2] / "cmd" / "trainer-controller-manager" / "main.go").read_text()
    expected = re.findall(r'WebhookConfigurationName\s+= "([^"]+)"', main)
    assert (
        sorted(served)
        == sorted(expected)
        == ["defaulter.trainer.kubeflow.org", "validator.trainer.kubeflow.org"]
    )
    resources = {h["rules"][0]["resources"][0] for d in served.values() for h in d["webhooks"]}
    assert resources == {"trainjobs", "trainingruntimes", "clustertrainingruntimes"}


def test_the_crds_installed_are_the_modules():
    names = {c["metadata"]["name"] for c in load_crds(_data("jobset", "crd"))}
    assert names == {"jobsets.jobset.x-k8s.io"}
    names = {c["metadata"]["name"] for c in load_crds(_data("trainer", "crd"))}
    assert names == {
        f"{p}.trainer.kubeflow.org" for p in ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
    }


def _runtime_validator():
    crds = {c["metadata"]["name"]: c for c in load_crds(_data("trainer", "crd"))}
    return crd_validator(crds["clustertrainingruntimes.trainer.kubeflow.org"], "v1alpha1")


def test_the_mpi_runtime_is_valid_against_the_trainer_crd_and_follows_the_mpiuser_convention():
    runtime = yaml.safe_load(RUNTIME.read_text())
    assert validation_errors(_runtime_validator(), runtime) == []
    mpi = runtime["spec"]["mlPolicy"]["mpi"]
    assert mpi == {
        "numProcPerNode": 1,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/home/mpiuser/.ssh",
        "runLauncherAsNode": False,
    }
    jobs = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    assert set(jobs) == {"launcher", "node"}
    # v2.3.0 sizes the trainer-ancestor job (the launcher) from mlPolicy.numNodes: one launcher pod; two node pods
    # unless the TrainJob says (trainer.numNodes)
    assert runtime["spec"]["mlPolicy"]["numNodes"] == 1
    assert jobs["launcher"]["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    assert jobs["node"]["template"]["spec"]["parallelism"] == 2
    for job in jobs.values():
        pod = job["template"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == "node" and container["securityContext"]["runAsUser"] == 1000
        assert pod["securityContext"]["fsGroup"] == 1000
    node = jobs["node"]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert node["args"] == ["-De", "-f", "/home/mpiuser/.sshd_config"]
    assert node["readinessProbe"]["tcpSocket"]["port"] == 2222
    assert jobs["launcher"]["dependsOn"] == [{"name": "node", "status": "Ready"}]


def test_the_trainer_crd_refuses_every_mpi_implementation_but_open_mpi():
    runtime = yaml.safe_load(RUNTIME.read_text())
    runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "Intel"
    (error,) = validation_errors(_runtime_validator(), runtime)
    assert error.startswith("spec.mlPolicy.mpi.mpiImplementation: 'Intel' is not one of ['OpenMPI', '']")


def test_kueue_gains_the_trainjob_integration_and_its_webhooks_only_beside_trainer(tmp_path):
    from localcluster import kueue as lk

    (tmp_path / "webhook-manifests.yaml").write_text(_data("kueue", "webhook-manifests.yaml").read_text())

    def kept(controllers: tuple[str, ...]) -> set[tuple[str, str]]:
        docs = lk.webhook_configurations(tmp_path, URL, b"ca", lk.webhook_resources(controllers))
        return {
            (d["kind"], r)
            for d in docs
            for h in d["webhooks"]
            for rule in h["rules"]
            for r in rule["resources"]
        }

    mpijob_only, with_trainer = (
        kept(("mpi-operator", "kueue")),
        kept(("mpi-operator", "kueue", "jobset", "trainer")),
    )
    assert lk.frameworks(("mpi-operator", "kueue")) == ("kubeflow.org/mpijob",)
    assert lk.frameworks(("kueue", "jobset", "trainer")) == (
        "kubeflow.org/mpijob",
        "trainer.kubeflow.org/trainjob",
    )
    assert with_trainer - mpijob_only == {
        ("MutatingWebhookConfiguration", "trainjobs"),
        ("ValidatingWebhookConfiguration", "trainjobs"),
    }
    assert ("MutatingWebhookConfiguration", "mpijobs") in mpijob_only and not {r for _, r in mpijob_only} & {
        "pods", "jobs", "jobsets", "trainjobs"
    }  # fmt: skip
    config = lk.configuration(
        webhook_port=1, health_port=2, cert_dir=tmp_path, integrations=lk.frameworks(["trainer"])
    )
    assert config["integrations"]["frameworks"] == ["kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob"]
