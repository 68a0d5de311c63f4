"""The demo behind ``scripts/demo``: cluster + Airflow, trigger ``mpi_pi``, follow it, print its log, clean up.

python -m airflowstack.demo [--kubeconfig PATH] [--namespace NS] [--workers N] [--keep-running] [--dag trainjob_pi]

``--dag trainjob_pi`` runs the TrainJob example instead: the local node then runs Kubeflow Trainer and JobSet too
(about 8 s more to start; the default demo starts neither) with the runtime of deploy/trainjob-mpi-runtime.yaml.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
from pathlib import Path

from airflowstack import kube
from airflowstack._proc import StackError
from airflowstack.stack import AirflowStack
from airflowstack.trainer_runtime import TRAINER_CONTROLLERS, apply_runtime
from localcluster.mpi_images import MPI_IMAGES as IMAGES  # images/mpi targets -> tags

REPO = Path(__file__).resolve().parents[1]
DAG = "mpi_pi"
TRAINJOB_DAG = "trainjob_pi"  # needs Kubeflow Trainer: the local node runs it only for this DAG
PREFERRED_PORT = 28080  # not 8080: the compose stack's UI (docker-compose.yaml) may be running beside it
IMPLEMENTATIONS = {"openmpi": "OpenMPI", "mpich": "MPICH", "intel": "Intel"}


def say(msg: str = "") -> None:
    print(msg, flush=True)


def _port() -> int | None:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", PREFERRED_PORT))
        except OSError:
            return None  # AirflowStack picks a free one
    return PREFERRED_PORT


def _interrupt(*_args) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--kubeconfig",
        default=kube.env_kubeconfig(),
        help="run against this (real) cluster instead of the local one; it needs the Kubeflow "
        "mpi-operator (kubeflow.org/v2beta1). Default: $AIRFLOW_MPI_KUBECONFIG",
    )
    p.add_argument(
        "--simulated",
        action="store_true",
        help="use the local cluster with simulated (kwok) nodes instead of the real node: no container "
        "runs and the launcher's log is scripted (starts in seconds, needs no Docker)",
    )
    p.add_argument(
        "--dag",
        choices=(DAG, TRAINJOB_DAG),
        default=DAG,
        help=f"the example DAG to run: {DAG} (an MPIJob) or {TRAINJOB_DAG} (a Kubeflow Trainer TrainJob of the "
        "runtime openmpi-mpiuser; Open MPI only; the local node runs Trainer and JobSet for it, a --kubeconfig "
        "cluster must run them and hold the runtime: kubectl apply -f deploy/trainjob-mpi-runtime.yaml)",
    )
    p.add_argument(
        "--implementation",
        choices=sorted(IMAGES),
        default="openmpi",
        help="MPI of the image the real node runs (images/mpi)",
    )
    p.add_argument(
        "--namespace", default="airflow-mpi-demo", help="namespace of the MPIJobs (created if missing)"
    )
    p.add_argument(
        "--workers", type=int, default=2, help="workers of the mpi_pi run (the Param's bounds apply)"
    )
    p.add_argument("--slots-per-worker", type=int, default=1)
    p.add_argument("--deferrable", action="store_true", help="wait for the job in the triggerer")
    p.add_argument(
        "--keep-running",
        action="store_true",
        help="leave cluster and Airflow running after the run (until Ctrl-C) to explore the UI",
    )
    p.add_argument(
        "--home",
        default=str(REPO / ".artifacts" / "demo" / "airflow-home"),
        help="AIRFLOW_HOME (service and task logs stay there)",
    )
    args = p.parse_args(argv)
    if args.dag == TRAINJOB_DAG and args.simulated:
        p.error(f"--dag {TRAINJOB_DAG} runs on the real node or a --kubeconfig cluster, not --simulated")
    if args.dag == TRAINJOB_DAG and args.implementation != "openmpi":
        p.error(f"--dag {TRAINJOB_DAG}: Kubeflow Trainer v2.3.0 runs Open MPI only")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    real = bool(args.kubeconfig)
    local_node = not real and not args.simulated
    if real:
        say(f"Cluster: {args.kubeconfig} (a real cluster; it must run the Kubeflow mpi-operator).")
    elif local_node:
        say(
            "Cluster: a local Kubernetes built from upstream sources (etcd, kube-apiserver, controller-manager, "
            "scheduler, the real mpi-operator)\n"
            "         with one REAL node (containerd, kubelet, CoreDNS) in a Docker container: the launcher and "
            "workers are containers,\n"
            f"         the ranks are real MPI processes of {IMAGES[args.implementation]} (built from images/mpi).\n"
            "         Real cluster instead: scripts/demo --kubeconfig /path/to/kubeconfig "
            "(or AIRFLOW_MPI_KUBECONFIG=...)."
        )
    else:
        say(
            "Cluster: a local Kubernetes whose NODES ARE SIMULATED (kwok): pods go through their phases, but no "
            "container runs;\n         the launcher's log lines are served by the simulation."
        )
    cluster = kube.open_cluster(
        kubeconfig=args.kubeconfig,
        name="airflow-mpi-demo",
        real_node=local_node,
        mpi_targets=(args.implementation,),
        controllers=TRAINER_CONTROLLERS if args.dag == TRAINJOB_DAG else (),
    )
    extra_env = {"AIRFLOW_MPI_PI_IMAGE": IMAGES[args.implementation]} if local_node else {}
    stack = AirflowStack(
        REPO / "dags",
        home=args.home,
        kubeconfig=cluster.kubeconfig,
        namespace=args.namespace,
        port=_port(),
        extra_env=extra_env,
    )
    args.mpi_implementation = IMPLEMENTATIONS[args.implementation] if local_node else None
    t0 = time.monotonic()
    starting = kube.Starting(cluster)
    try:
        say("Starting PostgreSQL and Airflow (api-server, scheduler, dag-processor, triggerer) ...")
        stack.start()
        say(
            f"Airflow is up ({time.monotonic() - t0:.0f}s). UI: {stack.base_url}  "
            f"login: {stack.username} / {stack.password}"
        )
        if not real:
            say("Waiting for the local cluster ...")
        starting.wait()
        if local_node and args.dag == TRAINJOB_DAG:
            apply_runtime(cluster.api_client())
        cluster.ensure_namespace(args.namespace)
        np = args.workers * args.slots_per_worker
        cluster.serve_launcher_logs(args.namespace, kube.pi_output(np))
        say(f"Cluster is ready ({time.monotonic() - t0:.0f}s); jobs go to namespace {args.namespace}.")
        run_demo(stack, args)
        if args.keep_running:
            say(f"\nUI: {stack.base_url}/dags/{args.dag}  login: {stack.username} / {stack.password}")
            say("Everything keeps running: press Ctrl-C to stop.")
            while True:
                stack.check_alive()
                time.sleep(2)
        say(f"\n(scripts/demo --keep-running keeps the UI at {stack.base_url} open after the run)")
        return 0
    except KeyboardInterrupt:
        say("\nInterrupted.")
        return 130
    except StackError as exc:
        say(f"\nerror: {exc}")
        say(f"service logs: {stack.log_dir}")
        return 1
    finally:
        say("Shutting down Airflow, PostgreSQL" + ("" if real else " and the local cluster") + " ...")
        # a second Ctrl-C must not leave half of it running
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
        if starting.is_alive():
            say("(waiting for the cluster to finish starting, to stop it cleanly)")
            starting.join()
        cluster.stop()
        say(f"Stopped. Logs: {stack.home}")


def run_demo(stack: AirflowStack, args: argparse.Namespace) -> None:
    dag = args.dag
    client = stack.client()
    client.wait_for_dags([dag], timeout=180)
    conf = {"workers": args.workers, "slots_per_worker": args.slots_per_worker, "deferrable": args.deferrable}
    if args.mpi_implementation and dag != TRAINJOB_DAG:  # trainjob_pi's runtime names its image (Open MPI)
        conf["mpi_implementation"] = args.mpi_implementation
    run = client.trigger(dag, conf)
    run_id = run["dag_run_id"]
    say(f"\nTriggered {dag} with conf {json.dumps(conf)}: run {run_id}")
    last: dict[str, str] = {}
    deadline = time.monotonic() + 600
    while True:
        states = {ti["task_id"]: ti["state"] for ti in client.task_instances(dag, run_id)}
        for task_id, state in sorted(states.items()):
            if state and last.get(task_id) != state:
                say(f"  {time.strftime('%H:%M:%S')}  {task_id}: {state}")
        last = states
        dag_run = client.dag_run(dag, run_id)
        if dag_run["state"] in ("success", "failed"):
            break
        if time.monotonic() > deadline:
            raise StackError(f"{dag} run {run_id} did not finish within 10 minutes")
        time.sleep(1)
    say(f"Run {dag_run['state'].upper()}.")
    events = client.task_log_events(dag, run_id, "pi")
    say("\n--- task 'pi' log (excerpt) " + "-" * 40)
    for line in excerpt(events):
        say(f"  {line}")
    say("-" * 68)
    if dag_run["state"] == "success":
        say(f"XCom of 'report': {json.dumps(client.xcom(dag, run_id, 'report'))}")
    else:
        raise StackError(f"{dag} failed; full log: {stack.home / 'logs'}")


def excerpt(events: list[str], tail: int = 30) -> list[str]:
    """From the submission on: the launcher's output and the outcome (multi-line events such as the manifest
    are shown by their first line)."""
    lines = [e.splitlines()[0] + (" [...]" if "\n" in e.strip() else "") for e in events if e.strip()]
    lines = [line for line in lines if not line.startswith("::")]
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if line.startswith(("Created MPIJob", "Created TrainJob", "Reattaching"))
        ),
        0,
    )
    return lines[start:][-tail:]


if __name__ == "__main__":
    sys.exit(main())
