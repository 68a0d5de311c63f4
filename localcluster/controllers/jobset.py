"""JobSet v0.12.0 (``sigs.k8s.io/jobset``, its unmodified manager: the module's main.go) as a local process: the
controller Kubeflow Trainer hands a TrainJob's pods to (a TrainJob becomes a JobSet of the same name).

Configuration (``config.jobset.x-k8s.io/v1alpha1``, ``clusters/<name>/jobset/config.yaml``): webhook server on
``127.0.0.1:<free port>`` with ``certDir`` = our certificates; health probes on ``127.0.0.1:<free port>``; metrics
off (``bindAddress: "0"``); leader election off; ``internalCertManagement`` off (no cert-controller: upstream's
default would make its own certificates into Secret ``jobset-webhook-server-cert`` and rotate them). CRD
``jobsets.jobset.x-k8s.io`` from ``config/components/crd/bases`` (one version, so the conversion webhook upstream's
kustomization patches in is left out). Webhooks from ``config/components/webhook``, with its patches (the Pod
webhooks only for pods labelled ``jobset.sigs.k8s.io/jobset-name``) and upstream's ``jobset-`` name prefix:
``jobset-mutating-webhook-configuration``, ``jobset-validating-webhook-configuration``. The rest is
``WebhookManager``'s; its probe is a dry-run JobSet create.
"""

from __future__ import annotations

from .webhook_manager import WebhookManager


class JobSet(WebhookManager):
    name = addon = binary = "jobset"
    webhook_name_prefix = "jobset-"  # config/default's namePrefix
    probe_kind = (
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
        "jobsets",
    )  # through its mutating and validating webhooks
    probe_namespace = "default"

    def configuration(self, *, webhook_port: int, health_port: int) -> dict:
        return {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(self.cert_dir)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 50, "burst": 100},
        }

    def probe_spec(self) -> dict:
        pod = {"spec": {"containers": [{"name": "probe", "image": "probe"}]}}
        return {"replicatedJobs": [{"name": "probe", "replicas": 1, "template": {"spec": {"template": pod}}}]}
