"""python -m localcluster {build,up,down,status,kubeconfig,list,switch-api,add-controller,node,serve}"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from . import build as _build
from . import component_keeper, go_deps
from .build_log import BuildFailed
from .cluster import API_VERSIONS, DEFAULT_NAME, ClusterError, LocalCluster, list_clusters
from .control_plane import ControlPlane
from .controllers import REGISTRY


def _names(known) -> dict:
    """A repeatable option naming one of ``known`` (controllers, add-ons) a time."""
    return {"action": "append", "default": [], "choices": sorted(known), "metavar": "NAME"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m localcluster",
        description="Local Kubernetes (real control plane, SIMULATED kwok nodes) + mpi-operator for airflow-mpi tests.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build and cache the binaries (no-op when cached)")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument(
        "--prune", action="store_true", help="delete other cached builds (not used by running clusters)"
    )
    b.add_argument(
        "--kueue",
        action="store_true",
        help="also build Kueue (otherwise built when a cluster first asks for it)",
    )
    b.add_argument(
        "--addon",
        **_names(_build.ADDONS),
        help="also build this add-on (repeatable; --kueue is --addon kueue)",
    )
    b.add_argument(
        "--addons-only",
        action="store_true",
        help="build only the add-ons named (the main build is another process's: scripts/test builds them beside it)",
    )
    gd = sub.add_parser(
        "go-deps",
        help="the Go modules' shared dependencies: list what is misaligned, or --align it (go mod edit)",
    )
    gd.add_argument(
        "--align", action="store_true", help="raise each to its group's newest version, go mod tidy"
    )
    up = sub.add_parser("up", help="start a cluster (replaces one of the same name)")
    up.add_argument("--name", default=DEFAULT_NAME)
    up.add_argument("--api-version", choices=API_VERSIONS, default="v2beta1")
    up.add_argument("--nodes", type=int, default=None)
    up.add_argument(
        "--kueue", action="store_true", help="also run Kueue with its queues (localcluster/kueue.py)"
    )
    up.add_argument(
        "--controller",
        **_names(REGISTRY),
        help=f"also run this controller (repeatable; one of {', '.join(sorted(REGISTRY))}); "
        "v2beta1 clusters run the mpi-operator anyway",
    )
    for name, help_ in (
        ("down", "stop a cluster and delete its data (component logs are kept)"),
        ("status", "show a cluster's state"),
        ("kubeconfig", "print the kubeconfig path"),
    ):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--name", default=DEFAULT_NAME)
    sub.add_parser("list", help="list clusters known in the cache")
    kp = sub.add_parser(
        "keep", help="restart a cluster's control-plane components that exit (run beside the cluster by `up`)"
    )
    kp.add_argument("--name", default=DEFAULT_NAME)
    sw = sub.add_parser(
        "switch-api",
        help="a running cluster serves the other MPIJob API from now on: its MPIJob CRD replaced (every MPIJob "
        "deleted), the controllers of that API started (the mpi-operator for v2beta1, --controller ones)",
    )
    sw.add_argument("--name", default=DEFAULT_NAME)
    sw.add_argument("--api-version", choices=API_VERSIONS, required=True)
    sw.add_argument("--controller", **_names(REGISTRY))
    ad = sub.add_parser(
        "add-controller",
        help="a running cluster starts these controllers too (and those they require), as a start would have",
    )
    ad.add_argument("--name", default=DEFAULT_NAME)
    ad.add_argument("--controller", **_names(REGISTRY), required=True)
    nd = sub.add_parser("node", help="a cluster with a REAL node, in a Docker container (images/kube)")
    nd.add_argument("action", choices=["up", "load", "down", "image", "mpi-images"])
    nd.add_argument(
        "images",
        nargs="*",
        help="load: local Docker images to copy into the node's containerd "
        "(default: the images of the default mpi-images targets); mpi-images: images/mpi targets to build "
        "(default: openmpi mpich intel, and openmpi-upstream mpich-upstream intel-upstream, which behave "
        "like the mpi-operator's own images; also: horovod)",
    )
    nd.add_argument("--name", default="real")
    nd.add_argument(
        "--api-version",
        choices=API_VERSIONS,
        default="v2beta1",
        help="up: v1 runs no controller unless told (--controller training-operator)",
    )
    nd.add_argument("--kwok-nodes", type=int, default=0, help="simulated nodes beside the real one")
    nd.add_argument(
        "--kueue", action="store_true", help="up: also run Kueue with its queues; image: as --compose"
    )
    nd.add_argument(
        "--compose",
        action="store_true",
        help="image: the compose stack's image, the builds of Kueue, JobSet and Kubeflow Trainer inside "
        "(tagged airflow-mpi/kube:local too)",
    )
    nd.add_argument(
        "--controller",
        **_names(REGISTRY),
        help="up: also run this controller (repeatable; an add-on's build is mounted into the node for it)",
    )
    nd.add_argument(
        "--addon",
        **_names(_build.ADDONS),
        help="up: also mount this add-on's build (repeatable; for a controller started later, e.g. by switch-api "
        "in the container); the node gets those of its controllers anyway",
    )
    sv = sub.add_parser(
        "serve", help="inside the node container (images/kube): control plane + a real node, until SIGTERM"
    )
    sv.add_argument("--api-version", choices=API_VERSIONS, default="v2beta1")
    sv.add_argument("--kwok-nodes", type=int, default=0, help="simulated nodes beside the real one")
    sv.add_argument(
        "--images-dir", default="/images", help="where exporter containers leave images to import"
    )
    sv.add_argument("--kubeconfig-out", default=None, help="write a kubeconfig for other containers here")
    sv.add_argument("--server", default="https://kube:6443", help="API address written into --kubeconfig-out")
    sv.add_argument(
        "--kueue", action="store_true", help="also run Kueue ($AIRFLOW_MPI_KUEUE_BIN_DIR: its build)"
    )
    sv.add_argument(
        "--controller",
        **_names(REGISTRY),
        help="also run this controller (repeatable; $AIRFLOW_MPI_<NAME>_BIN_DIR: its build)",
    )
    sv.add_argument(
        "--local-queue",
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="with --kueue: a LocalQueue user-queue in this namespace (created if missing); repeatable",
    )
    sv.add_argument(
        "--apply",
        action="append",
        default=[],
        metavar="FILE",
        help="kubectl apply -f FILE once the controllers run, before the cluster reports ready; repeatable",
    )
    sv.add_argument(
        "--container-log-max-size",
        default=None,
        metavar="QUANTITY",
        help="the kubelet's containerLogMaxSize (default: its own, 10Mi), e.g. 64Ki to rotate logs often",
    )
    args = p.parse_args(argv)

    try:
        if args.cmd == "build":
            t0 = time.monotonic()
            addons = sorted({*args.addon, *(["kueue"] if args.kueue else [])})
            if args.addons_only and not addons:
                p.error("--addons-only needs --kueue or --addon")
            if not args.addons_only:
                print(_build.build(force=args.force))
            for addon in addons:
                print(_build.build_addon(addon, force=args.force))
            versions = _build.pinned_versions(_build.modules(addons=bool(addons)))
            print(f"# {time.monotonic() - t0:.1f}s; versions: {json.dumps(versions)}", file=sys.stderr)
            if args.prune:
                for d in _build.prune():
                    print(f"# removed {d}", file=sys.stderr)
        elif args.cmd == "go-deps":
            if args.align:
                try:
                    for edit in go_deps.align(_build.go_binary(), _build.GO_DIR):
                        print(edit)
                except (RuntimeError, subprocess.CalledProcessError) as exc:  # go's own output is above it
                    print(f"error: {exc}", file=sys.stderr)
                    return 1
            left = go_deps.misaligned(_build.GO_DIR)
            for m in left:
                print(f"misaligned in {'/'.join(m.group)}: {m.dependency} {m.versions} (newest {m.newest})")
            return 1 if left else 0
        elif args.cmd == "up":
            kw = {} if args.nodes is None else {"nodes": args.nodes}
            c = LocalCluster(args.name, args.api_version, kueue=args.kueue, controllers=args.controller, **kw)
            c.start()
            print(c.kubeconfig_path)
            print(f"export KUBECONFIG={c.kubeconfig_path}")
        elif args.cmd == "down":
            LocalCluster(args.name).stop()
        elif args.cmd == "status":
            print(json.dumps(LocalCluster(args.name, verbose=False).status(), indent=2))
        elif args.cmd == "kubeconfig":
            c = LocalCluster(args.name, verbose=False)
            if not c.kubeconfig_path.exists():
                print(f"no running cluster named {args.name!r}", file=sys.stderr)
                return 1
            print(c.kubeconfig_path)
        elif args.cmd == "node":
            from . import node_container as nc
            from .mpi_images import DEFAULT_MPI_TARGETS, build_mpi_images
            from .node_image import COMPOSE_TAG, build_image, docker

            node = nc.NodeCluster(
                args.name,
                args.api_version,
                kwok_nodes=args.kwok_nodes,
                kueue=args.kueue,
                controllers=args.controller,
                addons=args.addon,
            )
            if args.action == "image":
                compose = args.compose or args.kueue
                tag = build_image(compose=compose)
                if compose:  # what docker-compose.yaml runs (it builds its own when that name is missing)
                    docker("tag", tag, COMPOSE_TAG)
                print(tag)
            elif args.action == "mpi-images":
                print("\n".join(build_mpi_images(args.images or DEFAULT_MPI_TARGETS)))
            elif args.action == "up":
                node.start()
                print(node.kubeconfig_path)
                print(f"export KUBECONFIG={node.kubeconfig_path}")
            elif args.action == "load":
                node.load_images(args.images or build_mpi_images())
            else:
                node.stop()
        elif args.cmd == "serve":
            from pathlib import Path

            from .serve import serve

            return serve(
                kwok_nodes=args.kwok_nodes,
                api_version=args.api_version,
                images_dir=Path(args.images_dir),
                kubeconfig_out=Path(args.kubeconfig_out) if args.kubeconfig_out else None,
                server=args.server,
                kueue=args.kueue,
                controllers=args.controller,
                local_queues=args.local_queue,
                apply=[Path(f) for f in args.apply],
                container_log_max_size=args.container_log_max_size,
            )
        elif args.cmd == "switch-api":
            LocalCluster.existing(args.name).switch_api(args.api_version, args.controller)
        elif args.cmd == "add-controller":
            LocalCluster.existing(args.name).add_controllers(args.controller)
        elif args.cmd == "keep":
            component_keeper.keep(ControlPlane(args.name, verbose=False))
        elif args.cmd == "list":
            for n in list_clusters():
                st = LocalCluster(n, verbose=False).read_state()
                print(f"{n}\t{st.get('api_version')}\t{st.get('phase')}")
    except (ClusterError, BuildFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
