"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from airflow_mpi import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-mpi",
        "name": "Kubeflow MPIJob",
        "description": "Run Kubeflow MPIJobs (Open MPI, Intel MPI, MPICH, Horovod) on Kubernetes.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Kubeflow MPIJob",
                "external-doc-url": "https://github.com/kubeflow/mpi-operator",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Kubeflow MPIJob",
                "python-modules": [
                    "airflow_mpi.operators.mpijob",
                    "airflow_mpi.operators.horovod",
                    "airflow_mpi.operators.trainjob",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Kubeflow MPIJob", "python-modules": ["airflow_mpi.sensors.mpijob"]}
        ],
        "hooks": [{"integration-name": "Kubeflow MPIJob", "python-modules": ["airflow_mpi.hooks.mpijob"]}],
        "triggers": [
            {"integration-name": "Kubeflow MPIJob", "python-modules": ["airflow_mpi.triggers.mpijob"]}
        ],
        "task-decorators": [
            {"class-name": "airflow_mpi.decorators.mpi.mpi_task", "name": "mpi"},
            {"class-name": "airflow_mpi.decorators.horovod.horovod_task", "name": "horovod"},
        ],
        "extra-links": [
            "airflow_mpi.operators.links.MPIJobLink",
            "airflow_mpi.operators.links.MPIJobLauncherPodLink",
            "airflow_mpi.operators.links.MPIJobLogsLink",
            "airflow_mpi.operators.links.TrainJobLink",
            "airflow_mpi.operators.links.TrainJobLauncherPodLink",
            "airflow_mpi.operators.links.TrainJobLogsLink",
        ],
        "connection-types": [
            {"hook-class-name": "airflow_mpi.hooks.mpijob.MPIJobHook", "connection-type": "kubernetes_mpijob"}
        ],
    }
