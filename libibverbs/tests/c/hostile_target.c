/*
 * hostile_target: the target side of the hostile-peer test
 * (tests/hostile_peer.rs, issue 26). An ordinary program on the drop-in:
 * one region of two pages with a read-only guard page on each side, and
 * NQP RC QPs in RTS, each connected to a QP of the "peer" at PEER_GID
 * (QPN 0x100 + i), expecting PSN 0x100. The test then crafts one request
 * per QP over real UDP; this program only waits.
 *
 * stdout: "READY <rkey> <va> <len>", "QPN <i> <qpn>" per QP; then, after
 * "CHECK" on stdin: "STATE <i> <state>" per QP, "REGION intact|changed",
 * "GUARDS intact|changed", "RECV <status> <byte_len>" for QP 14's receive.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "common.h"

#define NQP 16

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 7 + 3);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: hostile_target PEER_IPV4\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	union ibv_gid peer = { 0 };
	peer.raw[10] = 0xff;
	peer.raw[11] = 0xff;
	if (inet_pton(AF_INET, argv[1], &peer.raw[12]) != 1)
		die("peer address");
	struct ibv_context *ctx = open_device_at(0);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4 * NQP, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd/cq");

	long pg = sysconf(_SC_PAGESIZE);
	unsigned char *m = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	for (long i = 0; i < 4 * pg; i++)
		m[i] = (i < pg || i >= 3 * pg) ? 0xEE : pat(i - pg);
	if (mprotect(m, pg, PROT_READ) || mprotect(m + 3 * pg, pg, PROT_READ))
		die("mprotect");
	unsigned char *region = m + pg;
	struct ibv_mr *mr = ibv_reg_mr(pd, region, 2 * pg,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	static unsigned char rbuf[64];
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !rmr)
		die("ibv_reg_mr");

	struct ibv_qp *qp[NQP];
	for (int i = 0; i < NQP; i++) {
		qp[i] = rc_qp_init(pd, cq, 4,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
		if (i == 14) {
			struct ibv_sge s = { .addr = (uintptr_t)rbuf, .length = sizeof rbuf, .lkey = rmr->lkey };
			struct ibv_recv_wr rw = { .wr_id = 14, .sg_list = &s, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp[i], &rw, &bad))
				die("ibv_post_recv");
		}
		struct rc_path p = rc_path(0x100 + i, peer);
		p.rq_psn = 0x100;
		p.sq_psn = 0x200;
		p.max_dest_rd_atomic = 4;
		p.min_rnr_timer = 1;
		if (rc_rtr_rts(qp[i], &p))
			die("RTR/RTS");
	}
	printf("READY %u %llu %llu\n", mr->rkey, (unsigned long long)(uintptr_t)region,
	       (unsigned long long)(2 * pg));
	for (int i = 0; i < NQP; i++)
		printf("QPN %d %u\n", i, qp[i]->qp_num);

	char line[64];
	while (fgets(line, sizeof line, stdin) && strncmp(line, "CHECK", 5) != 0)
		;
	/* the responder's side: every QP's state, the bytes, the receive */
	for (int i = 0; i < NQP; i++)
		printf("STATE %d %d\n", i, qp_state(qp[i]));
	int intact = 1;
	for (long i = 0; i < 2 * pg; i++)
		intact &= region[i] == pat(i);
	printf("REGION %s\n", intact ? "intact" : "changed");
	intact = 1;
	for (long i = 0; i < pg; i++)
		intact &= m[i] == 0xEE && m[3 * pg + i] == 0xEE;
	printf("GUARDS %s\n", intact ? "intact" : "changed");
	struct ibv_wc wc[4 * NQP];
	int got = 0, k;
	for (int tries = 0; tries < 100 && got == 0; tries++) {
		k = ibv_poll_cq(cq, 4 * NQP, wc);
		for (int j = 0; j < k; j++)
			if (wc[j].wr_id == 14 && wc[j].qp_num == qp[14]->qp_num) {
				printf("RECV %d %u\n", wc[j].status, wc[j].byte_len);
				got = 1;
			}
		if (!got)
			usleep(10000);
	}
	if (!got)
		printf("RECV none\n");
	for (int i = 0; i < NQP; i++)
		ibv_destroy_qp(qp[i]);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("DONE\n");
	return 0;
}
