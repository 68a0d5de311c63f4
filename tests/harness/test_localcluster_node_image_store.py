"""A test session's node keeps its imported images for the next session's node (localcluster/node_image_store.py):
one containerd per store at a time, a store left by a killed session freed of its container first, the store never
removed with its node, and an image imported again only when Docker's image ID changed.

No Docker here: ``docker`` is a stand-in that records each call and answers as the real one does.
"""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from localcluster import node_container
from localcluster.node_image_store import SLOTS, ImageStore, has_image, images, normalized

# `ctr -n k8s.io images ls` on a node after `docker save airflow-mpi/mpi-pi:openmpi | ctr images import -` (real
# output, columns cut): the CRI plugin names the image by its config digest too, which is Docker's image ID
OPENMPI_ID = "sha256:60507c0123f9df794c4260725a7cb36e519c88e341602f7f78e47d1e991a5f93"
MANIFEST = "sha256:07c030d41d1aef8f591a71b0389b7010303911a49a018edc6fce2924915daf0d"
MEDIA = "application/vnd.docker.distribution.manifest.v2+json"
CRI = "io.cri-containerd.image=managed"
LISTING = "\n".join(
    [
        "REF TYPE DIGEST SIZE PLATFORMS LABELS",
        f"docker.io/airflow-mpi/mpi-pi:openmpi {MEDIA} {MANIFEST} 415.9 MiB linux/amd64 {CRI}",
        f"docker.io/airflow-mpi/pause:local {MEDIA} sha256:1733 1.4 MiB linux/amd64 {CRI}",
        f"{OPENMPI_ID} {MEDIA} {MANIFEST} 415.9 MiB linux/amd64 {CRI}",
    ]
)


class FakeDocker:
    """Records calls; ``ps -aq --filter volume=V`` answers the containers in ``on_volume[V]``."""

    def __init__(
        self, on_volume: dict[str, list[str]] | None = None, answers: dict[tuple, str] | None = None
    ):
        self.calls: list[tuple[str, ...]] = []
        self.on_volume = on_volume or {}
        self.answers = answers or {}

    def __call__(self, *args: str, check: bool = True, **kw) -> SimpleNamespace:
        self.calls.append(args)
        out = ""
        if args[:2] == ("ps", "-aq"):
            out = "\n".join(self.on_volume.get(args[3].removeprefix("volume="), []))
        for prefix, answer in self.answers.items():
            if args[: len(prefix)] == prefix:
                out = answer
        return SimpleNamespace(returncode=0, stdout=out, stderr="")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_MPI_CACHE", str(tmp_path / "cache"))


def test_docker_s_short_names_are_containerd_s_full_ones():
    assert normalized("airflow-mpi/mpi-pi:openmpi") == "docker.io/airflow-mpi/mpi-pi:openmpi"
    assert normalized("debian:bookworm-slim") == "docker.io/library/debian:bookworm-slim"
    assert normalized("localhost:5000/pi:1") == "localhost:5000/pi:1"
    assert normalized("images.example.test/team/pi:1") == "images.example.test/team/pi:1"


def test_an_image_is_held_only_as_the_same_docker_image():
    present = images(LISTING)
    assert present["docker.io/airflow-mpi/mpi-pi:openmpi"] == MANIFEST
    assert has_image(present, "airflow-mpi/mpi-pi:openmpi", OPENMPI_ID)
    rebuilt = "sha256:" + "1" * 64  # the tag now names another build: import it again
    assert not has_image(present, "airflow-mpi/mpi-pi:openmpi", rebuilt)
    assert not has_image(present, "airflow-mpi/mpi-pi:mpich", OPENMPI_ID)  # another tag of the same build
    assert not has_image(present, "airflow-mpi/mpi-pi:openmpi", "")  # no such image in Docker
    assert images("REF TYPE DIGEST SIZE PLATFORMS LABELS\n") == {}


def test_one_node_per_store_and_a_freed_store_is_taken_again():
    docker = FakeDocker()
    taken = [ImageStore.take("real-node", docker) for _ in range(SLOTS)]
    volumes = [store.volume for store in taken]
    assert len(set(volumes)) == SLOTS and all(
        v.startswith("airflow-mpi-node-images-real-node-") for v in volumes
    )
    assert (
        ImageStore.take("real-node", docker) is None
    )  # every slot in use: the node gets a volume of its own
    other = ImageStore.take("real-node-kueue", docker)
    assert other is not None and other.volume not in volumes
    taken[1].release()
    again = ImageStore.take("real-node", docker)
    assert again is not None and again.volume == volumes[1]
    creates = [c for c in docker.calls if c[:2] == ("volume", "create")]
    assert creates[0] == ("volume", "create", "--label", "airflow-mpi.node-image-store=real-node", volumes[0])
    assert not [c for c in docker.calls if c[:2] == ("rm", "-f")]


def test_a_store_left_by_a_killed_session_loses_that_session_s_container_first():
    probe = ImageStore.take("real-node", FakeDocker())
    volume = probe.volume
    probe.release()
    docker = FakeDocker(on_volume={volume: ["c0ffee", "deadbeef"]})
    store = ImageStore.take("real-node", docker)
    assert store.volume == volume
    removal = docker.calls.index(("rm", "-f", "c0ffee", "deadbeef"))
    assert removal < docker.calls.index(
        ("volume", "create", "--label", "airflow-mpi.node-image-store=real-node", volume)
    )


def _node_with(monkeypatch, docker: FakeDocker, **kw) -> node_container.NodeCluster:
    monkeypatch.setattr(node_container, "docker", docker)
    monkeypatch.setattr(node_container, "build_image", lambda: "airflow-mpi/kube:test")
    monkeypatch.setattr(node_container, "addon_mounts", lambda names: ({}, []))
    monkeypatch.setattr(node_container.NodeCluster, "_await_ready", lambda self, timeout: None)
    monkeypatch.setattr(node_container.NodeCluster, "_write_kubeconfig", lambda self: None)
    return node_container.NodeCluster("it-real-1", **kw)


def _mounts(call: tuple[str, ...]) -> list[str]:
    return [call[i + 1] for i, arg in enumerate(call) if arg == "-v"]


def test_a_node_runs_on_a_kept_store_and_leaves_it_behind(monkeypatch):
    docker = FakeDocker()
    node = _node_with(monkeypatch, docker, image_store="real-node").start()
    (run,) = [c for c in docker.calls if c[0] == "run"]
    containerd, kubelet = _mounts(run)
    assert containerd.startswith("airflow-mpi-node-images-real-node-0-") and containerd.endswith(
        ":/var/lib/containerd"
    )
    assert kubelet == "airflow-mpi-it-real-1-kubelet:/var/lib/kubelet"
    docker.calls.clear()
    node.remove()
    removed = [c for c in docker.calls if c[:2] == ("volume", "rm")]
    assert removed == [
        ("volume", "rm", "-f", "airflow-mpi-it-real-1-containerd", "airflow-mpi-it-real-1-kubelet")
    ]
    follower = _node_with(monkeypatch, FakeDocker(), image_store="real-node").start()  # the same store again
    assert follower._store.volume == containerd.split(":")[0]


def test_a_node_without_a_store_keeps_its_own_volumes(monkeypatch):
    docker = FakeDocker()
    _node_with(monkeypatch, docker).start()
    (run,) = [c for c in docker.calls if c[0] == "run"]
    assert _mounts(run) == [
        "airflow-mpi-it-real-1-containerd:/var/lib/containerd",
        "airflow-mpi-it-real-1-kubelet:/var/lib/kubelet",
    ]


def test_an_image_the_node_holds_is_not_saved_and_imported_again(monkeypatch):
    listing = ("exec", "airflow-mpi-it-real-1", "ctr", "-n", "k8s.io", "images", "ls")
    docker = FakeDocker(answers={listing: LISTING, ("image", "inspect"): OPENMPI_ID})
    node = _node_with(monkeypatch, docker, image_store="real-node")
    saves = []

    def popen(argv, **kw):
        saves.append(argv)
        raise RuntimeError("docker save")

    monkeypatch.setattr(subprocess, "Popen", popen)
    node.load_images(["airflow-mpi/mpi-pi:openmpi"])
    assert saves == []
    docker.answers[("image", "inspect")] = "sha256:" + "2" * 64  # rebuilt since the node imported it
    with pytest.raises(RuntimeError, match="docker save"):
        node.load_images(["airflow-mpi/mpi-pi:openmpi"])
    assert saves == [["docker", "save", "airflow-mpi/mpi-pi:openmpi"]]


def test_a_node_on_a_kept_store_deletes_the_containers_the_node_before_it_left(monkeypatch):
    """The node's containerd (inside the node container): containers in the store belong to pods of an earlier
    node's cluster; they are deleted, and reported so that containerd starts again with its CRI plugin forgetting
    them."""
    from localcluster.node_containerd import Containerd

    containerd = Containerd()
    store = {"c0ffee", "deadbeef"}
    calls = []

    def ctr(*args, stdin=None):
        calls.append(args)
        if args == ("containers", "list", "-q"):
            return SimpleNamespace(returncode=0, stdout="\n".join(sorted(store)), stderr="")
        if args[:2] == ("containers", "delete"):
            store.discard(args[2])
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(containerd, "ctr", ctr)
    assert containerd.delete_containers() is True
    assert store == set() and ("containers", "delete", "c0ffee") in calls
    assert (
        containerd.delete_containers() is False
    )  # a new store, or a clean one: containerd is not started again
