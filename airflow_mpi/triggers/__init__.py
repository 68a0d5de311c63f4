from airflow_mpi.triggers.mpijob import MPIJobTrigger

__all__ = ["MPIJobTrigger"]
