"""The mpi-operator v0.8.2 (``kubeflow.org/v2beta1``), its upstream controller as a local process.

``--kubeConfig=<cluster kubeconfig> --namespace= (all namespaces) --lock-namespace=mpi-operator
--threadiness=4 --kube-api-qps=50 --kube-api-burst=100 --controller-queue-rate-limit=50 --controller-queue-burst=500
--monitoring-port=0 --health-check-port=<free port>``.
It always runs leader election (no flag turns it off; lease ``mpi-operator/mpi-operator``) and exits when it
loses the lease (API server unreachable for more than its 5 s renew deadline): the restart loop brings it
back, and it is ready once the process running now holds the lease.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from typing import ClassVar

from localcluster.ports import free_loopback_port
from localcluster.processes import Launch, child_started

from .base import Controller

LOCK_NAMESPACE = "mpi-operator"
LEASE = "mpi-operator"


class MpiOperator(Controller):
    name = "mpi-operator"
    ready_what = "its leader lease"
    start_timeout: ClassVar[float] = 60

    def launch(self, timeout: float) -> Launch:
        from kubernetes import client

        core = client.CoreV1Api(self.cluster.api_client())
        with contextlib.suppress(client.exceptions.ApiException):
            core.create_namespace({"metadata": {"name": LOCK_NAMESPACE}})
        binary = str(self.bin_dir() / "mpi-operator")
        args = [
            f"--kubeConfig={self.cluster.kubeconfig_path}",
            "--namespace=",  # all namespaces
            f"--lock-namespace={LOCK_NAMESPACE}",
            "--threadiness=4",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
            # one operator serves every test namespace of a session: upstream's event-queue bucket (10/s, burst
            # 100) makes a test with a hundred jobs delay the next tests' first syncs by 40 s
            "--controller-queue-rate-limit=50",
            "--controller-queue-burst=500",
            "--monitoring-port=0",
            # upstream hard-codes :8080; our build makes it configurable so clusters can run side by side
            f"--health-check-port={free_loopback_port()}",
        ]
        self.save({"binary": binary, "args": args, "log": str(self.log_path)})
        # the operator lets $KUBECONFIG override --kubeConfig: environment() drops it
        return Launch([binary, *args], self.environment())

    def ready(self) -> bool:
        """The operator process running now holds the leader lease (acquired since it started, renewed)."""
        from kubernetes import client

        started = child_started(self.pid_file, "mpi-operator")
        if started is None:
            return False
        coord = client.CoordinationV1Api(self.cluster.api_client())
        try:
            lease = coord.read_namespaced_lease(LEASE, LOCK_NAMESPACE)
        except client.exceptions.ApiException:
            return False
        spec = lease.spec
        if not spec or not spec.holder_identity or not spec.renew_time:
            return False
        if spec.acquire_time is None or spec.acquire_time.timestamp() < started - 1:
            return False  # still the lease of a previous operator process
        age = (_dt.datetime.now(_dt.UTC) - spec.renew_time).total_seconds()
        return age < (spec.lease_duration_seconds or 15)
