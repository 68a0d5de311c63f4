module airflow-mpi.localcluster/pause

go 1.25.0
