"""Kueue v0.17.0 (``sigs.k8s.io/kueue/cmd/kueue``, unmodified) as a local process; its configuration, CRDs,
webhooks and queues are those of ``localcluster/kueue.py``.

``prepare`` (before the nodes): a webhook CA and serving certificate, two free ports (webhooks, health
probes), the configuration and the CRDs (with their conversion webhook) -- then the cluster restarts
kube-controller-manager so that its garbage collector watches Kueue's kinds at once. ``launch``: the restart
loop inside a private mount namespace (``unshare``) whose prelude lays a tmpfs-backed overlay on ``/etc``
holding the metrics certificate v0.17.0 reads from a hard-coded path (nothing is written to the host's /etc;
bind mounts under /etc, e.g. a container's /etc/hosts, are carried over). ``ready``: its ``/readyz`` (webhook
server listening). ``after_ready``, on the first start only: the webhook configurations, the queues (created
through its webhooks: proof that the API server reaches them), the ClusterQueue Active and the
garbage-collector probe. A later start (after ``stop()``) reuses ports, certificates and objects; a stopped
Kueue leaves its webhooks installed, so MPIJob creates fail, as in a cluster whose Kueue is down.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import yaml

from localcluster import kueue as _kueue
from localcluster.cluster_objects import API_V2BETA1, install_crds
from localcluster.ports import free_loopback_port
from localcluster.processes import Launch
from localcluster.waiting import wait_until
from localcluster.webhook_certs import make_certificates

from .base import Controller

# Once, before the restart loop, inside Kueue's mount namespace ($1: an empty directory, $2: certificates).
PRELUDE = r"""mnt=$1 certs=$2; shift 2
mount -t tmpfs -o size=4m,mode=0700 tmpfs "$mnt"
i=0
for p in $KEEP_MOUNTS; do
  i=$((i + 1)); if [ -d "$p" ]; then mkdir "$mnt/keep$i"; else : > "$mnt/keep$i"; fi
  mount --bind "$p" "$mnt/keep$i"
done
mkdir "$mnt/upper" "$mnt/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$mnt/upper,workdir=$mnt/work" /etc
i=0
for p in $KEEP_MOUNTS; do i=$((i + 1)); mount --bind "$mnt/keep$i" "$p"; done
mkdir -p METRICS_CERT_DIR
cp "$certs/tls.crt" "$certs/tls.key" METRICS_CERT_DIR/""".replace("METRICS_CERT_DIR", _kueue.METRICS_CERT_DIR)
GC_PROBE = "airflow-mpi-gc-probe"


def mounts_under(top: str) -> list[str]:
    """Mount points below ``top`` in this process's mount namespace (e.g. a container's /etc/hosts)."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4]
            if point.startswith(top.rstrip("/") + "/") and "\\" not in point:
                out.append(point)
    return out


class Kueue(Controller):
    name = "kueue"
    addon = "kueue"
    api_versions = (API_V2BETA1,)  # Kueue's MPIJob integration is kubeflow.org/v2beta1
    restarts_controller_manager = True
    ready_what = "its /readyz"

    @property
    def state_key(self) -> str:
        return "kueue_process"

    def prepare(self, timeout: float) -> None:
        """Ports, certificates, configuration and CRDs (before its process starts)."""
        from kubernetes import client

        data_dir = self.bin_dir()
        api = self.cluster.api_client()
        ca = make_certificates(self.cert_dir)
        webhook_port, health_port = free_loopback_port(), free_loopback_port()
        url = f"https://127.0.0.1:{webhook_port}"
        with contextlib.suppress(client.exceptions.ApiException):
            client.CoreV1Api(api).create_namespace({"metadata": {"name": _kueue.NAMESPACE}})
        install_crds(api, _kueue.crds(data_dir, url, ca), timeout, "Kueue CRDs")
        config = self._configure(webhook_port, health_port)
        self.save(
            {
                "binary": str(data_dir / "kueue"),
                "args": [f"--config={config}", f"--kubeconfig={self.cluster.kubeconfig_path}"],
                "webhook": url,
                "health": f"http://127.0.0.1:{health_port}",
                "log": str(self.log_path),
                "installed": False,
                "frameworks": list(_kueue.frameworks(self.cluster.controllers)),
            }
        )

    def _configure(self, webhook_port: int, health_port: int) -> Path:
        """Its configuration file, with the integrations of the cluster's controllers (``kueue.frameworks``)."""
        config = self.work_dir / "config.yaml"
        settings = _kueue.configuration(
            webhook_port=webhook_port,
            health_port=health_port,
            cert_dir=self.cert_dir,
            integrations=_kueue.frameworks(self.cluster.controllers),
        )
        config.write_text(yaml.safe_dump(settings))
        return config

    def launch(self, timeout: float) -> Launch:
        record = self.record()
        if not record:  # a cluster whose start() did not prepare it
            self.prepare(timeout)
            record = self.record()
        mnt = self.work_dir / "mnt"  # an empty directory here; a tmpfs inside Kueue's mount namespace
        mnt.mkdir(parents=True, exist_ok=True)
        env = self.environment()  # controller-runtime prefers --kubeconfig, but be sure
        env["KEEP_MOUNTS"] = " ".join(mounts_under("/etc"))
        return Launch(
            [record["binary"], *record["args"]],
            env,
            prelude=PRELUDE,
            prelude_args=[str(mnt), str(self.cert_dir)],
            wrapper=self.private_mounts(),
        )

    def ready(self) -> bool:
        """Kueue's ``/readyz``: its webhook server is listening."""
        return self.readyz()

    def _install_webhooks(self, record: dict, replace: bool = False) -> None:
        """Its webhook configurations, for the integrations of the cluster's controllers (``replace``: over those
        installed before)."""
        from kubernetes import client

        ca = (self.cert_dir / "ca.crt").read_bytes()
        adm = client.AdmissionregistrationV1Api(self.cluster.api_client())
        resources = _kueue.webhook_resources(self.cluster.controllers)
        for hooks in _kueue.webhook_configurations(
            Path(record["binary"]).parent, record["webhook"], ca, resources
        ):
            mutating = hooks["kind"] == "MutatingWebhookConfiguration"
            kind = "mutating" if mutating else "validating"
            if replace:
                name = hooks["metadata"]["name"]
                current = getattr(adm, f"read_{kind}_webhook_configuration")(name)
                hooks["metadata"]["resourceVersion"] = current.metadata.resource_version
                getattr(adm, f"replace_{kind}_webhook_configuration")(name, hooks)
            else:
                getattr(adm, f"create_{kind}_webhook_configuration")(hooks)

    def controllers_added(self, added: tuple[str, ...], timeout: float) -> None:
        """Trainer joined the cluster: Kueue restarts with its TrainJob integration (it reads its integrations at
        start), then its webhooks of TrainJobs are installed."""
        record = self.record()
        wanted = list(_kueue.frameworks(self.cluster.controllers))
        if not record or record.get("frameworks", list(_kueue.FRAMEWORKS)) == wanted:
            return
        self.stop()
        port = {key: int(record[key].rsplit(":", 1)[1]) for key in ("webhook", "health")}
        self._configure(port["webhook"], port["health"])
        self.start(timeout)
        self._install_webhooks(record, replace=True)
        self.save({**record, "frameworks": wanted})
        self.cluster.info(f"Kueue: integrations {', '.join(wanted)}")

    def after_ready(self, timeout: float) -> None:
        record = self.record()
        if record["installed"]:
            return
        api = self.cluster.api_client()
        self._install_webhooks(record)
        # through Kueue's webhooks: proves the API server reaches them
        wait_until(
            lambda: _kueue.create_queues(api) or True,
            timeout,
            "Kueue's queues (through its webhooks)",
            interval=0.5,
        )
        wait_until(
            lambda: _kueue.cluster_queue_active(api), timeout, f"ClusterQueue {_kueue.CLUSTER_QUEUE} Active"
        )
        self._wait_garbage_collector(timeout)
        self.save({**record, "installed": True})
        self.cluster.info(f"Kueue: webhooks {record['webhook']}, ClusterQueue {_kueue.CLUSTER_QUEUE} Active")

    def _wait_garbage_collector(self, timeout: float) -> None:
        """Wait until kube-controller-manager's garbage collector handles Kueue's kinds.

        Until it does, a deleted MPIJob's Workload is not removed, so its quota is not freed. Probe: a
        WorkloadPriorityClass owned by a ClusterRole; once the role is deleted the collector deletes the class
        as soon as it watches Kueue's kinds (quick: the cluster restarted it after ``prepare``).
        """
        from kubernetes import client

        api = self.cluster.api_client()
        rbac = client.RbacAuthorizationV1Api(api)
        co = client.CustomObjectsApi(api)
        group, version, plural = _kueue.GROUP, _kueue.VERSION, "workloadpriorityclasses"
        t0 = time.monotonic()
        owner = rbac.create_cluster_role({"metadata": {"name": GC_PROBE}, "rules": []})
        ref = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "name": GC_PROBE,
            "uid": owner.metadata.uid,
        }
        probe: dict[str, Any] = {
            "apiVersion": f"{group}/{version}",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": GC_PROBE, "ownerReferences": [ref]},
            "value": 0,
        }
        co.create_cluster_custom_object(group, version, plural, probe)
        rbac.delete_cluster_role(GC_PROBE)

        def gone() -> bool:
            try:
                co.get_cluster_custom_object(group, version, plural, GC_PROBE)
            except client.exceptions.ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        wait_until(
            gone,
            timeout,
            "the garbage collector to watch Kueue's kinds (it discovers new CRDs every 30 s)",
            interval=0.5,
        )
        self.cluster.info(f"garbage collector handles Kueue's kinds (waited {time.monotonic() - t0:.1f}s)")

    def create_local_queue(self, namespace: str, name: str = _kueue.LOCAL_QUEUE) -> dict:
        """A LocalQueue (default ``user-queue``) in ``namespace`` feeding ClusterQueue ``cluster-queue``."""
        return _kueue.create_local_queue(self.cluster.api_client(), namespace, name)
