"""Kubeflow Trainer v2.3.0 (``github.com/kubeflow/trainer/v2``: ``cmd/trainer-controller-manager``, unmodified) as a
local process: TrainJob, TrainingRuntime and ClusterTrainingRuntime (``trainer.kubeflow.org/v1alpha1``). A TrainJob
becomes a JobSet, so it needs JobSet's controller (``requires``: the cluster starts ``jobset`` first); upstream's
kustomize install fetches JobSet from a release URL, here it is the ``jobset`` add-on, built from its module.

Configuration (``config.trainer.kubeflow.org/v1alpha1``, ``clusters/<name>/trainer/config.yaml``): webhook server
on ``127.0.0.1:<free port>``, health probes on ``127.0.0.1:<free port>``, metrics off, leader election off (no
``leaderElection`` section), ``certManagement.enable: false`` (its open-policy-agent/cert-controller would otherwise
make Secret ``kubeflow-trainer-webhook-cert`` and patch our configurations' ``caBundle``). v2.3.0's Configuration
has no certificate directory: the webhook server reads controller-runtime's default,
``$TMPDIR/k8s-webhook-server/serving-certs``, so the process gets ``TMPDIR=clusters/<name>/trainer/tmp`` and the
certificates are made there (clusters side by side each have their own; nothing in the host's /tmp).
CRDs from ``manifests/base/crds``; webhooks from ``manifests/base/webhook`` with its patches (names
``defaulter.trainer.kubeflow.org`` and ``validator.trainer.kubeflow.org``, what its main.go expects). No runtime is
installed: v2.3.0 ships none for plain MPI (deploy/trainjob-mpi-runtime.yaml is ours). The rest is
``WebhookManager``'s; its probe is a dry-run ClusterTrainingRuntime create.
"""

from __future__ import annotations

from pathlib import Path

from .webhook_manager import WebhookManager


class Trainer(WebhookManager):
    name = addon = "trainer"
    binary = "trainer-controller-manager"
    requires = ("jobset",)
    # through its validating webhook of ClusterTrainingRuntimes
    probe_kind = ("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes")

    @property
    def cert_dir(self) -> Path:
        """controller-runtime's default certificate directory under the process's ``$TMPDIR``."""
        return self.work_dir / "tmp" / "k8s-webhook-server" / "serving-certs"

    def launch_environment(self) -> dict[str, str]:
        return {**self.environment(), "TMPDIR": str(self.work_dir / "tmp")}

    def configuration(self, *, webhook_port: int, health_port: int) -> dict:
        # no leaderElection section: no leader election; clientConnection: its defaults, qps 50 and burst 100
        return {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": webhook_port},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "certManagement": {"enable": False},
        }

    def probe_spec(self) -> dict:
        pod = {"spec": {"containers": [{"name": "node", "image": "probe"}]}}
        return {
            "template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}
            }
        }
