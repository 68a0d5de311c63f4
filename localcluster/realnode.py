"""A real Kubernetes node: containerd + runc + CNI bridge, the kubelet and cluster DNS (CoreDNS).

Runs inside the node container (images/kube, started by ``python -m localcluster serve``), next to the control
plane of a :class:`~localcluster.cluster.LocalCluster`. Pods on this node run real containers: the launcher's
log, its exit code, SSH between launcher and workers and DNS of ``<job>-worker-<i>.<job>.<ns>.svc`` are what
Kubernetes and the MPI programs do, not a script.

Choices, and why:
* containerd and runc are Debian's (bookworm: containerd 1.6, CRI v1), the CNI plugins too
  (containernetworking-plugins: bridge + host-local + loopback + portmap). The kubelet is built from the
  same ``k8s.io/kubernetes`` release as the API server.
* cgroup v1 with the cgroupfs driver (these machines have no usable cgroup v2 hierarchy): the kubelet is told
  not to refuse cgroup v1 (``failCgroupV1: false``) and nests its pods under ``/kubelet``.
* No kube-proxy: nothing needs a ClusterIP but the ``kubernetes`` Service, the API server as pods see it (the
  training-operator's v1 launchers run ``kubectl exec`` from inside): ``route_api_service`` adds the one DNAT
  rule kube-proxy would make for it (its ClusterIP:443 to the API server on this node). CoreDNS runs beside the
  kubelet on the node (not as a pod) and answers on the pod bridge's gateway address, which the kubelet hands
  to pods as their nameserver.
* No registry: the pod sandbox (``pause``) and the workload images are imported into containerd from
  archives (:mod:`localcluster.image_archive`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import yaml

from .image_archive import binary_archive
from .node_containerd import CONTAINERD_SOCKET, Containerd
from .processes import child_env

NODE_NAME = "real-node-0"
NODE_LABEL = "airflow-mpi.io/node"  # "real" here, kwok nodes carry type=kwok
POD_SUBNET = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"  # the bridge's address: CoreDNS answers here
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "docker.io/airflow-mpi/pause:local"
CNI_BIN_DIR = "/usr/lib/cni"
CNI_CONF_DIR = Path("/etc/cni/net.d")


class NodeError(RuntimeError):
    pass


def node_ip() -> str:
    """The container's own address (the kubelet refuses loopback as node IP)."""
    return socket.gethostbyname(socket.gethostname())


class RealNode:
    """containerd, kubelet and CoreDNS processes for one node; ``start()`` returns once the Node is Ready."""

    def __init__(
        self,
        bin_dir: Path,
        kubeconfig: Path,
        pki_dir: Path,
        state_dir: Path,
        logs_dir: Path,
        container_log_max_size: str | None = None,
    ) -> None:
        self.bin_dir = bin_dir
        self.container_log_max_size = container_log_max_size  # None: the kubelet's default (10Mi)
        self.kubeconfig = kubeconfig
        self.pki_dir = pki_dir
        self.state_dir = state_dir
        self.logs_dir = logs_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.containerd = Containerd()
        self._core = None  # kubernetes CoreV1Api, made on first use

    # ------------------------------------------------------------------ configuration files
    def _write_configs(self, cgroup_root: str) -> dict[str, Path]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        containerd = self.state_dir / "containerd.toml"
        containerd.write_text(
            f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{CONTAINERD_SOCKET}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # lowering oom_score_adj needs CAP_SYS_RESOURCE, which these VMs withhold even from privileged containers:
  # without this, every pod sandbox (-998) and Guaranteed container (-997) fails to start
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{CNI_CONF_DIR}"
"""
        )
        CNI_CONF_DIR.mkdir(parents=True, exist_ok=True)
        (CNI_CONF_DIR / "10-airflow-mpi.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "airflow-mpi",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=2,
            )
        )
        kubelet = self.state_dir / "kubelet.yaml"
        kubelet.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    # the API server reaches the kubelet (logs, exec) with the cluster's admin client certificate
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": str(self.pki_dir / "ca.crt")},
                    },
                    "authorization": {"mode": "Webhook"},
                    "readOnlyPort": 0,
                    "healthzBindAddress": "127.0.0.1",
                    "healthzPort": 10248,
                    "cgroupDriver": "cgroupfs",
                    "cgroupRoot": cgroup_root,
                    "failCgroupV1": False,
                    "failSwapOn": False,
                    "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
                    "clusterDomain": CLUSTER_DOMAIN,
                    "clusterDNS": [POD_GATEWAY],
                    "podCIDR": POD_SUBNET,
                    "maxPods": 110,
                    "serializeImagePulls": False,
                    # a test machine's disk is shared with everything else: never evict or collect images for it
                    "evictionHard": {
                        "memory.available": "50Mi",
                        "nodefs.available": "0%",
                        "imagefs.available": "0%",
                    },
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "protectKernelDefaults": False,
                    "localStorageCapacityIsolation": False,
                    **self._log_rotation(),
                }
            )
        )
        corefile = self.state_dir / "Corefile"
        corefile.write_text(
            f""".:53 {{
    errors
    log . {{
        class denial error
    }}
    ready 127.0.0.1:8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
}}
"""
        )
        return {"containerd": containerd, "kubelet": kubelet, "coredns": corefile}

    def _log_rotation(self) -> dict:
        """A small ``containerLogMaxSize`` makes the kubelet rotate a chatty container's log every few seconds
        (checked every 3 s, its shortest interval), as a busy production node does with 10Mi: the fault suite's
        follow streams cross rotations. Ten files keep a whole 3,000-line launcher log on the node, so a test can
        compare what the kubelet wrote with what its followers were served."""
        if not self.container_log_max_size:
            return {}
        return {
            "containerLogMaxSize": self.container_log_max_size,
            "containerLogMaxFiles": 10,
            "containerLogMonitorInterval": "3s",
        }

    # ------------------------------------------------------------------ processes
    def _spawn(self, name: str, argv: list[str]) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.logs_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[name] = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=child_env()
        )
        log.close()

    def _argv(self, name: str, configs: dict[str, Path]) -> list[str]:
        if name == "containerd":
            return ["containerd", "--config", str(configs["containerd"])]
        if name == "kubelet":
            return [
                str(self.bin_dir / "kubelet"),
                f"--config={configs['kubelet']}",
                f"--kubeconfig={self.kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={node_ip()}",
                f"--node-labels={NODE_LABEL}=real",
                "--root-dir=/var/lib/kubelet",
                "--v=1",
            ]
        return [str(self.bin_dir / "coredns"), "-conf", str(configs["coredns"])]

    def _cgroup_root(self) -> str:
        """A cgroup for the kubelet's pods under this container's own (cgroup v1, host cgroup namespace).

        Several node containers on one machine then never share a pod hierarchy, and removing the container
        leaves nothing of theirs at the top. Created in every hierarchy (cpuset needs its cpus and mems set).
        """
        own = "/"
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                own = path
        root = f"{own.rstrip('/')}/kubelet"
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            if not hierarchy.is_dir() or hierarchy.is_symlink() or hierarchy.name == "unified":
                continue
            target = hierarchy / root.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (target / knob).read_text().strip():
                        (target / knob).write_text((target.parent / knob).read_text())
        return root

    def start(self, timeout: float = 180) -> None:
        for key, value in (("net.ipv4.ip_forward", "1"), ("net.bridge.bridge-nf-call-iptables", "1")):
            with contextlib.suppress(OSError):
                Path("/proc/sys", *key.split(".")).write_text(value)
        # volumes of pods are mounted under /var/lib/kubelet and must propagate into their containers
        subprocess.run(["mount", "--make-rshared", "/"], check=True, env=child_env())
        machine_id = Path("/etc/machine-id")
        if not machine_id.exists():  # the kubelet reports it as the node's system UUID
            machine_id.write_text(uuid.uuid4().hex + "\n")
        self._configs = self._write_configs(self._cgroup_root())
        self._start_containerd()
        if (
            self.containerd.delete_containers()
        ):  # its CRI plugin loaded them at its start: a new one forgets them
            self._terminate("containerd")
            self._start_containerd()
        self.containerd.import_archive(
            binary_archive(self.state_dir / "pause.tar", self.bin_dir / "pause", PAUSE_IMAGE)
        )
        self._spawn("coredns", self._argv("coredns", self._configs))
        self._spawn("kubelet", self._argv("kubelet", self._configs))
        _wait(self._dns_ready, 60, "CoreDNS", self)
        _wait(self._node_ready, timeout, f"node {NODE_NAME} Ready", self)
        self._advertise_ephemeral_storage()

    def _start_containerd(self) -> None:
        self._spawn("containerd", self._argv("containerd", self._configs))
        _wait(self.containerd.answers, 60, "containerd", self)

    @staticmethod
    def route_api_service(cluster_ip: str, api_port: int) -> None:
        """Pods reach the ``kubernetes`` Service (``cluster_ip``:443) at the API server of this node, as
        kube-proxy would route it (the API server's certificate must name ``cluster_ip``)."""
        rule = ["PREROUTING", "-d", f"{cluster_ip}/32", "-p", "tcp", "--dport", "443", "-j", "DNAT",
                "--to-destination", f"{node_ip()}:{api_port}"]  # fmt: skip
        if (
            subprocess.run(
                ["iptables", "-t", "nat", "-C", *rule], capture_output=True, env=child_env()
            ).returncode
            != 0
        ):
            subprocess.run(
                ["iptables", "-t", "nat", "-A", *rule], check=True, capture_output=True, env=child_env()
            )

    def supervise(self) -> list[str]:
        """Restart any node process that exited (what systemd does on a node); returns their names."""
        restarted = []
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None:
                self._spawn(name, self._argv(name, self._configs))
                restarted.append(f"{name} (exit {proc.returncode})")
        return restarted

    def stop(self) -> None:
        """Stop kubelet, then every pod's containers, then containerd and CoreDNS."""
        self._terminate("kubelet")
        if "containerd" in self.procs and self.procs["containerd"].poll() is None:
            self.containerd.kill_tasks()
        for name in ("coredns", "containerd"):
            self._terminate(name)

    def _terminate(self, name: str, timeout: float = 20) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ------------------------------------------------------------------ readiness
    @staticmethod
    def _dns_ready() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", 8181), timeout=1) as s:
            s.sendall(b"GET /ready HTTP/1.0\r\n\r\n")
            return s.recv(64).split(b" ")[1] == b"200"
        return False

    def _node_ready(self) -> bool:
        from kubernetes import client, config

        if self._core is None:  # one client for all the polls
            self._core = client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))
        try:
            node = self._core.read_node(NODE_NAME)
        except client.exceptions.ApiException:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def _advertise_ephemeral_storage(self) -> None:
        """Give the Node the ``ephemeral-storage`` capacity of the disk under /var/lib/kubelet.

        The kubelet runs with ``localStorageCapacityIsolation: false`` (cAdvisor finds no filesystem info for the
        container's disk, so it could not measure it) and then reports no ephemeral storage, which leaves every
        pod requesting some unschedulable: the training-operator's v1 launchers ask 5Gi for their
        ``kubectl-delivery`` init container. A capacity patched into the Node's status stays (that kubelet never
        sets this one) and becomes allocatable, as documented for advertising node resources; nothing is
        evicted for using it."""
        st = os.statvfs("/var/lib/kubelet")
        size = str(st.f_blocks * st.f_frsize)
        assert self._core is not None  # made by _node_ready
        self._core.patch_node_status(NODE_NAME, {"status": {"capacity": {"ephemeral-storage": size}}})

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]


def _wait(predicate, timeout: float, what: str, node: RealNode, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if node.dead():
            raise NodeError(f"{', '.join(node.dead())} exited while waiting for {what}; see {node.logs_dir}")
        time.sleep(interval)
    raise NodeError(f"timed out after {timeout:.0f}s waiting for {what}; see {node.logs_dir}")
