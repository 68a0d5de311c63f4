"""A throw-away S3-compatible server (moto's server mode, from PyPI) on a free loopback port, and the Airflow settings
that send task and trigger logs to it (remote logging through the Amazon provider's S3 task handler).

    with S3Server(log_dir=tmp) as s3:
        s3.create_bucket("airflow-logs")
        stack = AirflowStack(..., extra_env=s3.remote_logging_env("s3://airflow-logs/logs"))

moto keeps everything in memory: stopping the server drops every bucket.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from airflowstack._proc import Service, start_on_free_port

#: the Airflow connection that remote logging uses (``[logging] remote_log_conn_id``)
CONN_ID = "remote_logs_s3"
REGION = "us-east-1"
# moto accepts any credentials; boto3 wants some (and must not find a real profile of the machine)
ACCESS_KEY, SECRET_KEY = "testing", "testing"


class S3Server:
    def __init__(
        self,
        *,
        log_dir: str | os.PathLike,
        python: str | None = None,
        host: str = "127.0.0.1",
        start_timeout: float = 60,
    ):
        self.python = python or sys.executable  # moto is installed beside the tests (scripts/bootstrap)
        self.host = host
        self.log_dir = Path(log_dir)
        self.start_timeout = start_timeout
        self.port: int | None = None
        self.service: Service | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self):
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> S3Server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

        def start(port: int) -> Service:
            self.port = port
            return Service(
                "s3",
                [self.python, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                env=env,
                log_path=self.log_dir / "s3.log",
                stop_timeout=10,
            ).start()

        self.service = start_on_free_port(
            "the S3 server", self.host, start, self._ready, timeout=self.start_timeout
        )
        return self

    def _ready(self) -> bool:
        self.client().list_buckets()
        return True

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- buckets and objects -------------------------------------------------------------------------------------
    def create_bucket(self, bucket: str) -> None:
        self.client().create_bucket(Bucket=bucket)

    def keys(self, bucket: str, prefix: str = "") -> Iterator[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for item in page.get("Contents", []):
                yield item["Key"]

    def read(self, bucket: str, key: str) -> str:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read().decode()

    # -- Airflow -------------------------------------------------------------------------------------------------
    def connection(self) -> str:
        """The ``aws`` connection (JSON form of ``AIRFLOW_CONN_<ID>``) whose endpoint is this server."""
        return json.dumps(
            {
                "conn_type": "aws",
                "login": ACCESS_KEY,
                "password": SECRET_KEY,
                "extra": {"endpoint_url": self.endpoint_url, "region_name": REGION},
            }
        )

    def remote_logging_env(
        self, remote_base_log_folder: str, delete_local_logs: bool = False
    ) -> dict[str, str]:
        """Environment for every Airflow service: task and trigger logs go to ``remote_base_log_folder``
        (``s3://bucket/prefix``) through the Amazon provider's S3 task handler, which uploads a log when its
        writer ends (a task process, a trigger) and reads it back for the API server."""
        if not remote_base_log_folder.startswith("s3://"):
            raise ValueError(f"an s3:// folder, not {remote_base_log_folder!r}")
        return {
            "AIRFLOW__LOGGING__REMOTE_LOGGING": "True",
            "AIRFLOW__LOGGING__REMOTE_BASE_LOG_FOLDER": remote_base_log_folder,
            "AIRFLOW__LOGGING__REMOTE_LOG_CONN_ID": CONN_ID,
            "AIRFLOW__LOGGING__DELETE_LOCAL_LOGS": str(delete_local_logs),
            f"AIRFLOW_CONN_{CONN_ID.upper()}": self.connection(),
        }
