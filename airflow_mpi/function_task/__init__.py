"""@task.mpi's payload: the function call shipped to the ranks, the program they run, rank 0's result."""
