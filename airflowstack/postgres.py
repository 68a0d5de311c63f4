"""A throw-away PostgreSQL server (Debian's binaries) on a free loopback port.

PostgreSQL refuses to run as root: when we are root, initdb and the server run as the ``postgres`` user through
``runuser`` and the data directory is handed to that user; otherwise they run as the current user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from airflowstack._proc import Service, StackError, run, start_on_free_port
from localcluster.processes import child_env


def find_pg_bin() -> Path:
    """The directory of ``initdb``/``postgres``: $PG_BIN, else the newest /usr/lib/postgresql/*/bin, else PATH."""
    if env := os.environ.get("PG_BIN"):
        return Path(env)
    candidates = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if Path(p).parent.name.isdigit()]
    if candidates:
        return max(candidates, key=lambda p: int(p.parent.name))
    if found := shutil.which("initdb"):
        return Path(found).parent
    raise StackError("PostgreSQL binaries not found: install the Debian package postgresql (or set PG_BIN)")


class Postgres:
    """``with Postgres() as pg: pg.url("airflow")``; the data directory is removed on stop unless ``keep_data``."""

    def __init__(
        self,
        base_dir: str | os.PathLike | None = None,
        *,
        user: str = "postgres",
        keep_data: bool = False,
        log_dir: str | os.PathLike | None = None,
        start_timeout: float = 60,
    ):
        self.pg_bin = find_pg_bin()
        self.as_root = os.geteuid() == 0
        self.run_user = user if self.as_root else None
        # Under root the server's user must be able to reach the data directory: a fresh mkdtemp in the system
        # temp folder (sticky, world-traversable) works whatever folder the caller uses for everything else.
        parent = Path(base_dir) if base_dir and not self.as_root else Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        self.base = Path(tempfile.mkdtemp(prefix="airflowstack-pg-", dir=parent))
        self.data_dir = self.base / "data"
        self.log_dir = Path(log_dir) if log_dir else self.base
        self.keep_data = keep_data
        self.start_timeout = start_timeout
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.service: Service | None = None

    # -- helpers -------------------------------------------------------------------------------------------------
    def _as_user(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", self.run_user, "--", *argv] if self.run_user else argv

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8")
        return env

    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg2") -> str:
        return f"{driver}://postgres@{self.host}:{self.port}/{database}"

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> Postgres:
        if self.run_user:
            pw = pwd.getpwnam(self.run_user)
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        os.chmod(self.base, 0o700)
        run(
            self._as_user(
                [
                    str(self.pg_bin / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "--no-instructions",
                ]
            ),
            env=self._env(),
            timeout=120,
            log_path=self.log_dir / "postgres-initdb.log",
            cwd="/",
        )

        def start(port: int) -> Service:
            self.port = port
            argv = self._as_user(
                [
                    str(self.pg_bin / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-h",
                    self.host,
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.base),
                    # a test database: durability is not wanted, speed is
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                    "-c",
                    "shared_buffers=64MB",
                ]
            )
            # SIGINT is PostgreSQL's "fast" shutdown (SIGTERM would wait for every client to disconnect)
            return Service(
                "postgres",
                argv,
                env=self._env(),
                log_path=self.log_dir / "postgres.log",
                stop_signal=signal.SIGINT,
                stop_timeout=20,
                cwd="/",
            ).start()

        self.service = start_on_free_port(
            "PostgreSQL", self.host, start, self._ready, timeout=self.start_timeout
        )
        return self

    def _ready(self) -> bool:
        argv = [str(self.pg_bin / "pg_isready"), "-h", self.host, "-p", str(self.port), "-U", "postgres"]
        return (
            subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                env=child_env(),
            ).returncode
            == 0
        )

    def create_database(self, name: str) -> str:
        run(
            [
                str(self.pg_bin / "psql"),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                f'CREATE DATABASE "{name}"',
            ],
            env=self._env(),
            timeout=60,
        )
        return self.url(name)

    def copy_database(self, source: Postgres, name: str, into: str) -> str:
        """A copy of ``source``'s database ``name`` as this server's database ``into`` (pg_dump, then psql: a backup
        restored elsewhere); its URL."""
        dump = self.base / f"{into}.sql"
        run(
            [
                str(source.pg_bin / "pg_dump"),
                "-h",
                source.host,
                "-p",
                str(source.port),
                "-U",
                "postgres",
                "--no-owner",
                "-f",
                str(dump),
                name,
            ],
            env=source._env(),
            timeout=120,
        )
        url = self.create_database(into)
        run(
            [
                str(self.pg_bin / "psql"),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-f",
                str(dump),
                into,
            ],
            env=self._env(),
            timeout=120,
        )
        return url

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None
        if not self.keep_data:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Postgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
