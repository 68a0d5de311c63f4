"""Operators. Importing this package must not import the Kubernetes clients (DAG parse time)."""

from airflow_mpi.operators.horovod import HorovodJobOperator
from airflow_mpi.operators.mpijob import MPIJobOperator

__all__ = ["HorovodJobOperator", "MPIJobOperator"]
