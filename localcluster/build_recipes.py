"""What localcluster/build.py builds: the tools of the main build, the add-ons, and the files read from module sources.

A tool is a binary of one of our Go modules (``localcluster/go/<module>``); an add-on is tools built only when a
cluster asks for them, into a cache directory of its own. These objects' ``repr`` goes into the build keys
(``build.build_key``, ``build.addon_key``): a change here rebuilds what it changes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tool:
    binary: str
    module: str  # directory under localcluster/go
    package: str


TOOLS: tuple[Tool, ...] = (
    Tool("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    Tool("kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver"),
    Tool("kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    Tool("kube-scheduler", "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler"),
    # kwokctl runs `kubectl get --raw /version` to see that the cluster is served; handy for humans too.
    Tool("kubectl", "kubernetes", "k8s.io/kubernetes/cmd/kubectl"),
    # the real node (images/kube): kubelet from the same release as the control plane, CoreDNS with only the
    # plugins cluster DNS needs (our main, see go/coredns/main.go), and the pod sandbox process (go/pause)
    Tool("kubelet", "kubernetes", "k8s.io/kubernetes/cmd/kubelet"),
    Tool("coredns", "coredns", "airflow-mpi.localcluster/coredns"),
    Tool("pause", "pause", "airflow-mpi.localcluster/pause"),
    Tool("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
    Tool("kwokctl", "kwok", "sigs.k8s.io/kwok/cmd/kwokctl"),
    # our 30-line main around the unmodified upstream app package (adds --health-check-port; see main.go)
    Tool("mpi-operator", "mpi-operator", "airflow-mpi.localcluster/mpi-operator"),
)

# CRDs read from module sources (after `go mod download`), copied next to the binaries.
CRDS: dict[str, tuple[str, str, str]] = {
    # name: (module dir, module path, path inside the module)
    "mpijobs-v2beta1.yaml": (
        "mpi-operator",
        "github.com/kubeflow/mpi-operator",
        "manifests/base/kubeflow.org_mpijobs.yaml",
    ),
    "mpijobs-v1.yaml": (
        "training-operator",
        "github.com/kubeflow/training-operator",
        "manifests/base/crds/kubeflow.org_mpijobs.yaml",
    ),
}


@dataclass(frozen=True)
class Addon:
    """Tools built on demand into their own cache directory, plus data files read from their module."""

    name: str
    tools: tuple[Tool, ...]
    # dest name -> (module dir, module path, file or directory inside the module)
    data: tuple[tuple[str, tuple[str, str, str]], ...]


KUEUE = Addon(
    "kueue",
    (Tool("kueue", "kueue", "sigs.k8s.io/kueue/cmd/kueue"),),
    (
        # CRDs (bases/) and the patches that turn on their conversion webhook (kustomization.yaml lists them)
        ("crd", ("kueue", "sigs.k8s.io/kueue", "config/components/crd")),
        (
            "webhook-manifests.yaml",
            ("kueue", "sigs.k8s.io/kueue", "config/components/webhook/manifests.yaml"),
        ),
    ),
)
# the kubeflow.org/v1 MPIJob controller (unmodified `cmd/training-operator.v1`, run with --enable-scheme=mpijob): the
# v1 MPIJob CRD is part of the main build (CRDS); its validating webhook configuration (cert-controller injects its CA
# there) is read from the module.  MPIJob itself has no webhook in v1.9.4 (pkg/webhooks: `scaffold`).
TRAINING_OPERATOR = Addon(
    "training-operator",
    (
        Tool(
            "training-operator",
            "training-operator",
            "github.com/kubeflow/training-operator/cmd/training-operator.v1",
        ),
    ),
    (
        (
            "webhook-manifests.yaml",
            (
                "training-operator",
                "github.com/kubeflow/training-operator",
                "manifests/base/webhook/manifests.yaml",
            ),
        ),
    ),
)
# JobSet (unmodified: its manager is the module's root package, main.go), which Kubeflow Trainer creates for a TrainJob:
# the CRD (one version, v1alpha2: no conversion webhook needed) and the webhook manifests with the kustomize patches
# that limit its Pod webhooks to JobSet's pods (config/components/webhook: manifests.yaml, patches/, kustomization.yaml)
JOBSET = Addon(
    "jobset",
    (Tool("jobset", "jobset", "sigs.k8s.io/jobset"),),
    (
        ("crd", ("jobset", "sigs.k8s.io/jobset", "config/components/crd/bases")),
        ("webhook", ("jobset", "sigs.k8s.io/jobset", "config/components/webhook")),
    ),
)
# Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1: TrainJob, TrainingRuntime, ClusterTrainingRuntime): its
# controller manager only (unmodified), its CRDs and its webhook manifests with their kustomize patches
TRAINER = Addon(
    "trainer",
    (
        Tool(
            "trainer-controller-manager",
            "trainer",
            "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
        ),
    ),
    (
        ("crd", ("trainer", "github.com/kubeflow/trainer/v2", "manifests/base/crds")),
        ("webhook", ("trainer", "github.com/kubeflow/trainer/v2", "manifests/base/webhook")),
    ),
)
ADDONS: dict[str, Addon] = {a.name: a for a in (KUEUE, TRAINING_OPERATOR, JOBSET, TRAINER)}

# kwok's own node stages (node-initialize, heartbeat with lease), read from the kwok module like the CRDs.
# (Data files: copied into the bin dir when missing; not part of the build key.)
NODE_STAGES: dict[str, tuple[str, str, str]] = {
    "node-initialize.yaml": ("kwok", "sigs.k8s.io/kwok", "kustomize/stage/node/fast/node-initialize.yaml"),
    "node-heartbeat-with-lease.yaml": (
        "kwok",
        "sigs.k8s.io/kwok",
        "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    ),
}

# Modules whose shared dependencies are required at one version per group (localcluster/go_deps.py), so that Go's
# build cache compiles the Kubernetes client stack once per group instead of once per module. Grouped by the k8s.io
# minor their upstream pins: the mpi-operator and Kueue (v0.35); kwok, JobSet, Trainer and the training-operator
# (v0.36). The main build's Kubernetes (its own staging repositories) and CoreDNS (v0.37) stay as their releases pin.
SHARED_DEPENDENCIES: tuple[tuple[str, ...], ...] = (
    ("mpi-operator", "kueue"),
    ("kwok", "jobset", "trainer", "training-operator"),
)

# upstream projects whose versions `pinned_versions` reports (read from our go.mod files)
PINNED_MODULES = (
    "k8s.io/kubernetes",
    "go.etcd.io/etcd/server/v3",
    "sigs.k8s.io/kwok",
    "github.com/kubeflow/mpi-operator",
    "github.com/kubeflow/training-operator",
    "github.com/coredns/coredns",
    "sigs.k8s.io/kueue",
    "sigs.k8s.io/jobset",
    "github.com/kubeflow/trainer/v2",
)
