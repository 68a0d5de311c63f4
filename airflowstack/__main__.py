"""``python -m airflowstack up --dags dags [--kubeconfig PATH --namespace NS]``: run the stack until Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from airflowstack._proc import StackError
from airflowstack.stack import AirflowStack
from localcluster.processes import StopSignal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflowstack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start PostgreSQL + Airflow services in the foreground; Ctrl-C stops them")
    up.add_argument("--dags", default="dags", help="DAGs folder (default: dags)")
    up.add_argument("--home", default=None, help="AIRFLOW_HOME (default: a new temporary folder)")
    up.add_argument("--kubeconfig", default=None, help="kubeconfig for the kubernetes_default connection")
    up.add_argument("--namespace", default=None, help="namespace for the kubernetes_default connection")
    up.add_argument("--port", type=int, default=None, help="api-server port (default: a free one)")
    up.add_argument("--password", default="admin", help="password of the admin user (default: admin)")
    args = parser.parse_args(argv)

    stop = StopSignal()  # SIGTERM: stop the stack as Ctrl-C does
    stack = AirflowStack(
        args.dags,
        home=args.home,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        port=args.port,
        password=args.password,
    )
    try:
        stack.start()
        print(f"Airflow UI: {stack.base_url}  (login admin / {args.password})", flush=True)
        print(f"AIRFLOW_HOME: {stack.home}; service logs: {stack.log_dir}", flush=True)
        print("Ctrl-C stops everything.", flush=True)
        while not stop.wait(2):
            stack.check_alive()
    except KeyboardInterrupt:
        pass
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        print("stopping Airflow and PostgreSQL ...", flush=True)
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
