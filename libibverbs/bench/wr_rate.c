/* RDMA WRITE message rate through the libibverbs drop-in, the workload of
 * `roce perf write -s SIZE -n ITERS -t DEPTH` (one process, two devices,
 * one RC QP each way, DEPTH writes in flight, every write signalled),
 * timed the same way: from the first post to the last completion.
 * Busy-polls ibv_poll_cq, like perftest. Prints one line:
 *   wr_rate size=64 iters=200000 depth=128 secs=... mpps=... gbps=...
 * Built and run by scripts/dropin-bench.sh. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	void *buf;
	struct ibv_mr *mr;
};

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void open_side(struct ibv_device *dev, struct side *s, size_t len, int depth)
{
	struct ibv_qp_init_attr ia = {0};

	s->ctx = ibv_open_device(dev);
	if (!s->ctx)
		die("ibv_open_device");
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, depth * 2, NULL, NULL, 0);
	ia.send_cq = s->cq;
	ia.recv_cq = s->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = depth;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	s->qp = ibv_create_qp(s->pd, &ia);
	s->buf = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	memset(s->buf, 0x5a, len);
	s->mr = ibv_reg_mr(s->pd, s->buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->pd || !s->cq || !s->qp || !s->mr || ibv_query_gid(s->ctx, 1, 1, &s->gid))
		die("setup");
}

static void connect_qp(struct side *s, struct side *p)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = p->qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
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
	open_side(list[0], &a, size, depth);
	open_side(list[1], &b, size, depth);
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
