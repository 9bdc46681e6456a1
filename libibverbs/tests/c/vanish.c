/*
 * vanish: a registered region whose pages go away under it (issue 26,
 * finding 1). A NIC or kernel rxe pins a region's pages, so when the
 * program unmaps or write-protects them without deregistering, the device
 * goes on using the pinned pages and the process never faults. The drop-in
 * cannot pin: the access must fail instead of killing the process, the
 * peer must get a remote access error, and the local side its error.
 *
 * Two RC QPs on one device in this process, connected to each other:
 * `req` posts, `resp` owns the target region (two pages, mmap'd).
 *
 *   ro_page_remote_write   the target page made read-only after
 *                          registration; req's WRITE -> REM_ACCESS_ERR
 *   munmap_without_dereg   the pages unmapped, not deregistered; req's
 *                          WRITE, READ and ATOMIC -> REM_ACCESS_ERR
 *   local_send_unmapped    req's own source pages unmapped; its SEND
 *                          completes with an error, not SUCCESS
 *
 * Each case on a fresh pair (a remote access error moves both QPs to
 * ERROR, as IBA and rxe do). Then a pair over fresh memory works, to show
 * the device survived. Prints one line per check and "N failures".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "common.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static long page;

struct pair {
	struct ibv_cq *cq;
	struct ibv_qp *req, *resp;
};

static struct ibv_qp *rc_qp(struct ibv_cq *cq)
{
	return rc_qp_init(pd, cq, 8,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_ATOMIC);
}

static void connect_to(struct ibv_qp *qp, uint32_t dest)
{
	struct rc_path p = rc_path(dest, gid);

	p.rq_psn = 100;
	p.sq_psn = 100;
	p.min_rnr_timer = 1;
	p.timeout = 12;
	p.retry_cnt = 3;
	p.rnr_retry = 3;
	if (rc_rtr_rts(qp, &p))
		die("RTR/RTS");
}

static struct pair new_pair(void)
{
	struct pair p;
	p.cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!p.cq)
		die("ibv_create_cq");
	p.req = rc_qp(p.cq);
	p.resp = rc_qp(p.cq);
	connect_to(p.req, p.resp->qp_num);
	connect_to(p.resp, p.req->qp_num);
	return p;
}

static void free_pair(struct pair *p)
{
	ibv_destroy_qp(p->req);
	ibv_destroy_qp(p->resp);
	ibv_destroy_cq(p->cq);
}

/* The completion of req's work request `id` (others on the CQ skipped):
 * its status, or -1 after 10 s. */
static int wait_wc(struct pair *p, uint64_t id)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(p->cq, 1, &wc);
		if (n < 0)
			return -2;
		if (n == 1 && wc.wr_id == id && wc.qp_num == p->req->qp_num)
			return wc.status;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			return -1;
		if (n == 0)
			usleep(100);
	}
}

static void *two_pages(void)
{
	void *m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	memset(m, 0x5A, 2 * page);
	return m;
}

static int post(struct pair *p, enum ibv_wr_opcode op, uint64_t id, struct ibv_mr *local,
		void *laddr, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)laddr, .length = len, .lkey = local->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(p->req, &wr, &bad);
}

/* req does `op` of `len` bytes against resp's region `target` (already
 * spoiled by the caller); expects REM_ACCESS_ERR and both QPs in ERROR. */
static void expect_remote_error(const char *name, enum ibv_wr_opcode op, uint32_t len,
				char *target, struct ibv_mr *tmr)
{
	struct pair p = new_pair();
	static char src[8192];
	struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
	if (!smr)
		die("ibv_reg_mr src");
	int rc = post(&p, op, 7, smr, src, len, (uintptr_t)target, tmr->rkey);
	int st = rc ? -3 : wait_wc(&p, 7);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "%s: the peer's completion is REM_ACCESS_ERR: %s (%d)", name,
	      st >= 0 ? ibv_wc_status_str(st) : "none", st);
	/* the responder's QP moves to ERROR too (IBA 9.9.3.1.3, as rxe) */
	for (int i = 0; i < 1000 && qp_state(p.resp) != IBV_QPS_ERR; i++)
		usleep(1000);
	CHECK(qp_state(p.resp) == IBV_QPS_ERR, "%s: the responder's QP is in ERROR: %d", name,
	      qp_state(p.resp));
	ibv_dereg_mr(smr);
	free_pair(&p);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	page = sysconf(_SC_PAGESIZE);
	ctx = open_device_at(0);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	if (ibv_query_gid(ctx, 1, 1, &gid))
		die("ibv_query_gid");
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;

	/* ro_page_remote_write: registered writable, then write-protected */
	char *t = two_pages();
	struct ibv_mr *tmr = ibv_reg_mr(pd, t, 2 * page, all);
	if (!tmr)
		die("ibv_reg_mr target");
	if (mprotect(t + page, page, PROT_READ))
		die("mprotect");
	expect_remote_error("ro_page_remote_write", IBV_WR_RDMA_WRITE, 64, t + page, tmr);
	CHECK(t[page] == 0x5A && t[page + 63] == 0x5A, "ro_page_remote_write: the page is unchanged");
	/* a READ of the read-only page is still fine */
	{
		struct pair p = new_pair();
		static char dst[64];
		struct ibv_mr *dmr = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE);
		int rc = post(&p, IBV_WR_RDMA_READ, 8, dmr, dst, 64, (uintptr_t)(t + page), tmr->rkey);
		int st = rc ? -3 : wait_wc(&p, 8);
		CHECK(st == IBV_WC_SUCCESS && dst[0] == 0x5A && dst[63] == 0x5A,
		      "ro_page_remote_write: a READ of the read-only page succeeds: %d", st);
		ibv_dereg_mr(dmr);
		free_pair(&p);
	}
	ibv_dereg_mr(tmr);
	munmap(t, 2 * page);

	/* munmap_without_dereg: the second page unmapped, the region kept */
	t = two_pages();
	tmr = ibv_reg_mr(pd, t, 2 * page, all);
	if (!tmr)
		die("ibv_reg_mr target");
	if (munmap(t + page, page))
		die("munmap");
	expect_remote_error("munmap_without_dereg WRITE", IBV_WR_RDMA_WRITE, 64, t + page, tmr);
	expect_remote_error("munmap_without_dereg WRITE across the edge", IBV_WR_RDMA_WRITE, 4096,
			    t + page - 2048, tmr);
	expect_remote_error("munmap_without_dereg READ", IBV_WR_RDMA_READ, 64, t + page, tmr);
	expect_remote_error("munmap_without_dereg READ of 8 KiB across the edge", IBV_WR_RDMA_READ,
			    8192, t, tmr);
	expect_remote_error("munmap_without_dereg ATOMIC", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, t + page,
			    tmr);
	int rc = ibv_dereg_mr(tmr);
	CHECK(rc == 0, "munmap_without_dereg: ibv_dereg_mr afterwards: %d", rc);
	munmap(t, page);

	/* local_send_unmapped: req's own source pages gone */
	{
		struct pair p = new_pair();
		char *s = two_pages();
		struct ibv_mr *smr = ibv_reg_mr(pd, s, 2 * page, IBV_ACCESS_LOCAL_WRITE);
		static char rbuf[8192];
		struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge rs = { .addr = (uintptr_t)rbuf, .length = sizeof rbuf, .lkey = rmr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
		if (ibv_post_recv(p.resp, &rw, &rbad))
			die("ibv_post_recv");
		munmap(s, 2 * page);
		int rc2 = post(&p, IBV_WR_SEND, 9, smr, s, 4096, 0, 0);
		int st = rc2 ? -3 : wait_wc(&p, 9);
		CHECK(rc2 != 0 || (st > 0 && st != IBV_WC_SUCCESS),
		      "local_send_unmapped: the SEND fails: post %d, completion %s (%d)", rc2,
		      st >= 0 ? ibv_wc_status_str(st) : "none", st);
		ibv_dereg_mr(smr);
		ibv_dereg_mr(rmr);
		free_pair(&p);
	}

	/* and the device still works */
	{
		struct pair p = new_pair();
		char *d = two_pages();
		struct ibv_mr *dmr = ibv_reg_mr(pd, d, 2 * page, all);
		static char src[4096];
		memset(src, 0xC3, sizeof src);
		struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
		int rc2 = post(&p, IBV_WR_RDMA_WRITE, 10, smr, src, 4096, (uintptr_t)(d + 100), dmr->rkey);
		int st = rc2 ? -3 : wait_wc(&p, 10);
		CHECK(st == IBV_WC_SUCCESS && (unsigned char)d[100] == 0xC3 &&
			      (unsigned char)d[4195] == 0xC3 && d[99] == 0x5A && d[4196] == 0x5A,
		      "afterwards: a WRITE into fresh pages lands exactly: %d", st);
		ibv_dereg_mr(smr);
		ibv_dereg_mr(dmr);
		munmap(d, 2 * page);
		free_pair(&p);
	}

	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
