"""TaskFlow decorators: ``@task.mpi`` and ``@task.horovod`` (registered through get_provider_info's task-decorators)."""
