"""Airflow 3 services (api-server, scheduler, dag-processor, triggerer; LocalExecutor) on a throw-away PostgreSQL.

    with AirflowStack(dags_folder="dags", home=tmp, kubeconfig=path, namespace="default") as stack:
        client = stack.client()          # logged in as admin / stack.password
        client.trigger("mpi_pi", {...})

Every service runs in its own process group with its output in ``<home>/service-logs/<name>.log``; stop() sends
TERM to each group, waits, and KILLs what is left (the triggerer can hang in cleanup).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path

from airflowstack._proc import (
    Service,
    StackError,
    descendant_titled,
    free_port,
    group_cpu_seconds,
    group_members,
    open_paths,
    parent_pid,
    run,
    wait_until,
)
from airflowstack.client import AirflowClient
from airflowstack.postgres import Postgres

SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
# seconds a start may take in all, however busy its services are: ``start_timeout`` is the time they may spend
# without using any CPU (a cold machine's builds beside the tests starved an API server's start for 129 s)
START_BACKSTOP = 900
# the job a process of each heartbeating service records in the metadata database when it starts
JOB_TYPES = {"scheduler": "SchedulerJob", "triggerer": "TriggererJob", "dag-processor": "DagProcessorJob"}
# the log servers of a host's task processes and triggerer: a further process of a service needs ports of its own
LOG_SERVER_PORTS = ("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT")
# the checkout this harness belongs to: its airflow_mpi is what the services must load (an editable install
# of another checkout in the venv would otherwise win)
CHECKOUT = Path(__file__).resolve().parents[1]


def default_airflow_bin() -> str:
    """The ``airflow`` script of the running interpreter's environment (the venv), else the one on PATH."""
    candidate = Path(sys.executable).parent / "airflow"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("airflow")
    if not found:
        raise StackError("no `airflow` executable next to the interpreter or on PATH")
    return found


def kubernetes_connection(
    kubeconfig: str | os.PathLike,
    namespace: str | None = None,
    context: str | None = None,
    extras: Mapping[str, str] | None = None,
) -> str:
    """The ``AIRFLOW_CONN_KUBERNETES_DEFAULT`` JSON for a kubeconfig file (``extras``: more, e.g. link templates)."""
    extra: dict[str, str] = {**(extras or {}), "kube_config_path": str(kubeconfig)}
    if namespace:
        extra["namespace"] = namespace
    if context:
        extra["cluster_context"] = context
    return json.dumps({"conn_type": "kubernetes", "extra": extra})


class AirflowStack:
    def __init__(
        self,
        dags_folder: str | os.PathLike,
        *,
        home: str | os.PathLike | None = None,
        kubeconfig: str | os.PathLike | None = None,
        namespace: str | None = None,
        username: str = "admin",
        password: str = "admin",
        port: int | None = None,
        parallelism: int = 4,
        airflow_bin: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        service_kubeconfigs: Mapping[str, str | os.PathLike] | None = None,
        connection_extras: Mapping[str, str] | None = None,
        start_timeout: float = 120,
        keep_home: bool = True,
    ):
        self.dags_folder = Path(dags_folder).resolve()
        self._own_home = home is None
        self.home = Path(home) if home else Path(tempfile.mkdtemp(prefix="airflowstack-"))
        self.home.mkdir(parents=True, exist_ok=True)
        self.home = self.home.resolve()
        self.log_dir = self.home / "service-logs"
        self.kubeconfig = Path(kubeconfig).resolve() if kubeconfig else None
        self.namespace = namespace
        self.username = username
        self.password = password
        self.requested_port = port
        self.parallelism = parallelism
        self.airflow_bin = airflow_bin or default_airflow_bin()
        self.extra_env = dict(extra_env or {})
        # a service's own identity for ``kubernetes_default`` (e.g. the API server as the sweeper role); the
        # LocalExecutor's task processes are the scheduler's children and share its connection
        self.service_kubeconfigs = {k: Path(v) for k, v in (service_kubeconfigs or {}).items()}
        self.connection_extras = dict(connection_extras or {})  # in every service's kubernetes_default
        self.start_timeout = start_timeout
        self.keep_home = keep_home
        self.port: int | None = None
        self.postgres: Postgres | None = None
        self.services: dict[str, Service] = {}
        self.kinds: dict[
            str, str
        ] = {}  # each service's kind (one of SERVICES): itself, or what add_service copied
        self.env: dict[str, str] = {}
        self._clients: list[AirflowClient] = []

    # -- configuration -------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _build_env(self, db_url: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))
        }
        env.pop("AIRFLOW_HOME", None)
        # the services run from the venv: make sure its scripts (airflow, python) come first on PATH
        bin_dir = str(Path(self.airflow_bin).parent)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.username}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
                # the log servers default to fixed ports (8793/8794): free ones let several stacks run side by side
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                # pick up DAG files added while running within seconds instead of minutes
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                # no periodic re-parse of unchanged files (every 30 s by default: 5.9 CPU s a minute per idle stack
                # against 1.1 s, measured with the e2e DAG folder): a changed file is still parsed again at once
                # (the default `file_parsing_sort_mode`, modified_time, queues it by its mtime), a new one within
                # the refresh interval above
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
                # the stack migrates its database before any service starts (start(): `airflow db migrate`), as the
                # Helm chart's job does: a service's own check loads every migration script again (the four services'
                # starts: 18.1 CPU s with it, 16.7 without, on a quiet machine; 40-50 starts a test run)
                "AIRFLOW__DATABASE__CHECK_MIGRATIONS": "False",
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p),
            }
        )
        if self.kubeconfig:
            env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = kubernetes_connection(
                self.kubeconfig, self.namespace, extras=self.connection_extras
            )
        env.update(self.extra_env)
        return env

    @property
    def passwords_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> AirflowStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # a fixed password instead of the generated one
        self.passwords_file.write_text(json.dumps({self.username: self.password}))
        self.postgres = Postgres(log_dir=self.log_dir).start()
        db_url = self.postgres.create_database("airflow")
        self.port = self.requested_port or free_port()
        self.env = self._build_env(db_url)
        run(
            [self.airflow_bin, "db", "migrate"],
            env=self.env,
            timeout=300,
            log_path=self.log_dir / "db-migrate.log",
            cwd=self.home,
        )
        self._start_services()

    def _start_services(self) -> None:
        commands = {
            "api-server": [
                self.airflow_bin,
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            "scheduler": [self.airflow_bin, "scheduler"],
            "dag-processor": [self.airflow_bin, "dag-processor"],
            "triggerer": [self.airflow_bin, "triggerer"],
        }
        for name in SERVICES:
            env = self.env
            if name in self.service_kubeconfigs:
                env = {
                    **env,
                    "AIRFLOW_CONN_KUBERNETES_DEFAULT": kubernetes_connection(
                        self.service_kubeconfigs[name], self.namespace, extras=self.connection_extras
                    ),
                }
            self.services[name] = Service(
                name,
                commands[name],
                env=env,
                log_path=self.log_dir / f"{name}.log",
                cwd=self.home,
                stop_timeout=20,
            ).start()
            self.kinds[name] = name
        probe_client = AirflowClient(self.base_url, self.username, self.password, timeout=5)
        try:
            wait_until(
                lambda: probe_client.healthy() and probe_client.execution_api_ready(),
                timeout=self.start_timeout,
                interval=0.5,
                what=f"Airflow services to be healthy at {self.base_url}/api/v2/monitor/health and its execution API"
                " to answer",
                check=self.check_alive,
                progress=self._services_work,
                backstop=START_BACKSTOP,
            )
        finally:
            probe_client.close()

    def restart(self, env: Mapping[str, str]) -> None:
        """Kill every service and start them all again with ``env`` over their environment: e.g. another metadata
        database (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), a deployment restored from a copy of another's."""
        for service in self.services.values():
            service.kill()
        self.services.clear()
        self.kinds.clear()
        self.env.update(env)
        self._start_services()

    def stop_service(self, name: str, sig: int | None = None) -> None:
        """Stop one service (its whole process group): gracefully, or with ``sig`` (e.g. SIGKILL) at once."""
        service = self.services[name]
        if sig is None:
            service.stop()
        else:
            service.kill(sig)

    def start_service(self, name: str) -> None:
        """Start a stopped service again; for a heartbeating one, wait for the job its new process records (the
        heartbeat of that very process, also when another process of the same kind runs: add_service)."""
        from datetime import datetime

        started = datetime.now(UTC)
        self.services[name].start()
        self._await_start(name, started)

    def add_service(self, name: str, like: str, argv: Sequence[str] | None = None) -> None:
        """Start one more process of service ``like`` under ``name``, e.g. a second triggerer (Airflow's HA): the same
        command (or ``argv``: e.g. the service run through a wrapper) and environment (metadata database, log folder:
        the same host), its own service log, and log server ports of its own (two processes on one host cannot share
        one). stop() stops it with the others."""
        from datetime import datetime

        model = self.services[like]
        env = {**model.env, **{variable: str(free_port()) for variable in LOG_SERVER_PORTS}}
        self.services[name] = Service(
            name,
            list(argv) if argv is not None else model.argv,
            env=env,
            log_path=self.log_dir / f"{name}.log",
            cwd=self.home,
            stop_timeout=model.stop_timeout,
        )
        self.kinds[name] = self.kinds[like]
        started = datetime.now(UTC)
        self.services[name].start()
        self._await_start(name, started)

    def remove_service(self, name: str) -> None:
        """Kill a service added by add_service (SIGKILL: nothing of it is waited for) and forget it."""
        self.services.pop(name).kill()
        self.kinds.pop(name, None)

    def _await_start(self, name: str, started) -> None:
        probe_client = AirflowClient(self.base_url, self.username, self.password, timeout=5)
        job_type = JOB_TYPES.get(self.kinds[name])

        def up() -> bool:
            if job_type is None:  # the API server: answering, its execution API too
                return bool(probe_client.health()) and probe_client.execution_api_ready()
            return bool(probe_client.jobs(job_type, started_after=started))

        try:
            wait_until(
                up,
                timeout=self.start_timeout,
                interval=0.5,
                check=self.check_alive,
                what=f"{name} to start (its {job_type or 'health'})",
                progress=self._services_work,
                backstop=START_BACKSTOP,
            )
        finally:
            probe_client.close()

    def service_holding(self, suffix: str) -> str | None:
        """The running service one of whose processes has a file ending in ``suffix`` open: e.g. the triggerer
        running a trigger, which writes its log to ``<task log>.trigger.<its job id>.log``."""
        for name, service in self.services.items():
            if service.alive() and any(
                path.endswith(suffix) for pid in group_members(service.pid) for path in open_paths(pid)
            ):
                return name
        return None

    @property
    def database_url(self) -> str:
        """The metadata database's SQLAlchemy URL (what every service uses)."""
        return self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]

    @contextmanager
    def frozen(self, name: str) -> Iterator[None]:
        """Freeze a service's whole process group (SIGSTOP) inside the block, thaw it (SIGCONT) after: for a
        scheduler, nothing is scheduled meanwhile."""
        service = self.services[name]
        service.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            service.send_signal(signal.SIGCONT)

    def task_process(self, ti_id: str) -> int:
        """The pid of the process running task instance ``ti_id`` (its ``id`` in the REST API) under this stack's
        scheduler: the LocalExecutor's task runner titles itself "airflow worker -- <ti id>"."""
        scheduler = self.services["scheduler"].pid
        pid = descendant_titled(scheduler, f"airflow worker -- {ti_id}") if scheduler else None
        if pid is None:
            raise StackError(
                f"no task process of task instance {ti_id} under the scheduler (pid {scheduler})"
            )
        return pid

    def task_supervisor(self, ti_id: str) -> int:
        """The pid of the LocalExecutor worker supervising task instance ``ti_id``: the task process's parent, which
        heartbeats for the task and reports its end. Killed together with the task, nothing reports anything: the
        scheduler fails the task itself once its heartbeats are ``[scheduler] task_instance_heartbeat_timeout`` old
        (a worker host lost)."""
        supervisor = parent_pid(self.task_process(ti_id))
        if supervisor in (None, 0, 1, self.services["scheduler"].pid):
            raise StackError(
                f"task instance {ti_id} has no supervisor process of its own (parent {supervisor})"
            )
        return supervisor

    def _services_work(self) -> float:
        """The CPU seconds the services' process groups have used: a start is progressing while this grows."""
        return group_cpu_seconds({s.pid for s in self.services.values() if s.pid is not None})

    def check_alive(self) -> None:
        """Raise StackError (with the tail of its log) if a service has exited."""
        for service in self.services.values():
            service.check_alive()
        if self.postgres and self.postgres.service:
            self.postgres.service.check_alive()

    def client(self, timeout: float = 30) -> AirflowClient:
        c = AirflowClient(self.base_url, self.username, self.password, timeout=timeout)
        c.login()
        self._clients.append(c)
        return c

    def stop(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()
        # the api-server last: tasks still running report their end through the execution API
        api_server = self.services.pop("api-server", None)
        others = list(self.services.values())
        self.services.clear()
        if others:
            with ThreadPoolExecutor(len(others)) as pool:
                list(pool.map(Service.stop, others))
        if api_server is not None:
            api_server.stop()
        if self.postgres is not None:
            self.postgres.stop()
            self.postgres = None
        if self._own_home and not self.keep_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> AirflowStack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
