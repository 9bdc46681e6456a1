/*
 * mpi_check: a small MPI program whose every result is checked, for
 * scripts/middleware.sh (Open MPI over roce-emu devices, `roce run`).
 *
 *   ping-pong between ranks 0 and 1, 1 B .. 4 MiB, each byte checked;
 *   MPI_Allreduce (sum) and MPI_Alltoall over all ranks;
 *   one-sided MPI_Put / MPI_Get in a fence epoch.
 *
 * Prints "mpi_check: OK (N ranks)" on rank 0 and exits 0, or names the
 * first wrong value and exits 1.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define FAIL(...) do { fprintf(stderr, "mpi_check rank %d: ", rank); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

static unsigned char pat(size_t i, int round) { return (unsigned char)(i * 7 + round * 13 + 1); }

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2)
		FAIL("needs at least 2 ranks");

	/* ping-pong 1 B .. 4 MiB between ranks 0 and 1 */
	size_t max = 4u << 20;
	unsigned char *buf = malloc(max);
	if (!buf)
		FAIL("malloc");
	int round = 0;
	for (size_t n = 1; n <= max; n *= 4, round++) {
		if (rank == 0) {
			for (size_t i = 0; i < n; i++)
				buf[i] = pat(i, round);
			MPI_Send(buf, (int)n, MPI_BYTE, 1, round, MPI_COMM_WORLD);
			memset(buf, 0, n);
			MPI_Recv(buf, (int)n, MPI_BYTE, 1, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (size_t i = 0; i < n; i++)
				if (buf[i] != (unsigned char)~pat(i, round))
					FAIL("ping-pong %zu B: byte %zu is %u", n, i, buf[i]);
		} else if (rank == 1) {
			MPI_Recv(buf, (int)n, MPI_BYTE, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (size_t i = 0; i < n; i++) {
				if (buf[i] != pat(i, round))
					FAIL("ping %zu B: byte %zu is %u", n, i, buf[i]);
				buf[i] = (unsigned char)~buf[i];
			}
			MPI_Send(buf, (int)n, MPI_BYTE, 0, round, MPI_COMM_WORLD);
		}
	}

	/* allreduce: sum of (rank + 1) * k over the ranks */
	long in[1024], out[1024];
	for (int k = 0; k < 1024; k++)
		in[k] = (long)(rank + 1) * k;
	MPI_Allreduce(in, out, 1024, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	long ranks_sum = (long)size * (size + 1) / 2;
	for (int k = 0; k < 1024; k++)
		if (out[k] != ranks_sum * k)
			FAIL("allreduce[%d] = %ld, want %ld", k, out[k], ranks_sum * k);

	/* alltoall: rank r sends r * 1000 + d to rank d */
	int *sb = malloc(sizeof(int) * size * 256), *rb = malloc(sizeof(int) * size * 256);
	for (int d = 0; d < size; d++)
		for (int j = 0; j < 256; j++)
			sb[d * 256 + j] = rank * 100000 + d * 1000 + j;
	MPI_Alltoall(sb, 256, MPI_INT, rb, 256, MPI_INT, MPI_COMM_WORLD);
	for (int s = 0; s < size; s++)
		for (int j = 0; j < 256; j++)
			if (rb[s * 256 + j] != s * 100000 + rank * 1000 + j)
				FAIL("alltoall from %d [%d] = %d", s, j, rb[s * 256 + j]);

	/* one-sided: each rank puts into its right neighbour's window, then
	 * gets its left neighbour's window back */
	int wn = 4096;
	int *win_buf = calloc(wn, sizeof(int)), *src = malloc(wn * sizeof(int)), *got = malloc(wn * sizeof(int));
	MPI_Win win;
	MPI_Win_create(win_buf, wn * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
	for (int i = 0; i < wn; i++)
		src[i] = rank * 1000000 + i;
	int right = (rank + 1) % size, left = (rank + size - 1) % size;
	MPI_Win_fence(0, win);
	MPI_Put(src, wn, MPI_INT, right, 0, wn, MPI_INT, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < wn; i++)
		if (win_buf[i] != left * 1000000 + i)
			FAIL("MPI_Put from %d: [%d] = %d", left, i, win_buf[i]);
	MPI_Get(got, wn, MPI_INT, left, 0, wn, MPI_INT, win);
	MPI_Win_fence(0, win);
	/* left's window holds what left's left neighbour put */
	int ll = (left + size - 1) % size;
	for (int i = 0; i < wn; i++)
		if (got[i] != ll * 1000000 + i)
			FAIL("MPI_Get from %d: [%d] = %d", left, i, got[i]);
	MPI_Win_free(&win);

	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: OK (%d ranks)\n", size);
	MPI_Finalize();
	return 0;
}
