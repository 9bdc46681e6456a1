/*
 * mpi_stress: collectives and exchanges from 1 B to 1 MiB for a while,
 * timing every call, for scripts/middleware.sh's `stress` (issue 41: no
 * datagram lost between the ranks of one device).
 *
 *   mpi_stress [SECONDS]   (default 60)
 *
 * Each pass runs, for n = 1 B, 64 B, 4 KiB, 64 KiB and 1 MiB per rank:
 * MPI_Allreduce (sum of longs), MPI_Alltoall and MPI_Sendrecv around the
 * ring, checking every result. Rank 0 prints one line per operation and
 * size: calls, mean and max time per call (max over the ranks), then
 * "mpi_stress: OK (N ranks, P passes)".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define FAIL(...) do { fprintf(stderr, "mpi_stress rank %d: ", rank); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

enum { OPS = 3, SIZES = 5 };
static const char *op_name[OPS] = { "allreduce", "alltoall", "sendrecv" };
static const size_t sizes[SIZES] = { 1, 64, 4096, 65536, 1 << 20 };

struct stat { double sum, max; long calls; };
static struct stat st[OPS][SIZES];

static void note(int op, int s, double t)
{
	st[op][s].sum += t;
	st[op][s].calls++;
	if (t > st[op][s].max)
		st[op][s].max = t;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	double seconds = argc > 1 ? atof(argv[1]) : 60;
	size_t max = sizes[SIZES - 1];
	unsigned char *a = malloc(max * size), *b = malloc(max * size);
	long *la = malloc(max), *lb = malloc(max);
	if (!a || !b || !la || !lb)
		FAIL("malloc");
	double start = MPI_Wtime();
	long passes = 0;
	int go = 1;
	while (go) {
		for (int s = 0; s < SIZES; s++) {
			size_t n = sizes[s];
			/* allreduce of n bytes of longs (at least one) */
			size_t nl = n / sizeof(long) ? n / sizeof(long) : 1;
			for (size_t i = 0; i < nl; i++)
				la[i] = (long)(rank + 1) * (long)(i + passes);
			double t0 = MPI_Wtime();
			MPI_Allreduce(la, lb, (int)nl, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
			note(0, s, MPI_Wtime() - t0);
			long ranks = (long)size * (size + 1) / 2;
			for (size_t i = 0; i < nl; i++)
				if (lb[i] != ranks * (long)(i + passes))
					FAIL("allreduce %zu B: element %zu is %ld", n, i, lb[i]);
			/* alltoall: block j of rank r carries (r, j) */
			for (int j = 0; j < size; j++)
				memset(a + (size_t)j * n, (rank * 16 + j + (int)passes) & 0xff, n);
			t0 = MPI_Wtime();
			MPI_Alltoall(a, (int)n, MPI_BYTE, b, (int)n, MPI_BYTE, MPI_COMM_WORLD);
			note(1, s, MPI_Wtime() - t0);
			for (int j = 0; j < size; j++) {
				unsigned char want = (unsigned char)((j * 16 + rank + (int)passes) & 0xff);
				for (size_t i = 0; i < n; i++)
					if (b[(size_t)j * n + i] != want)
						FAIL("alltoall %zu B: from rank %d byte %zu", n, j, i);
			}
			/* sendrecv around the ring */
			int to = (rank + 1) % size, from = (rank + size - 1) % size;
			memset(a, (rank + (int)passes) & 0xff, n);
			t0 = MPI_Wtime();
			MPI_Sendrecv(a, (int)n, MPI_BYTE, to, s, b, (int)n, MPI_BYTE, from, s,
				     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			note(2, s, MPI_Wtime() - t0);
			for (size_t i = 0; i < n; i++)
				if (b[i] != (unsigned char)((from + (int)passes) & 0xff))
					FAIL("sendrecv %zu B: byte %zu", n, i);
		}
		passes++;
		/* every rank stops after the same pass */
		int more = MPI_Wtime() - start < seconds;
		MPI_Allreduce(&more, &go, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	}
	for (int op = 0; op < OPS; op++)
		for (int s = 0; s < SIZES; s++) {
			double mx, sum;
			MPI_Reduce(&st[op][s].max, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
			MPI_Reduce(&st[op][s].sum, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
			if (rank == 0)
				printf("%-9s %8zu B  %6ld calls  mean %9.1f us  max %9.1f us\n", op_name[op],
				       sizes[s], st[op][s].calls, 1e6 * sum / size / st[op][s].calls, 1e6 * mx);
		}
	if (rank == 0)
		printf("mpi_stress: OK (%d ranks, %ld passes)\n", size, passes);
	free(a);
	free(b);
	free(la);
	free(lb);
	MPI_Finalize();
	return 0;
}
