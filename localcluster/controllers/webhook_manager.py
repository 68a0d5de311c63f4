"""What JobSet and Kubeflow Trainer share: a controller-runtime manager, unmodified, configured by a file, with CRDs
and admission webhooks of its own (``WebhookManager``).

What their Deployments and kustomize builds would give them, done here instead:

* ``prepare`` (before the nodes and any controller start): a CA and a serving certificate for ``127.0.0.1``
  (``localcluster.webhook_certs``, EC P-256) where the webhook server reads them; two free loopback ports (webhook
  server, health probes); the Configuration file (``configuration``: leader election off, one process as for the
  other controllers here; internal certificate management off, so no cert-controller rotates anything; metrics
  off); the module's CRDs, awaited Established (then the cluster restarts kube-controller-manager, so that its
  garbage collector watches the new kinds at once).
* ``launch``: ``<binary> --config=<file> --kubeconfig=<admin kubeconfig>`` under the restart loop (no RBAC).
* ``ready``: its ``/readyz``, which both managers gate on their certificates and on the webhook server listening.
* ``after_ready``, first start only: the module's webhook configurations (``localcluster.webhook_manifests``:
  kustomize's patches applied, every webhook pointed at ``https://127.0.0.1:<port>`` with the CA above), then
  ``probe`` until it passes: a dry-run create through the API server, which calls the webhooks (proof that the API
  server reaches them). A later start (after ``stop()``) reuses ports, certificates and objects; a stopped manager
  leaves its webhooks installed (``failurePolicy: Fail``: creates of its kinds fail, as in a cluster whose
  controller is down).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import yaml

from localcluster import webhook_manifests, yaml_files
from localcluster.cluster_objects import install_crds
from localcluster.ports import free_loopback_port
from localcluster.processes import Launch
from localcluster.waiting import wait_until
from localcluster.webhook_certs import make_certificates

from .base import Controller

PROBE = "airflow-mpi-webhook-probe"


def load_crds(crd_dir: Path) -> list[dict]:
    """Every CustomResourceDefinition in the YAML files of ``crd_dir`` (a module's CRD directory)."""
    return [
        doc
        for path in sorted(crd_dir.glob("*.yaml"))
        for doc in yaml_files.read_all(path)
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]


class WebhookManager(Controller):
    """A controller-runtime manager with a Configuration file, CRDs and webhooks from its module (see above)."""

    binary: ClassVar[str]  # its file in the add-on's build
    # the namePrefix upstream's kustomize overlay gives its webhook configurations
    webhook_name_prefix: ClassVar[str] = ""
    # the kind ``probe`` creates (dry run): (group, version, kind, plural), and its namespace (None: cluster-scoped)
    probe_kind: ClassVar[tuple[str, str, str, str]]
    probe_namespace: ClassVar[str | None] = None
    restarts_controller_manager = True
    ready_what = "its /readyz (certificates ready, webhook server listening)"
    ready = Controller.readyz  # both managers' /readyz waits for their certificates and webhook server

    # ------------------------------------------------------------------ what a subclass says
    def configuration(self, *, webhook_port: int, health_port: int) -> dict:
        """Its Configuration (the file ``--config`` names)."""
        raise NotImplementedError

    def probe_spec(self) -> dict:
        """The ``spec`` of the object ``probe`` creates: one its webhooks admit."""
        raise NotImplementedError

    def probe(self, api: Any) -> None:
        """An object of ``probe_kind`` created with ``dryRun=All``, which the API server sends through the webhooks
        of that kind (nothing is stored); raises while they do not answer."""
        from kubernetes import client

        group, version, kind, plural = self.probe_kind
        obj = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": PROBE}}
        obj["spec"] = self.probe_spec()
        co = client.CustomObjectsApi(api)
        if self.probe_namespace is None:
            co.create_cluster_custom_object(group, version, plural, obj, dry_run="All")
        else:
            co.create_namespaced_custom_object(
                group, version, self.probe_namespace, plural, obj, dry_run="All"
            )

    # ------------------------------------------------------------------ the shared part
    def launch_environment(self) -> dict[str, str]:
        return self.environment()

    def prepare(self, timeout: float) -> None:
        data_dir = self.bin_dir()
        api = self.cluster.api_client()
        make_certificates(self.cert_dir, ca_name=f"airflow-mpi {self.name} webhook CA")
        webhook_port, health_port = free_loopback_port(), free_loopback_port()
        install_crds(api, load_crds(data_dir / "crd"), timeout, f"{self.name} CRDs")
        config = self.work_dir / "config.yaml"
        config.write_text(
            yaml.safe_dump(self.configuration(webhook_port=webhook_port, health_port=health_port))
        )
        self.save(
            {
                "binary": str(data_dir / self.binary),
                "args": [f"--config={config}", f"--kubeconfig={self.cluster.kubeconfig_path}"],
                "webhook": f"https://127.0.0.1:{webhook_port}",
                "health": f"http://127.0.0.1:{health_port}",
                "log": str(self.log_path),
                "installed": False,
            }
        )

    def launch(self, timeout: float) -> Launch:
        if not self.record():  # a cluster whose start() did not prepare it
            self.prepare(timeout)
        record = self.record()
        return Launch([record["binary"], *record["args"]], self.launch_environment())

    def after_ready(self, timeout: float) -> None:
        record = self.record()
        if record["installed"]:
            return
        api = self.cluster.api_client()
        docs = webhook_manifests.kustomized(
            Path(record["binary"]).parent / "webhook", self.webhook_name_prefix
        )
        ca = (self.cert_dir / "ca.crt").read_bytes()
        names = webhook_manifests.install(api, webhook_manifests.served_at(docs, record["webhook"], ca))

        def answered() -> bool:
            self.probe(api)
            return True

        wait_until(answered, timeout, f"{self.name}'s webhooks to answer the API server", interval=0.5)
        self.save({**record, "installed": True, "webhook_configurations": names})
        self.cluster.info(f"{self.name}: webhooks {record['webhook']} ({', '.join(names)})")
