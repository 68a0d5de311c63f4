"""Apache Airflow provider for Kubeflow MPIJobs.

Kept import-light on purpose: DAG files import ``airflow_mpi.operators`` at parse
time, so nothing here may import the Kubernetes clients.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
