"""Kueue in the local cluster: its configuration, webhook certificates, CRDs, webhooks and queues.

The controller is the real ``sigs.k8s.io/kueue/cmd/kueue`` (v0.17.0, ``localcluster.build_recipes.KUEUE``), run by
:class:`localcluster.controllers.kueue.Kueue` as a local process with the admin kubeconfig (no RBAC),
like the mpi-operator. What a Deployment would give it, done here instead:

* its webhook server listens on ``127.0.0.1:<free port>`` with a serving certificate for ``IP:127.0.0.1`` signed
  by a CA made for this cluster (``localcluster.webhook_certs``: openssl, EC P-256); internal cert management is off;
* the webhook configurations of the module (``config/components/webhook/manifests.yaml``) are installed with
  ``clientConfig.url: https://127.0.0.1:<port>/<path>`` and that CA as ``caBundle``, keeping only the webhooks of
  Kueue's own objects and of MPIJobs (the others, Pods, Jobs, Deployments..., belong to integrations not enabled
  here and would add a webhook call to every pod of the cluster); the CRDs (``config/components/crd/bases``) get
  the conversion webhook its kustomization patches in (v1beta1 <-> v1beta2);
* a cluster that also runs Kubeflow Trainer (controller ``trainer``) gets Kueue's TrainJob integration too
  (``frameworks``: ``trainer.kubeflow.org/trainjob``, and the webhooks of ``trainjobs``); one that does not keeps
  the MPIJob integration alone. The integration needs no other framework: Kueue builds a TrainJob's PodSets from its
  runtime itself (the JobSet the Trainer would make), suspends it by ``spec.suspend`` and, on admission, writes the
  flavor's node selector into a ``runtimePatches`` entry of its own (manager ``kueue.x-k8s.io/manager``, added by
  its mutating webhook);
* v0.17.0 reads its metrics certificate from the hard-coded ``/etc/kueue/metrics/certs`` whenever internal cert
  management is off (and exits when it is missing), even with metrics disabled: it runs in a private mount
  namespace where a tmpfs-backed overlay on ``/etc`` holds that directory (nothing is written to the host's /etc).

Objects (``create_queues``): ResourceFlavor ``default-flavor`` (no node labels: every node), ClusterQueue
``cluster-queue`` (cpu 2, memory 2Gi; ``preemption.withinClusterQueue: LowerPriority``), WorkloadPriorityClasses
``low`` (100) and ``high`` (1000); ``create_local_queue(api, namespace)`` adds a LocalQueue ``user-queue``.
A job opts in with the label ``kueue.x-k8s.io/queue-name: user-queue``; its pods must request cpu/memory for the
quota to count them.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable
from pathlib import Path

from . import yaml_files

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
NAMESPACE = "kueue-system"  # Kueue's own namespace (its Configuration's default); nothing runs in it here
FRAMEWORKS = ("kubeflow.org/mpijob",)
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
TRAINER_CONTROLLER = "trainer"  # the localcluster controller that runs TrainJobs (localcluster.controllers)
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "cluster-queue"
LOCAL_QUEUE = "user-queue"
QUOTA = {"cpu": "2", "memory": "2Gi"}  # two jobs of a launcher + a worker requesting 500m cpu each
PRIORITY_CLASSES = {"low": 100, "high": 1000}
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"
JOB_UID_LABEL = f"{GROUP}/job-uid"  # on a Workload: the uid of the job it stands for
METRICS_CERT_DIR = "/etc/kueue/metrics/certs"  # hard-coded in cmd/kueue v0.17.0
# webhooks kept from manifests.yaml: (API group, resource)
WEBHOOK_RESOURCES = {(GROUP, "*"), ("kubeflow.org", "mpijobs")}
TRAINJOB_WEBHOOK_RESOURCES = {("trainer.kubeflow.org", "trainjobs")}


def frameworks(controllers: Iterable[str]) -> tuple[str, ...]:
    """The integrations Kueue runs beside the cluster's ``controllers``: MPIJobs, and TrainJobs where Trainer runs."""
    return (*FRAMEWORKS, TRAINJOB_FRAMEWORK) if TRAINER_CONTROLLER in controllers else FRAMEWORKS


def webhook_resources(controllers: Iterable[str]) -> set[tuple[str, str]]:
    """(API group, resource) of the webhooks kept for ``frameworks(controllers)``."""
    trainer = TRAINER_CONTROLLER in controllers
    return WEBHOOK_RESOURCES | TRAINJOB_WEBHOOK_RESOURCES if trainer else set(WEBHOOK_RESOURCES)


def configuration(
    *, webhook_port: int, health_port: int, cert_dir: Path, integrations: Iterable[str] = FRAMEWORKS
) -> dict:
    """Kueue's ``config.kueue.x-k8s.io/v1beta2`` Configuration for a single local process."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},  # off
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        # one process: no lease to lose while the API server restarts
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": list(integrations)},
        # the visibility API server (on by default) needs an APIService and certificates of its own
        "featureGates": {"VisibilityOnDemand": False},
    }


def crds(data_dir: Path, url: str, ca: bytes) -> list[dict]:
    """The CRDs of the module, with the conversion webhook its kustomization patches in, served at ``url``."""
    crd_dir = data_dir / "crd"
    kustomization = yaml_files.read(crd_dir / "kustomization.yaml")
    converted = set()
    for patch in kustomization.get("patches") or []:
        doc = yaml_files.read(crd_dir / patch["path"])
        if (doc.get("spec") or {}).get("conversion", {}).get("strategy") == "Webhook":
            converted.add(doc["metadata"]["name"])
    out = []
    for rel in kustomization["resources"]:
        crd = yaml_files.read(crd_dir / rel)
        if crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": f"{url}/convert", "caBundle": base64.b64encode(ca).decode()},
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


def webhook_configurations(
    data_dir: Path, url: str, ca: bytes, resources: set[tuple[str, str]] = WEBHOOK_RESOURCES
) -> list[dict]:
    """Kueue's Mutating/ValidatingWebhookConfigurations, pointed at ``url`` (the webhooks of ``resources``)."""
    out = []
    for doc in yaml_files.read_all(data_dir / "webhook-manifests.yaml"):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}  # what upstream's kustomize names them
        kept = []
        for hook in doc.get("webhooks") or []:
            rules = hook.get("rules") or []
            if not any(
                (g, r) in resources or (g, "*") in resources
                for rule in rules
                for g in rule.get("apiGroups", [])
                for r in rule.get("resources", [])
            ):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": base64.b64encode(ca).decode()}
            kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out


def queue_objects() -> list[tuple[str, dict]]:
    """(plural, object) of the cluster-scoped queue objects, in creation order."""
    api = f"{GROUP}/{VERSION}"
    objs: list[tuple[str, dict]] = [
        (
            "resourceflavors",
            {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}, "spec": {}},
        ),
    ]
    for name, value in PRIORITY_CLASSES.items():
        objs.append(
            (
                "workloadpriorityclasses",
                {"apiVersion": api, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value,
                 "description": f"airflow-mpi tests: {name} priority"},
            )
        )  # fmt: skip
    objs.append(
        (
            "clusterqueues",
            {
                "apiVersion": api,
                "kind": "ClusterQueue",
                "metadata": {"name": CLUSTER_QUEUE},
                "spec": {
                    "namespaceSelector": {},  # every namespace
                    "resourceGroups": [
                        {
                            "coveredResources": list(QUOTA),
                            "flavors": [
                                {
                                    "name": FLAVOR,
                                    "resources": [{"name": r, "nominalQuota": q} for r, q in QUOTA.items()],
                                }
                            ],
                        }
                    ],
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                },
            },
        )
    )
    return objs


def create_queues(api_client) -> None:
    """ResourceFlavor, WorkloadPriorityClasses and the ClusterQueue (409 Conflict: already there, fine)."""
    from kubernetes import client

    co = client.CustomObjectsApi(api_client)
    for plural, obj in queue_objects():
        try:
            co.create_cluster_custom_object(GROUP, VERSION, plural, obj)
        except client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise


def cluster_queue_active(api_client, name: str = CLUSTER_QUEUE) -> bool:
    from kubernetes import client

    cq = client.CustomObjectsApi(api_client).get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
    return any(
        c["type"] == "Active" and c["status"] == "True"
        for c in (cq.get("status") or {}).get("conditions") or []
    )


def create_local_queue(
    api_client, namespace: str, name: str = LOCAL_QUEUE, cluster_queue: str = CLUSTER_QUEUE
) -> dict:
    """A LocalQueue ``name`` in ``namespace`` feeding ``cluster_queue``."""
    from kubernetes import client

    obj = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "localqueues", obj
    )


def workloads_of(api_client, namespace: str, job_uid: str) -> list[dict]:
    """The Workload(s) Kueue made for the job of that uid (label ``kueue.x-k8s.io/job-uid``)."""
    from kubernetes import client

    res = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "workloads", label_selector=f"{JOB_UID_LABEL}={job_uid}"
    )
    return res["items"]


def condition(obj: dict, type_: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None
