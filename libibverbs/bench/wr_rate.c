/* RDMA WRITE message rate through the libibverbs drop-in, the workload of
 * `roce perf write -s SIZE -n ITERS -t DEPTH` (one process, two devices,
 * one RC QP each way, DEPTH writes in flight, every write signalled),
 * timed the same way: from the first post to the last completion.
 * Busy-polls ibv_poll_cq, like perftest. Prints one line:
 *   wr_rate size=64 iters=200000 depth=128 secs=... mpps=... gbps=...
 * Built (with ../tests/c/common.c) and run by scripts/dropin-bench.sh. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/c/common.h"

/* A device with an RC QP DEPTH deep and a registered buffer of `len`. */
static void open_rc(struct ibv_device *dev, struct side *s, size_t len, int depth)
{
	struct ibv_qp_init_attr ia;

	open_side(dev, s, depth * 2, NULL);
	ia = qp_init_attr(s->cq, IBV_QPT_RC, depth, 1);
	s->qp = ibv_create_qp(s->pd, &ia);
	s->buf = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	memset(s->buf, 0x5a, len);
	s->mr = ibv_reg_mr(s->pd, s->buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->qp || !s->mr)
		die("setup");
}

static void connect_qp(struct side *s, struct side *p)
{
	struct rc_path path = rc_path(p->qp->qp_num, p->gid);

	path.hop_limit = 1;
	if (rc_connect(s->qp, IBV_ACCESS_REMOTE_WRITE, &path))
		die("INIT/RTR/RTS");
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 64;
	long iters = argc > 2 ? strtol(argv[2], NULL, 0) : 200000;
	int depth = argc > 3 ? atoi(argv[3]) : 128;
	struct ibv_device **list;
	struct side a, b;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc[16];
	struct timespec t0, t1;
	long posted = 0, done = 0;
	int num;
	double secs;

	list = ibv_get_device_list(&num);
	if (!list || num < 2) {
		fprintf(stderr, "need two devices\n");
		return 1;
	}
	open_rc(list[0], &a, size, depth);
	open_rc(list[1], &b, size, depth);
	connect_qp(&a, &b);
	connect_qp(&b, &a);
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)a.buf;
	sge.length = size;
	sge.lkey = a.mr->lkey;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
	wr.wr.rdma.rkey = b.mr->rkey;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (done < iters) {
		while (posted < iters && posted - done < depth) {
			wr.wr_id = posted;
			if (ibv_post_send(a.qp, &wr, &bad))
				die("ibv_post_send");
			posted++;
		}
		int n = ibv_poll_cq(a.cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "completion: %s\n", ibv_wc_status_str(wc[i].status));
				return 1;
			}
		done += n;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("wr_rate size=%zu iters=%ld depth=%d secs=%.4f mpps=%.4f gbps=%.3f\n", size, iters,
	       depth, secs, iters / secs / 1e6, iters * size * 8.0 / secs / 1e9);
	return 0;
}
