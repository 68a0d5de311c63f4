"""Dev-only harness (not installed with the provider): PostgreSQL + Airflow 3 services for e2e tests and the demo;
an S3-compatible server for remote logging."""

from airflowstack._proc import Background, Service, StackError, free_port, wait_until
from airflowstack.client import AirflowClient, ApiError, heartbeat_age
from airflowstack.postgres import Postgres
from airflowstack.s3 import S3Server
from airflowstack.stack import AirflowStack, kubernetes_connection

__all__ = [
    "AirflowClient",
    "AirflowStack",
    "ApiError",
    "Background",
    "Postgres",
    "S3Server",
    "Service",
    "StackError",
    "free_port",
    "heartbeat_age",
    "kubernetes_connection",
    "wait_until",
]
