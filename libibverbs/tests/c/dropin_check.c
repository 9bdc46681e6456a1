/* One process, two roce-emu devices (the first two of the device list),
 * an RC QP on each connected to the other, through the libibverbs drop-in.
 *
 *  1. application memory is the memory region: the peer's RDMA WRITE,
 *     READ, CMP_AND_SWP and FETCH_AND_ADD act on this program's own
 *     malloc'd bytes, read back without any copy API;
 *  2. after ibv_dereg_mr the peer's WRITE to the old rkey is refused
 *     (IBV_WC_REM_ACCESS_ERR) and the bytes stay as they were;
 *  3. invalid calls answer with rdma-core's errno;
 *  4. threads: one thread blocks in ibv_get_cq_event while another posts
 *     and a third busy-polls another CQ; nothing deadlocks;
 *  5. the source of a 1 MiB WRITE deregistered and unmapped right after
 *     the post: large payloads leave straight from the application's
 *     pages, and none is touched once ibv_dereg_mr has returned (a touch
 *     of the unmapped pages would kill this process); the WRITE ends, and
 *     no byte that arrived is wrong.
 *
 * Prints one line per check ("ok ..." / "FAIL ...") and exits 0 only if
 * every check held. Built and run by tests/dropin.rs. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "common.h"

/* Open `dev` with an RC QP (16 deep each way, 128 bytes inline) on one CQ
 * of 64 entries, that CQ on a new completion channel if `ch`. */
static void open_side_ch(struct ibv_device *dev, struct side *s,
			 struct ibv_comp_channel **ch)
{
	struct ibv_qp_init_attr ia;

	open_side(dev, s, 64, ch);
	ia = qp_init_attr(s->cq, IBV_QPT_RC, 16, 16);
	ia.cap.max_inline_data = 128;
	s->qp = ibv_create_qp(s->pd, &ia);
	if (!s->qp)
		die("ibv_create_qp");
}

static void open_rc(struct ibv_device *dev, struct side *s)
{
	open_side_ch(dev, s, NULL);
}

struct waiter {
	struct ibv_comp_channel *ch;
	struct ibv_cq *want;
	int ok;
};

static void *wait_event(void *arg)
{
	struct waiter *w = arg;
	struct ibv_cq *cq;
	void *cq_ctx;

	if (ibv_get_cq_event(w->ch, &cq, &cq_ctx) == 0 && cq == w->want) {
		ibv_ack_cq_events(cq, 1);
		w->ok = 1;
	}
	return NULL;
}

struct poller {
	struct side *s;
	long polls;
	volatile int stop;
};

static void *busy_poll(void *arg)
{
	struct poller *p = arg;
	struct ibv_wc wc;

	while (!p->stop) {
		ibv_poll_cq(p->s->cq, 1, &wc);
		p->polls++;
	}
	return NULL;
}

static int connect_qp(struct side *s, struct side *peer)
{
	struct rc_path p = rc_path(peer->qp->qp_num, peer->gid);

	p.hop_limit = 1;
	p.max_dest_rd_atomic = 4;
	p.max_rd_atomic = 4;
	return rc_connect(s->qp,
			  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_ATOMIC,
			  &p);
}

/* Post one request and wait (30 s at most) for its completion. */
static int do_wr(struct side *s, struct ibv_send_wr *wr, struct ibv_wc *wc)
{
	struct ibv_send_wr *bad;

	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(s->qp, wr, &bad))
		return -1;
	return poll_one(s->cq, wc, 30);
}

int main(void)
{
	struct ibv_device **list;
	struct side a, b;
	int num, i;
	uint8_t *target, *local;
	struct ibv_mr *tmr, *lmr;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	uint64_t *word;

	list = ibv_get_device_list(&num);
	CHECK(list && num >= 2, "ibv_get_device_list: %d devices", num);
	if (!list || num < 2)
		return 1;
	open_rc(list[0], &a);
	open_rc(list[1], &b);
	CHECK(connect_qp(&a, &b) == 0 && connect_qp(&b, &a) == 0,
	      "RC QPs connected RESET->INIT->RTR->RTS");

	/* 1. application memory is the MR */
	target = aligned_alloc(4096, 8192);
	local = aligned_alloc(4096, 8192);
	memset(target, 0x11, 8192);
	for (i = 0; i < 8192; i++)
		local[i] = (uint8_t)(i * 7 + 3);
	tmr = ibv_reg_mr(b.pd, target, 8192,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_REMOTE_ATOMIC);
	lmr = ibv_reg_mr(a.pd, local, 8192, IBV_ACCESS_LOCAL_WRITE);
	CHECK(tmr && lmr && tmr->addr == target && tmr->length == 8192,
	      "ibv_reg_mr of malloc'd memory (addr and length as given)");

	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)local;
	sge.length = 3000;
	sge.lkey = lmr->lkey;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)target + 100;
	wr.wr.rdma.rkey = tmr->rkey;
	CHECK(do_wr(&a, &wr, &wc) == 0 && wc.status == IBV_WC_SUCCESS,
	      "RDMA WRITE of 3000 bytes completes: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(memcmp(target + 100, local, 3000) == 0 && target[99] == 0x11 &&
		      target[3100] == 0x11,
	      "the WRITE landed in the application's own buffer, nothing around it");

	memset(local + 4096, 0, 4096);
	sge.addr = (uintptr_t)local + 4096;
	sge.length = 3000;
	wr.opcode = IBV_WR_RDMA_READ;
	CHECK(do_wr(&a, &wr, &wc) == 0 && wc.status == IBV_WC_SUCCESS &&
		      memcmp(local + 4096, target + 100, 3000) == 0,
	      "RDMA READ brings the application's bytes back");

	word = (uint64_t *)(target + 4096);
	*word = 40;
	sge.addr = (uintptr_t)local + 64;
	sge.length = 8;
	memset(&wr.wr, 0, sizeof(wr.wr));
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)word;
	wr.wr.atomic.rkey = tmr->rkey;
	wr.wr.atomic.compare_add = 2;
	CHECK(do_wr(&a, &wr, &wc) == 0 && wc.status == IBV_WC_SUCCESS &&
		      *(uint64_t *)(local + 64) == 40 && *word == 42,
	      "FETCH_AND_ADD on the application's word: returned %llu, now %llu",
	      (unsigned long long)*(uint64_t *)(local + 64),
	      (unsigned long long)*word);
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 42;
	wr.wr.atomic.swap = 7;
	CHECK(do_wr(&a, &wr, &wc) == 0 && wc.status == IBV_WC_SUCCESS &&
		      *(uint64_t *)(local + 64) == 42 && *word == 7,
	      "CMP_AND_SWP on the application's word: now %llu",
	      (unsigned long long)*word);

	/* 2. dereg while the peer still writes to the rkey */
	{
		uint32_t old_rkey = tmr->rkey;
		uint8_t before[8192];

		CHECK(ibv_dereg_mr(tmr) == 0, "ibv_dereg_mr");
		memcpy(before, target, 8192);
		sge.addr = (uintptr_t)local;
		sge.length = 512;
		memset(&wr.wr, 0, sizeof(wr.wr));
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = (uintptr_t)target;
		wr.wr.rdma.rkey = old_rkey;
		CHECK(do_wr(&a, &wr, &wc) == 0 &&
			      wc.status == IBV_WC_REM_ACCESS_ERR,
		      "WRITE to a deregistered rkey: %s",
		      ibv_wc_status_str(wc.status));
		CHECK(memcmp(before, target, 8192) == 0,
		      "the deregistered buffer is untouched");
	}

	/* 3. errnos */
	{
		struct ibv_device_attr da;
		struct ibv_port_attr pa;
		struct ibv_qp_attr qa = {0};
		struct ibv_qp_init_attr ia;
		struct ibv_qp *q2;
		struct ibv_cq *c;
		struct ibv_mr *m;
		struct ibv_send_wr *bad = NULL;
		union ibv_gid g;
		int rc;

		CHECK(ibv_query_device(a.ctx, &da) == 0 && da.max_srq > 0 &&
			      da.max_mw > 0,
		      "ibv_query_device: max_srq %d, max_mw %d", da.max_srq,
		      da.max_mw);
		{
			/* IBA 1.5 FLUSH (global, persistent) and ATOMIC WRITE:
			 * the kernel's IB_UVERBS_DEVICE_* bits 38..40, past the
			 * 32 bits of ibv_device_attr (rxe reports them from 6.2) */
			struct ibv_device_attr_ex dx;
			uint64_t want = (1ULL << 38) | (1ULL << 39) | (1ULL << 40);

			memset(&dx, 0xa5, sizeof(dx));
			CHECK(ibv_query_device_ex(a.ctx, NULL, &dx) == 0 &&
				      (dx.device_cap_flags_ex & want) == want &&
				      (uint32_t)dx.device_cap_flags_ex ==
					      da.device_cap_flags &&
				      dx.orig_attr.max_qp == da.max_qp &&
				      dx.phys_port_cnt_ex == 1,
			      "ibv_query_device_ex: FLUSH and ATOMIC WRITE in "
			      "device_cap_flags_ex (0x%llx), the rest as "
			      "ibv_query_device",
			      (unsigned long long)dx.device_cap_flags_ex);
		}
		CHECK(ibv_query_port(a.ctx, 1, &pa) == 0 &&
			      pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
			      pa.state == IBV_PORT_ACTIVE,
		      "ibv_query_port: Ethernet link layer, PORT_ACTIVE");
		errno = 0;
		c = ibv_create_cq(a.ctx, 0, NULL, NULL, 0);
		CHECK(!c && errno == EINVAL, "ibv_create_cq(cqe 0): NULL, EINVAL");
		errno = 0;
		c = ibv_create_cq(a.ctx, da.max_cqe + 1, NULL, NULL, 0);
		CHECK(!c && errno == EINVAL,
		      "ibv_create_cq(max_cqe + 1): NULL, EINVAL");
		errno = 0;
		m = ibv_reg_mr(a.pd, local, 64, IBV_ACCESS_REMOTE_WRITE);
		CHECK(!m && errno == EINVAL,
		      "ibv_reg_mr(REMOTE_WRITE without LOCAL_WRITE): NULL, EINVAL");
		CHECK(ibv_dealloc_pd(a.pd) == EBUSY,
		      "ibv_dealloc_pd with an MR and a QP on it: EBUSY");
		CHECK(ibv_destroy_cq(a.cq) == EBUSY,
		      "ibv_destroy_cq while a QP uses it: EBUSY");
		ia = qp_init_attr(a.cq, IBV_QPT_RC, 4, 4);
		q2 = ibv_create_qp(a.pd, &ia);
		qa.qp_state = IBV_QPS_RTS;
		CHECK(q2 && ibv_modify_qp(q2, &qa, IBV_QP_STATE) == EINVAL,
		      "ibv_modify_qp RESET -> RTS: EINVAL");
		rc = ibv_post_send(q2, &wr, &bad);
		CHECK(rc != 0 && bad == &wr,
		      "ibv_post_send on a RESET QP: %d, bad_wr set", rc);
		rc_init(q2, 0);
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = IBV_QPS_RTR;
		qa.path_mtu = IBV_MTU_1024;
		qa.dest_qp_num = b.qp->qp_num;
		qa.max_dest_rd_atomic = 1;
		qa.min_rnr_timer = 12;
		qa.ah_attr.is_global = 0;
		qa.ah_attr.port_num = 1;
		CHECK(ibv_modify_qp(q2, &qa,
				    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC |
					    IBV_QP_MIN_RNR_TIMER) == EINVAL,
		      "RC to RTR without a GRH on RoCE: EINVAL");
		CHECK(ibv_destroy_qp(q2) == 0, "ibv_destroy_qp");
		CHECK(ibv_query_gid(a.ctx, 1, 0, &g) == 0 && g.raw[0] == 0xfe &&
			      g.raw[1] == 0x80,
		      "GID 0 is the link-local GID");
		CHECK(ibv_query_gid(a.ctx, 1, 2000, &g) == -1,
		      "ibv_query_gid past gid_tbl_len: -1");
		CHECK(strcmp(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR),
			     "remote access error") == 0,
		      "ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR)");
	}

	/* 4. threads */
	{
		struct side c, d;
		struct ibv_comp_channel *ch;
		struct waiter w = {0};
		struct poller pl = {0};
		pthread_t tw, tp;
		struct timespec dl;
		struct ibv_mr *rmr;
		struct ibv_recv_wr rwr = {0}, *rbad;
		struct ibv_sge rsge;
		int joined, rc;

		open_side_ch(list[1], &c, &ch);
		open_rc(list[0], &d);
		CHECK(ch && connect_qp(&c, &d) == 0 && connect_qp(&d, &c) == 0,
		      "a QP pair whose receiver CQ has a completion channel");
		rmr = ibv_reg_mr(c.pd, target, 4096, IBV_ACCESS_LOCAL_WRITE);
		rsge.addr = (uintptr_t)target;
		rsge.length = 4096;
		rsge.lkey = rmr->lkey;
		rwr.sg_list = &rsge;
		rwr.num_sge = 1;
		ibv_post_recv(c.qp, &rwr, &rbad);
		ibv_req_notify_cq(c.cq, 0);
		w.ch = ch;
		w.want = c.cq;
		pl.s = &a; /* a's QP is in ERR since the dereg test: polls find nothing new */
		pthread_create(&tw, NULL, wait_event, &w);
		pthread_create(&tp, NULL, busy_poll, &pl);
		{
			struct timespec z = {0, 50 * 1000 * 1000};
			nanosleep(&z, NULL); /* the waiter is blocked by now */
		}
		sge.addr = (uintptr_t)local;
		sge.length = 100;
		memset(&wr, 0, sizeof(wr));
		sge.lkey = 0;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_INLINE;
		rc = do_wr(&d, &wr, &wc);
		CHECK(rc == 0 && wc.status == IBV_WC_SUCCESS,
		      "an inline SEND completes while the others run (%d, %s)", rc,
		      rc == 0 ? ibv_wc_status_str(wc.status) : "no completion");
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 10;
		joined = pthread_timedjoin_np(tw, NULL, &dl) == 0;
		CHECK(joined && w.ok,
		      "the thread blocked in ibv_get_cq_event woke with the CQ");
		pl.stop = 1;
		pthread_join(tp, NULL);
		CHECK(pl.polls > 0, "a third thread busy-polled meanwhile (%ld polls)",
		      pl.polls);
		{
			struct ibv_wc rw;
			int n = ibv_poll_cq(c.cq, 1, &rw);
			CHECK(n == 1 && rw.status == IBV_WC_SUCCESS &&
				      rw.byte_len == 100 &&
				      memcmp(target, local, 100) == 0,
			      "the SEND landed in the receiver's buffer");
		}
		if (joined) {
			ibv_dereg_mr(rmr);
			ibv_destroy_qp(c.qp);
			ibv_destroy_qp(d.qp);
			ibv_destroy_cq(c.cq);
			ibv_destroy_cq(d.cq);
			CHECK(ibv_destroy_comp_channel(ch) == 0,
			      "channel destroyed after its CQ");
			ibv_dealloc_pd(c.pd);
			ibv_dealloc_pd(d.pd);
			ibv_close_device(c.ctx);
			ibv_close_device(d.ctx);
		}
	}

	/* 5. the source of a WRITE deregistered and unmapped under it */
	{
		struct side e, f;
		const size_t len = 1 << 20;
		uint8_t *src = mmap(NULL, len, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uint8_t *dst = aligned_alloc(4096, len);
		struct ibv_mr *smr, *dmr;
		struct ibv_send_wr *bad = NULL;
		size_t k, arrived = 0, wrong = 0;
		long spins;
		int n = 0;

		open_rc(list[0], &e);
		open_rc(list[1], &f);
		CHECK(src != MAP_FAILED && dst && connect_qp(&e, &f) == 0 &&
			      connect_qp(&f, &e) == 0,
		      "a fresh RC pair and a 1 MiB mmap'd source");
		for (k = 0; k < len; k++)
			src[k] = (uint8_t)(k * 13 + 5) | 1; /* never 0 */
		memset(dst, 0, len);
		smr = ibv_reg_mr(e.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
		dmr = ibv_reg_mr(f.pd, dst, len,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		memset(&wr, 0, sizeof(wr));
		sge.addr = (uintptr_t)src;
		sge.length = (uint32_t)len;
		sge.lkey = smr ? smr->lkey : 0;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = (uintptr_t)dst;
		wr.wr.rdma.rkey = dmr ? dmr->rkey : 0;
		CHECK(smr && dmr && ibv_post_send(e.qp, &wr, &bad) == 0,
		      "1 MiB RDMA WRITE posted");
		CHECK(ibv_dereg_mr(smr) == 0 && munmap(src, len) == 0,
		      "its source deregistered and unmapped right after the post");
		for (spins = 0; spins < 200000000L && n == 0; spins++)
			n = ibv_poll_cq(e.cq, 1, &wc);
		for (k = 0; k < len; k++) {
			if (dst[k] == 0)
				continue;
			arrived++;
			if (dst[k] != ((uint8_t)(k * 13 + 5) | 1))
				wrong++;
		}
		CHECK(n == 1, "the WRITE ended: %s (%zu of %zu bytes arrived)",
		      n == 1 ? ibv_wc_status_str(wc.status) : "no completion",
		      arrived, len);
		CHECK(wrong == 0 && (n != 1 || wc.status != IBV_WC_SUCCESS ||
				     arrived == len),
		      "no byte that arrived is wrong (%zu wrong)", wrong);
		ibv_destroy_qp(e.qp);
		ibv_destroy_qp(f.qp);
		ibv_dereg_mr(dmr);
		ibv_destroy_cq(e.cq);
		ibv_destroy_cq(f.cq);
		ibv_dealloc_pd(e.pd);
		ibv_dealloc_pd(f.pd);
		ibv_close_device(e.ctx);
		ibv_close_device(f.ctx);
		free(dst);
	}

	ibv_dereg_mr(lmr);
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0,
	      "CQs destroyed after their QPs");
	CHECK(ibv_dealloc_pd(a.pd) == 0 && ibv_dealloc_pd(b.pd) == 0,
	      "PDs deallocated after their objects");
	CHECK(ibv_close_device(a.ctx) == 0 && ibv_close_device(b.ctx) == 0,
	      "devices closed");
	ibv_free_device_list(list);
	free(target);
	free(local);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
