/* Monte Carlo estimate of pi over every MPI rank: each rank samples its own points, rank 0 sums the hits.
 * Prints one line per rank (rank, size, host) so a test can see which pod each rank ran on.
 * Usage: pi [samples per rank, default 2000000] [hold seconds, default 0]. A hold keeps every rank (and so the job,
 * its pods and its quota) running that long after its line, asleep: a job that stays running without using CPU,
 * to try a kill, a retry or a queue, where sampling would busy the node's cores for as long. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    long long samples = argc > 1 ? atoll(argv[1]) : 2000000, hits = 0, total = 0;
    int held = argc > 2 ? atoi(argv[2]) : 0;
    unsigned int hold = held > 0 ? (unsigned int)held : 0;
    unsigned int seed;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    printf("rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);
    while (hold > 0)
        hold = sleep(hold); /* the rest, if a signal cut it short */

    seed = 12345u + 7919u * (unsigned int)rank;
    for (long long i = 0; i < samples; i++) {
        double x = rand_r(&seed) / (double)RAND_MAX, y = rand_r(&seed) / (double)RAND_MAX;
        hits += x * x + y * y <= 1.0;
    }
    MPI_Reduce(&hits, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("pi is approximately %.8f (%d ranks x %lld samples)\n", 4.0 * total / ((double)samples * size), size, samples);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
