/*
 * stale: calls a C program may make with handles that are no longer live
 * (issue 26, findings 4 and 7). Each must be answered with an errno, never
 * with a read of freed memory:
 *
 *   double: a second destroy of a PD, MR, CQ, QP, SRQ, AH, MW, completion
 *           channel, context: EINVAL
 *   dead: a call on a destroyed object (query/modify/resize, reg_mr on a
 *         dead PD, create_qp with a dead CQ/PD/SRQ, create_cq with a dead
 *         channel, objects of a closed context): EINVAL (NULL and errno
 *         EINVAL for the calls that return a pointer)
 *   busy: a destroy while other objects depend on the object: EBUSY, and
 *         the object still works after (rdma-core's and rxe's errnos)
 *   events: a thread blocked in ibv_get_cq_event while another destroys a
 *           CQ is never handed the destroyed CQ; ibv_destroy_cq waits until
 *           the events it delivered were acknowledged
 *   racing: a thread polls a CQ without pause while the main thread, 150
 *           times (15 under valgrind), creates a UD QP on it, posts 8 receives and 8 sends to
 *           itself, and destroys the QP at once (in RTS, or after moving it
 *           to ERR): every completion the poller takes is whole (a known
 *           QPN, a wr_id that was posted, a status and opcode that fit),
 *           none twice, and the CQ serves a new QP exactly after
 *
 * The inline verbs of <infiniband/verbs.h> (ibv_dealloc_mw, ibv_alloc_mw,
 * ibv_poll_cq, ibv_post_*) read the object's context pointer themselves
 * before the library is reached: a stale MW is passed to the context's
 * ops here, as the inline would, without the inline's own read.
 *
 * Prints one line per case and "N failures"; exits 1 on a failure (a use
 * after free crashes instead, or shows under valgrind).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "common.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static char buf[4096];

static struct ibv_qp *ud_qp(struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_UD, 4, 4);
	ia.srq = srq;
	return ibv_create_qp(pd, &ia);
}

/* An address handle to this device's own GID (index 1). */
static struct ibv_ah *own_ah(void)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 1, &gid))
		die("ibv_query_gid");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");
	return ah;
}

/* A completion event on `cq` without traffic: a receive flushed by moving
 * the QP to the error state (an error completion raises the armed CQ's
 * event). Returns the QP (destroy it before the CQ). */
static struct ibv_qp *flush_event(struct ibv_cq *cq, struct ibv_mr *mr)
{
	struct ibv_qp *qp = ud_qp(cq, NULL);
	if (!qp)
		die("ibv_create_qp (event)");
	if (ud_init(qp, 0x11111111))
		die("INIT");
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &rw, &bad))
		die("ibv_post_recv");
	if (ibv_req_notify_cq(cq, 0))
		die("ibv_req_notify_cq");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("ERR");
	return qp;
}

struct getter {
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	void *cq_ctx;
	int rc;
	volatile int done;
};

static void *get_event(void *arg)
{
	struct getter *g = arg;
	g->rc = ibv_get_cq_event(g->ch, &g->cq, &g->cq_ctx);
	g->done = 1;
	return NULL;
}

struct destroyer {
	struct ibv_cq *cq;
	int rc;
	volatile int done;
};

static void *destroy_cq_thread(void *arg)
{
	struct destroyer *d = arg;
	d->rc = ibv_destroy_cq(d->cq);
	d->done = 1;
	return NULL;
}

static void double_destroy(void)
{
	int rc;

	struct ibv_pd *p = ibv_alloc_pd(ctx);
	if (!p)
		die("ibv_alloc_pd");
	rc = ibv_dealloc_pd(p);
	CHECK(rc == 0, "double: first ibv_dealloc_pd: rc %d", rc);
	errno = 0;
	rc = ibv_dealloc_pd(p);
	CHECK(rc == EINVAL && errno == EINVAL, "double: second ibv_dealloc_pd: rc %d errno %d", rc,
	      errno);

	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	rc = ibv_dereg_mr(mr);
	CHECK(rc == 0, "double: first ibv_dereg_mr: rc %d", rc);
	rc = ibv_dereg_mr(mr);
	CHECK(rc == EINVAL, "double: second ibv_dereg_mr: rc %d", rc);

	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	rc = ibv_destroy_cq(cq);
	CHECK(rc == 0, "double: first ibv_destroy_cq: rc %d", rc);
	rc = ibv_destroy_cq(cq);
	CHECK(rc == EINVAL, "double: second ibv_destroy_cq: rc %d", rc);

	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *qp = cq ? ud_qp(cq, NULL) : NULL;
	if (!qp)
		die("ibv_create_qp");
	rc = ibv_destroy_qp(qp);
	CHECK(rc == 0, "double: first ibv_destroy_qp: rc %d", rc);
	rc = ibv_destroy_qp(qp);
	CHECK(rc == EINVAL, "double: second ibv_destroy_qp: rc %d", rc);
	if (ibv_destroy_cq(cq))
		die("ibv_destroy_cq");

	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	if (!srq)
		die("ibv_create_srq");
	rc = ibv_destroy_srq(srq);
	CHECK(rc == 0, "double: first ibv_destroy_srq: rc %d", rc);
	rc = ibv_destroy_srq(srq);
	CHECK(rc == EINVAL, "double: second ibv_destroy_srq: rc %d", rc);

	struct ibv_ah *ah = own_ah();
	rc = ibv_destroy_ah(ah);
	CHECK(rc == 0, "double: first ibv_destroy_ah: rc %d", rc);
	rc = ibv_destroy_ah(ah);
	CHECK(rc == EINVAL, "double: second ibv_destroy_ah: rc %d", rc);

	/* the context's op, as the inline ibv_dealloc_mw calls it (the
	 * inline itself reads mw->context first) */
	int (*dealloc_mw)(struct ibv_mw *) = ctx->ops.dealloc_mw;
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mw)
		die("ibv_alloc_mw");
	rc = dealloc_mw(mw);
	CHECK(rc == 0, "double: first ibv_dealloc_mw: rc %d", rc);
	rc = dealloc_mw(mw);
	CHECK(rc == EINVAL, "double: second ibv_dealloc_mw: rc %d", rc);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!ch)
		die("ibv_create_comp_channel");
	rc = ibv_destroy_comp_channel(ch);
	CHECK(rc == 0, "double: first ibv_destroy_comp_channel: rc %d", rc);
	rc = ibv_destroy_comp_channel(ch);
	CHECK(rc == EINVAL, "double: second ibv_destroy_comp_channel: rc %d", rc);

	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no device");
	struct ibv_context *c2 = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!c2)
		die("ibv_open_device");
	rc = ibv_close_device(c2);
	CHECK(rc == 0, "double: first ibv_close_device: rc %d", rc);
	errno = 0;
	rc = ibv_close_device(c2);
	CHECK(rc != 0 && errno == EINVAL, "double: second ibv_close_device: rc %d errno %d", rc,
	      errno);
}

static void dead_objects(void)
{
	int rc;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!mr || !cq)
		die("mr/cq");

	struct ibv_cq *dead_cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *qp = dead_cq ? ud_qp(dead_cq, NULL) : NULL;
	if (!qp)
		die("qp");
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(dead_cq))
		die("destroy qp/cq");

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	errno = 0;
	rc = ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi);
	CHECK(rc == EINVAL && errno == EINVAL, "dead: ibv_query_qp on a destroyed QP: rc %d", rc);
	qa.qp_state = IBV_QPS_INIT;
	rc = ibv_modify_qp(qp, &qa, IBV_QP_STATE);
	CHECK(rc == EINVAL, "dead: ibv_modify_qp on a destroyed QP: rc %d", rc);

	rc = ibv_resize_cq(dead_cq, 16);
	CHECK(rc == EINVAL, "dead: ibv_resize_cq on a destroyed CQ: rc %d", rc);
	/* a stale CQ's ack is ignored (void: it must just not touch it) */
	ibv_ack_cq_events(dead_cq, 1);
	CHECK(1, "dead: ibv_ack_cq_events on a destroyed CQ returns");

	errno = 0;
	struct ibv_qp_init_attr ia = { .send_cq = dead_cq, .recv_cq = dead_cq,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_UD };
	struct ibv_qp *q2 = ibv_create_qp(pd, &ia);
	CHECK(!q2 && errno == EINVAL, "dead: ibv_create_qp with a destroyed CQ: %p errno %d",
	      (void *)q2, errno);
	ia.send_cq = cq;
	errno = 0;
	q2 = ibv_create_qp(pd, &ia);
	CHECK(!q2 && errno == EINVAL,
	      "dead: ibv_create_qp with a live send CQ and a destroyed recv CQ: %p errno %d",
	      (void *)q2, errno);

	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	if (!srq || ibv_destroy_srq(srq))
		die("srq");
	struct ibv_srq_attr sa = { .srq_limit = 1 };
	rc = ibv_query_srq(srq, &sa);
	CHECK(rc == EINVAL, "dead: ibv_query_srq on a destroyed SRQ: rc %d", rc);
	rc = ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT);
	CHECK(rc == EINVAL, "dead: ibv_modify_srq on a destroyed SRQ: rc %d", rc);
	ia.recv_cq = cq;
	ia.srq = srq;
	errno = 0;
	q2 = ibv_create_qp(pd, &ia);
	CHECK(!q2 && errno == EINVAL, "dead: ibv_create_qp with a destroyed SRQ: %p errno %d",
	      (void *)q2, errno);
	ia.srq = NULL;

	struct ibv_pd *dead_pd = ibv_alloc_pd(ctx);
	if (!dead_pd || ibv_dealloc_pd(dead_pd))
		die("pd");
	errno = 0;
	struct ibv_mr *m2 = ibv_reg_mr(dead_pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(!m2 && errno == EINVAL, "dead: ibv_reg_mr on a deallocated PD: %p errno %d",
	      (void *)m2, errno);
	errno = 0;
	q2 = ibv_create_qp(dead_pd, &ia);
	CHECK(!q2 && errno == EINVAL, "dead: ibv_create_qp on a deallocated PD: %p errno %d",
	      (void *)q2, errno);
	errno = 0;
	struct ibv_srq *s2 = ibv_create_srq(dead_pd, &si);
	CHECK(!s2 && errno == EINVAL, "dead: ibv_create_srq on a deallocated PD: %p errno %d",
	      (void *)s2, errno);
	errno = 0;
	struct ibv_mw *w2 = ctx->ops.alloc_mw(dead_pd, IBV_MW_TYPE_2);
	CHECK(!w2 && errno == EINVAL, "dead: ibv_alloc_mw on a deallocated PD: %p errno %d",
	      (void *)w2, errno);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!ch || ibv_destroy_comp_channel(ch))
		die("channel");
	errno = 0;
	struct ibv_cq *c2 = ibv_create_cq(ctx, 8, NULL, ch, 0);
	CHECK(!c2 && errno == EINVAL,
	      "dead: ibv_create_cq with a destroyed completion channel: %p errno %d", (void *)c2,
	      errno);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	CHECK(rc == -1 && errno == EINVAL,
	      "dead: ibv_get_cq_event on a destroyed channel: rc %d errno %d", rc, errno);

	/* a closed context, and objects left on it when it was closed (the
	 * close takes them with it, as the kernel destroys them) */
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *cx2 = list && n > 0 ? ibv_open_device(list[0]) : NULL;
	ibv_free_device_list(list);
	struct ibv_pd *pd2 = cx2 ? ibv_alloc_pd(cx2) : NULL;
	struct ibv_cq *cq2 = cx2 ? ibv_create_cq(cx2, 8, NULL, NULL, 0) : NULL;
	struct ibv_mr *mr2 = pd2 ? ibv_reg_mr(pd2, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr2 || !cq2)
		die("second context");
	rc = ibv_close_device(cx2);
	CHECK(rc == 0, "dead: ibv_close_device with a PD, an MR and a CQ left: rc %d", rc);
	errno = 0;
	struct ibv_pd *p3 = ibv_alloc_pd(cx2);
	CHECK(!p3 && errno == EINVAL, "dead: ibv_alloc_pd on a closed context: %p errno %d",
	      (void *)p3, errno);
	struct ibv_device_attr da;
	rc = ibv_query_device(cx2, &da);
	CHECK(rc == EINVAL, "dead: ibv_query_device on a closed context: rc %d", rc);
	rc = ibv_dereg_mr(mr2);
	CHECK(rc == EINVAL, "dead: ibv_dereg_mr of a closed context's MR: rc %d", rc);
	rc = ibv_destroy_cq(cq2);
	CHECK(rc == EINVAL, "dead: ibv_destroy_cq of a closed context's CQ: rc %d", rc);
	rc = ibv_dealloc_pd(pd2);
	CHECK(rc == EINVAL, "dead: ibv_dealloc_pd of a closed context's PD: rc %d", rc);

	if (ibv_destroy_cq(cq) || ibv_dereg_mr(mr))
		die("cleanup");
}

static void busy(void)
{
	int rc;
	struct ibv_pd *p = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = p ? ibv_reg_mr(p, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		die("pd/mr");
	errno = 0;
	rc = ibv_dealloc_pd(p);
	CHECK(rc == EBUSY && errno == EBUSY, "busy: ibv_dealloc_pd with an MR: rc %d errno %d", rc,
	      errno);
	struct ibv_mr *m2 = ibv_reg_mr(p, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(m2 != NULL, "busy: the PD still registers after the EBUSY: %p", (void *)m2);
	rc = ibv_dereg_mr(mr);
	CHECK(rc == 0, "busy: ibv_dereg_mr of the first MR: rc %d", rc);
	rc = ibv_dealloc_pd(p);
	CHECK(rc == EBUSY, "busy: ibv_dealloc_pd with one MR left: rc %d", rc);
	rc = m2 ? ibv_dereg_mr(m2) : -1;
	CHECK(rc == 0, "busy: ibv_dereg_mr of the second MR: rc %d", rc);
	rc = ibv_dealloc_pd(p);
	CHECK(rc == 0, "busy: ibv_dealloc_pd once empty: rc %d", rc);

	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *qp = cq ? ud_qp(cq, NULL) : NULL;
	if (!qp)
		die("cq/qp");
	rc = ibv_destroy_cq(cq);
	CHECK(rc == EBUSY, "busy: ibv_destroy_cq with a QP on it: rc %d", rc);
	struct ibv_wc wc;
	rc = ibv_poll_cq(cq, 1, &wc);
	CHECK(rc == 0, "busy: the CQ still polls after the EBUSY: rc %d", rc);
	rc = ibv_resize_cq(cq, 16);
	CHECK(rc == 0, "busy: the CQ still resizes after the EBUSY: rc %d", rc);

	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	struct ibv_qp *sq = srq ? ud_qp(cq, srq) : NULL;
	if (!sq)
		die("srq/qp");
	rc = ibv_destroy_srq(srq);
	CHECK(rc == EBUSY, "busy: ibv_destroy_srq with a QP on it: rc %d", rc);
	struct ibv_srq_attr sa;
	rc = ibv_query_srq(srq, &sa);
	CHECK(rc == 0 && sa.max_wr >= 4, "busy: the SRQ still answers after the EBUSY: rc %d", rc);

	rc = ibv_destroy_qp(qp);
	CHECK(rc == 0, "busy: ibv_destroy_qp: rc %d", rc);
	rc = ibv_destroy_cq(cq);
	CHECK(rc == EBUSY, "busy: ibv_destroy_cq with the SRQ's QP on it: rc %d", rc);
	rc = ibv_destroy_qp(sq);
	CHECK(rc == 0, "busy: ibv_destroy_qp of the SRQ's QP: rc %d", rc);
	rc = ibv_destroy_srq(srq);
	CHECK(rc == 0, "busy: ibv_destroy_srq once unused: rc %d", rc);
	rc = ibv_destroy_cq(cq);
	CHECK(rc == 0, "busy: ibv_destroy_cq once unused: rc %d", rc);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *c1 = ch ? ibv_create_cq(ctx, 8, NULL, ch, 0) : NULL;
	struct ibv_cq *c2 = ch ? ibv_create_cq(ctx, 8, NULL, ch, 0) : NULL;
	if (!c1 || !c2)
		die("channel/cq");
	errno = 0;
	rc = ibv_destroy_comp_channel(ch);
	CHECK(rc == EBUSY && errno == EBUSY,
	      "busy: ibv_destroy_comp_channel with two CQs: rc %d errno %d", rc, errno);
	rc = ibv_destroy_cq(c1);
	CHECK(rc == 0, "busy: ibv_destroy_cq of the first: rc %d", rc);
	rc = ibv_destroy_comp_channel(ch);
	CHECK(rc == EBUSY, "busy: ibv_destroy_comp_channel with one CQ: rc %d", rc);
	rc = ibv_req_notify_cq(c2, 0);
	CHECK(rc == 0, "busy: the channel's CQ still arms: rc %d", rc);
	rc = ibv_destroy_cq(c2);
	CHECK(rc == 0, "busy: ibv_destroy_cq of the second: rc %d", rc);
	rc = ibv_destroy_comp_channel(ch);
	CHECK(rc == 0, "busy: ibv_destroy_comp_channel once unused: rc %d", rc);
}

static void events(void)
{
	int rc;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!mr || !ch)
		die("mr/channel");
	static int tag1, tag2, tag3;

	/* An event for cq1 is queued and never taken; cq1 goes; a thread
	 * blocked in ibv_get_cq_event is handed cq2's event, never cq1. */
	struct ibv_cq *cq1 = ibv_create_cq(ctx, 8, &tag1, ch, 0);
	if (!cq1)
		die("cq1");
	struct ibv_qp *q1 = flush_event(cq1, mr);
	struct getter g = { .ch = ch, .rc = -2 };
	pthread_t t;
	if (pthread_create(&t, NULL, get_event, &g))
		die("pthread_create");
	/* the getter takes cq1's event at once: the case where the event was
	 * delivered is the next one; here only an undelivered event may be
	 * pending, so wait for the getter first */
	for (int i = 0; i < 500 && !g.done; i++)
		usleep(10000);
	CHECK(g.done && g.rc == 0 && g.cq == cq1 && g.cq_ctx == &tag1,
	      "events: ibv_get_cq_event hands out the flushed receive's CQ: rc %d", g.rc);
	pthread_join(t, NULL);
	ibv_ack_cq_events(cq1, 1);
	struct ibv_wc wc;
	rc = ibv_poll_cq(cq1, 1, &wc);
	CHECK(rc == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 7,
	      "events: the flushed receive's completion: rc %d status %d", rc,
	      rc == 1 ? (int)wc.status : -1);

	/* now a thread blocks; cq1 (acked) is destroyed meanwhile */
	g = (struct getter){ .ch = ch, .rc = -2 };
	if (pthread_create(&t, NULL, get_event, &g))
		die("pthread_create");
	usleep(100000);
	rc = ibv_destroy_qp(q1);
	CHECK(rc == 0, "events: ibv_destroy_qp while a thread waits on the channel: rc %d", rc);
	rc = ibv_destroy_cq(cq1);
	CHECK(rc == 0 && !g.done,
	      "events: ibv_destroy_cq (events acked) while a thread waits on the channel: rc %d",
	      rc);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 8, &tag2, ch, 0);
	if (!cq2)
		die("cq2");
	struct ibv_qp *q2 = flush_event(cq2, mr);
	for (int i = 0; i < 500 && !g.done; i++)
		usleep(10000);
	CHECK(g.done && g.rc == 0 && g.cq == cq2 && g.cq_ctx == &tag2,
	      "events: the waiting thread gets the new CQ's event, not the destroyed one's: rc %d",
	      g.rc);
	pthread_join(t, NULL);
	ibv_ack_cq_events(cq2, 1);

	/* an event queued for a CQ that is destroyed before anyone takes it
	 * is dropped with the CQ */
	struct ibv_cq *cq3 = ibv_create_cq(ctx, 8, &tag3, ch, 0);
	if (!cq3)
		die("cq3");
	struct ibv_qp *q3 = flush_event(cq3, mr);
	usleep(50000);
	if (ibv_destroy_qp(q3))
		die("destroy q3");
	rc = ibv_destroy_cq(cq3);
	CHECK(rc == 0, "events: ibv_destroy_cq with an event not taken: rc %d", rc);

	/* ibv_destroy_cq waits for the acknowledgement of a delivered event */
	struct ibv_cq *got = NULL;
	void *got_ctx = NULL;
	if (ibv_destroy_qp(q2))
		die("destroy q2");
	q2 = flush_event(cq2, mr);
	rc = ibv_get_cq_event(ch, &got, &got_ctx);
	CHECK(rc == 0 && got == cq2 && got_ctx == &tag2,
	      "events: the event of the CQ left is cq2's (not the dropped cq3's): rc %d", rc);
	if (ibv_destroy_qp(q2))
		die("destroy q2");
	struct destroyer d = { .cq = cq2, .rc = -2 };
	double t0 = now_s();
	if (pthread_create(&t, NULL, destroy_cq_thread, &d))
		die("pthread_create");
	usleep(300000);
	CHECK(!d.done, "events: ibv_destroy_cq waits while a delivered event is not acked");
	ibv_ack_cq_events(cq2, 1);
	pthread_join(t, NULL);
	CHECK(d.done && d.rc == 0 && now_s() - t0 >= 0.29,
	      "events: ibv_destroy_cq returns 0 after the ack: rc %d after %.3f s", d.rc,
	      now_s() - t0);
	rc = ibv_destroy_cq(cq2);
	CHECK(rc == EINVAL, "events: and the CQ is gone: rc %d", rc);

	rc = ibv_destroy_comp_channel(ch);
	CHECK(rc == 0, "events: ibv_destroy_comp_channel: rc %d", rc);
	if (ibv_dereg_mr(mr))
		die("dereg");
}

/* ---- racing: destroys of QPs while another thread polls their CQ ---- */

#define RACE_ROUNDS 150
#define RACE_WRS 8

struct poller {
	struct ibv_cq *cq;
	volatile int stop;
	uint32_t qpns[RACE_ROUNDS];
	volatile int rounds; /* QPNs published so far */
	unsigned char seen[RACE_ROUNDS][2 * RACE_WRS];
	long got, bad, twice, polls;
	char why[160];
};

/* wr_id: round << 8 | (0x80 for a send) | index */
static void take(struct poller *p, const struct ibv_wc *wc)
{
	unsigned r = (unsigned)(wc->wr_id >> 8), i = (unsigned)(wc->wr_id & 0x7f);
	int send = (wc->wr_id & 0x80) != 0;
	int known = r < RACE_ROUNDS && (int)r < p->rounds && i < RACE_WRS &&
		    (wc->wr_id >> 8) < RACE_ROUNDS;
	int ok_status = wc->status == IBV_WC_SUCCESS || wc->status == IBV_WC_WR_FLUSH_ERR;
	int ok_op = wc->status != IBV_WC_SUCCESS ||
		    (send ? wc->opcode == IBV_WC_SEND : wc->opcode == IBV_WC_RECV);
	p->got++;
	if (!known || !ok_status || !ok_op || wc->qp_num != p->qpns[r]) {
		if (!p->bad++)
			snprintf(p->why, sizeof p->why,
				 "wr_id 0x%llx status %d opcode %d qp 0x%x",
				 (unsigned long long)wc->wr_id, wc->status, wc->opcode, wc->qp_num);
		return;
	}
	if (p->seen[r][send * RACE_WRS + i]++)
		p->twice++;
}

static void *poll_thread(void *arg)
{
	struct poller *p = arg;
	struct ibv_wc wc[16];
	while (!p->stop) {
		int n = ibv_poll_cq(p->cq, 16, wc);
		p->polls++;
		if (n < 0) {
			p->bad++;
			snprintf(p->why, sizeof p->why, "ibv_poll_cq: %d", n);
			break;
		}
		for (int k = 0; k < n; k++)
			take(p, &wc[k]);
	}
	return NULL;
}

static void racing(void)
{
	static struct poller p;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("reg_mr");
	p.cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	if (!p.cq)
		die("cq");
	struct ibv_ah *ah = own_ah();
	pthread_t t;
	if (pthread_create(&t, NULL, poll_thread, &p))
		die("pthread_create");
	/* (under valgrind, which runs one thread at a time and lets the
	 * spinning poller take most of them, 15 rounds) */
	const char *pre = getenv("LD_PRELOAD");
	int rounds = pre && strstr(pre, "vgpreload") ? 15 : RACE_ROUNDS;
	int fails = 0;
	for (int r = 0; r < rounds; r++) {
		struct ibv_qp_init_attr ia = qp_init_attr(p.cq, IBV_QPT_UD, RACE_WRS, RACE_WRS);
		struct ibv_qp *qp = ibv_create_qp(pd, &ia);
		if (!qp || ud_ready(qp, 0x11111111, 0)) {
			fails++;
			if (qp)
				ibv_destroy_qp(qp);
			continue;
		}
		p.qpns[r] = qp->qp_num;
		__sync_synchronize();
		p.rounds = r + 1;
		for (int i = 0; i < RACE_WRS; i++) {
			struct ibv_sge rs = { .addr = (uintptr_t)buf + 256 * (uint64_t)i, .length = 256,
					      .lkey = mr->lkey };
			struct ibv_recv_wr rw = { .wr_id = (uint64_t)r << 8 | (uint64_t)i,
						  .sg_list = &rs, .num_sge = 1 }, *rbad;
			if (ibv_post_recv(qp, &rw, &rbad))
				fails++;
		}
		for (int i = 0; i < RACE_WRS; i++) {
			struct ibv_sge ss = { .addr = (uintptr_t)buf + 2048 + 64 * (uint64_t)i,
					      .length = 64, .lkey = mr->lkey };
			struct ibv_send_wr sw = { .wr_id = (uint64_t)r << 8 | 0x80 | (uint64_t)i,
						  .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED },
					   *sbad;
			sw.wr.ud.ah = ah;
			sw.wr.ud.remote_qpn = qp->qp_num;
			sw.wr.ud.remote_qkey = 0x11111111;
			if (ibv_post_send(qp, &sw, &sbad))
				fails++;
		}
		if (r % 2) {
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
			if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
				fails++;
		}
		if (ibv_destroy_qp(qp))
			fails++;
	}
	usleep(100000);
	p.stop = 1;
	pthread_join(t, NULL);
	CHECK(fails == 0, "racing: %d rounds of create, post 8+8, destroy: %d calls failed",
	      rounds, fails);
	CHECK(p.bad == 0, "racing: every completion polled meanwhile was whole (%ld taken, %ld bad%s%s)",
	      p.got, p.bad, p.bad ? ": " : "", p.why);
	CHECK(p.twice == 0, "racing: none taken twice: %ld", p.twice);
	CHECK(p.polls > rounds, "racing: the poller ran throughout (%ld polls)", p.polls);

	/* the CQ afterwards: a new QP's flushed receive, exactly once */
	struct ibv_wc wc[4];
	while (ibv_poll_cq(p.cq, 4, wc) > 0)
		;
	struct ibv_qp *q = flush_event(p.cq, mr);
	int rc = poll_one(p.cq, wc, 5.0);
	usleep(20000);
	int more = ibv_poll_cq(p.cq, 4, wc + 1);
	CHECK(rc == 0 && wc[0].wr_id == 7 && wc[0].status == IBV_WC_WR_FLUSH_ERR && more == 0,
	      "racing: the CQ then gives a new QP's flushed receive once: rc %d status %d, %d more",
	      rc, rc == 0 ? (int)wc[0].status : -1, more);
	if (ibv_destroy_qp(q) || ibv_destroy_ah(ah) || ibv_destroy_cq(p.cq) || ibv_dereg_mr(mr))
		die("racing: teardown");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	ctx = open_device_at(0);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");

	busy();
	events();
	dead_objects();
	double_destroy();
	racing();

	if (ibv_dealloc_pd(pd))
		die("ibv_dealloc_pd");
	if (ibv_close_device(ctx))
		die("ibv_close_device");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
