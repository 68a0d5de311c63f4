from airflow_mpi.sensors.mpijob import MPIJobSensor

__all__ = ["MPIJobSensor"]
