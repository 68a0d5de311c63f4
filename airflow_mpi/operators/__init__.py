"""Operators. Importing this package must not import the Kubernetes clients (DAG parse time)."""

from airflow_mpi.operators.callbacks import MPIJobCallbacks
from airflow_mpi.operators.horovod import HorovodCallbacks, HorovodJobOperator
from airflow_mpi.operators.mpijob import MPIJobOperator
from airflow_mpi.operators.trainjob import TrainJobOperator

__all__ = ["HorovodCallbacks", "HorovodJobOperator", "MPIJobCallbacks", "MPIJobOperator", "TrainJobOperator"]
