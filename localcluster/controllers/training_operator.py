"""The training-operator v1.9.4 (``kubeflow.org/v1`` MPIJobs), its unmodified manager as a local process.

``--enable-scheme=mpijob --mpi-kubectl-delivery-image=<local image> --leader-elect=false`` (one process, as for
Kueue), probes on ``127.0.0.1:<free port>``, metrics off, webhook server on a free port. What its Deployment
would give it, done here instead (the manager's cert-controller gate, ``pkg/cert``, closes only when all holds):

* Secret ``kubeflow/training-operator-webhook-cert`` (``MY_POD_NAMESPACE`` unset: namespace ``kubeflow``) with a
  CA and serving certificate made for this cluster (``localcluster.webhook_certs``: RSA/PKCS#1, the only CA key
  cert-controller parses; valid for its names ``training-operator-ca`` and ``training-operator.kubeflow.svc``,
  so it keeps them instead of making its own) and ``127.0.0.1``;
* the same files at ``/tmp/k8s-webhook-server/serving-certs`` (hard-coded in ``pkg/cert``; a pod mounts the
  Secret there): bind-mounted inside a private mount namespace (``unshare``), so that clusters side by side each
  see their own (the host keeps only that empty directory);
* ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org`` from the module's manifests, webhooks
  pointed at ``https://127.0.0.1:<port>``, keeping those of enabled kinds: none, MPIJob has no webhook in v1.9.4
  (``pkg/webhooks``: ``scaffold``); cert-controller injects its CA there.

``ready``: its ``/readyz`` (certificates ready and webhook server listening; the controllers start after that).
"""

from __future__ import annotations

import base64
import contextlib
import copy
from pathlib import Path
from typing import ClassVar

from localcluster import yaml_files
from localcluster.cluster_objects import API_V1
from localcluster.delivery_image import KUBECTL_DELIVERY_IMAGE
from localcluster.ports import free_loopback_port
from localcluster.processes import Launch
from localcluster.webhook_certs import make_certificates

from .base import Controller

NAMESPACE = "kubeflow"  # pkg/cert: the operator's namespace when MY_POD_NAMESPACE is unset
SECRET = "training-operator-webhook-cert"  # --webhook-secret-name's default
SERVICE = "training-operator"  # --webhook-service-name's default: the certificate is for <service>.<ns>.svc
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"  # hard-coded in cmd/training-operator.v1
CA_NAME = "training-operator-ca"  # pkg/cert: what cert-controller verifies the CA against
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # pkg/cert, hard-coded
ENABLED_RESOURCES = ("mpijobs",)  # --enable-scheme=mpijob
# Once, before the restart loop, inside its mount namespace ($1: the certificates).
PRELUDE = f"""certs=$1; shift
mkdir -p {CERT_DIR}
mount --bind "$certs" {CERT_DIR}"""


def webhook_configuration(manifests: Path, url: str, ca: bytes) -> dict:
    """The module's ValidatingWebhookConfiguration under the name upstream's kustomize patch gives it, with the
    webhooks of ``ENABLED_RESOURCES`` only, served at ``url``."""
    doc = copy.deepcopy(next(d for d in yaml_files.read_all(manifests) if d))
    kept = []
    for hook in doc.get("webhooks") or []:
        if any(r in ENABLED_RESOURCES for rule in hook.get("rules") or [] for r in rule.get("resources", [])):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": base64.b64encode(ca).decode()}
            kept.append(hook)
    doc["metadata"] = {"name": WEBHOOK_CONFIGURATION}
    doc["webhooks"] = kept
    return doc


class TrainingOperator(Controller):
    name = "training-operator"
    addon = "training-operator"
    api_versions = (API_V1,)
    # the v1 MPIJob CRD was installed after kube-controller-manager started: its garbage collector must
    # watch MPIJobs at once (a deleted job's pods go with it)
    restarts_controller_manager = True
    ready_what = "its /readyz (certificates ready, webhook server listening)"
    start_timeout: ClassVar[float] = 120

    def prepare(self, timeout: float) -> None:
        """Certificates, their Secret, the webhook configuration and ports (before its process starts)."""
        from kubernetes import client

        data_dir = self.bin_dir()
        api = self.cluster.api_client()
        core = client.CoreV1Api(api)
        ca = make_certificates(
            self.cert_dir, ca_name=CA_NAME, extra_names=[f"{SERVICE}.{NAMESPACE}.svc"], rsa=True
        )
        webhook_port, health_port = free_loopback_port(), free_loopback_port()
        url = f"https://127.0.0.1:{webhook_port}"
        with contextlib.suppress(client.exceptions.ApiException):
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        data = {n: base64.b64encode((self.cert_dir / n).read_bytes()).decode() for n in
                ("ca.crt", "ca.key", "tls.crt", "tls.key")}  # fmt: skip
        core.create_namespaced_secret(
            NAMESPACE, {"metadata": {"name": SECRET}, "type": "Opaque", "data": data}
        )
        client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(
            webhook_configuration(data_dir / "webhook-manifests.yaml", url, ca)
        )
        args = [
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            "--enable-scheme=mpijob",
            f"--mpi-kubectl-delivery-image={KUBECTL_DELIVERY_IMAGE}",
            "--leader-elect=false",
            f"--webhook-server-port={webhook_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            "--metrics-bind-address=0",
            "--controller-threads=4",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
        ]
        self.save(
            {
                "binary": str(data_dir / "training-operator"),
                "args": args,
                "webhook": url,
                "health": f"http://127.0.0.1:{health_port}",
                "log": str(self.log_path),
            }
        )

    def launch(self, timeout: float) -> Launch:
        record = self.record()
        if not record:  # a cluster whose start() did not prepare it
            self.prepare(timeout)
            record = self.record()
        env = self.environment()
        env.pop(
            "TMPDIR", None
        )  # the webhook server reads $TMPDIR/k8s-webhook-server/..., cert-controller /tmp
        env.pop("MY_POD_NAMESPACE", None)
        return Launch(
            [record["binary"], *record["args"]],
            env,
            prelude=PRELUDE,
            prelude_args=[str(self.cert_dir)],
            wrapper=self.private_mounts(),
        )

    def ready(self) -> bool:
        """Its ``/readyz``: cert-controller closed its gate and the webhook server listens."""
        return self.readyz()
