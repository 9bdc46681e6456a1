/*
 * sq_flow: flow control by ibv_post_send's ENOMEM (issue 26, finding 6).
 *
 * An HCA frees a send-queue slot when the program polls the completion
 * that frees it (mlx5: a CQE frees its WQE and the unsignaled ones before
 * it), not when the work completes. A program may therefore post until
 * ENOMEM without polling and size its send CQ by max_send_wr: it never
 * holds more unpolled send completions than max_send_wr. Before the fix
 * the drop-in freed the slot when the completion was generated, so such a
 * program kept posting and overran its CQ (CQ error, QP fatal).
 *
 * Two RC QPs on one device, connected to each other. A: max_send_wr 64,
 * send CQ of 256. B: 128 receives posted. A posts 128 32-byte SENDs
 * without polling: exactly 64 are accepted, then ENOMEM; once all 64 have
 * arrived (B's receive completions) and been acknowledged, still ENOMEM.
 * Then A polls one completion at a time and posts again: each poll lets
 * exactly one more post in, until all 128 are done: every completion
 * IBV_WC_SUCCESS in order, no CQ error, both QPs still RTS, B's 128
 * receives carry the right bytes.
 *
 * `sq_flow ex` does the same with an extended send CQ (ibv_create_cq_ex,
 * ibv_start_poll/ibv_next_poll/ibv_end_poll): reading one completion
 * frees exactly one slot, though the library takes a batch at once.
 *
 * Prints one line per check and "N failures"; exits 1 on a failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "common.h"

#define DEPTH 64  /* A's max_send_wr */
#define TOTAL 128 /* SENDs, and B's receives */
#define CQ 256
#define MSG 32

static int connect_rc(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct rc_path p = rc_path(dest, *gid);

	p.rq_psn = 7;
	p.sq_psn = 7;
	return rc_connect(qp, IBV_ACCESS_LOCAL_WRITE, &p);
}

static struct ibv_qp *qp_a, *qp_b;
static struct ibv_mr *mr_send;
static unsigned char sendbuf[TOTAL * MSG], recvbuf[TOTAL * MSG];
static struct ibv_cq *rcq;
static struct ibv_cq_ex *scq_ex; /* `ex` mode */
static struct ibv_cq *scq;
static int posted, polled, received, bad_post, bad_wc, recv_bad, poll_err;

/* Post SEND number `posted`: 0 or the error ibv_post_send returned. */
static int post_one(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(sendbuf + posted * MSG),
			       .length = MSG,
			       .lkey = mr_send->lkey };
	struct ibv_send_wr wr = { .wr_id = (uint64_t)posted,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp_a, &wr, &bad);

	if (rc == 0)
		posted++;
	else if (rc != ENOMEM || bad != &wr)
		bad_post++;
	return rc;
}

/* Post until ENOMEM (or all posted): how many were accepted. */
static int post_until_full(int *last_rc)
{
	int n = 0, rc = 0;

	while (posted < TOTAL && (rc = post_one()) == 0)
		n++;
	*last_rc = rc;
	return n;
}

/* Take B's receive completions (an empty poll also moves the device). */
static void poll_recv(void)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(rcq, 16, wc);

	if (n < 0)
		poll_err++;
	for (int i = 0; i < n; i++) {
		uint64_t id = wc[i].wr_id;
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV ||
		    wc[i].byte_len != MSG || id != (uint64_t)received)
			recv_bad++;
		received++;
	}
}

static void check_send_wc(uint64_t wr_id, enum ibv_wc_status st)
{
	if (st != IBV_WC_SUCCESS || wr_id != (uint64_t)polled)
		bad_wc++;
	polled++;
}

/* One send completion, if there is one: 1, 0, or -1 on a CQ error. */
static int poll_send_one(void)
{
	struct ibv_wc wc;
	int n = ibv_poll_cq(scq, 1, &wc);

	if (n == 1) {
		check_send_wc(wc.wr_id, wc.status);
		if (wc.opcode != IBV_WC_SEND)
			bad_wc++;
	}
	return n;
}

int main(int argc, char **argv)
{
	int ex = argc > 1 && strcmp(argv[1], "ex") == 0;
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_context *ctx = open_device_at(0);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (ex) {
		struct ibv_cq_init_attr_ex ca = {
			.cqe = CQ,
			.wc_flags = IBV_WC_STANDARD_FLAGS,
		};
		scq_ex = ibv_create_cq_ex(ctx, &ca);
		scq = scq_ex ? ibv_cq_ex_to_cq(scq_ex) : NULL;
	} else {
		scq = ibv_create_cq(ctx, CQ, NULL, NULL, 0);
	}
	rcq = ibv_create_cq(ctx, CQ, NULL, NULL, 0);
	if (!pd || !scq || !rcq)
		die("pd/cq");
	for (int i = 0; i < TOTAL * MSG; i++)
		sendbuf[i] = (unsigned char)(i * 7 + i / MSG);
	mr_send = ibv_reg_mr(pd, sendbuf, sizeof sendbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr_recv =
		ibv_reg_mr(pd, recvbuf, sizeof recvbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr_send || !mr_recv)
		die("ibv_reg_mr");
	struct ibv_qp_init_attr ia = qp_init_attr(scq, IBV_QPT_RC, DEPTH, 1);
	ia.recv_cq = rcq;
	qp_a = ibv_create_qp(pd, &ia);
	ia.send_cq = rcq;
	ia.cap.max_send_wr = 1;
	ia.cap.max_recv_wr = TOTAL;
	qp_b = ibv_create_qp(pd, &ia);
	union ibv_gid gid;
	if (!qp_a || !qp_b || ibv_query_gid(ctx, 1, 1, &gid))
		die("ibv_create_qp/gid");
	if (connect_rc(qp_a, qp_b->qp_num, &gid) || connect_rc(qp_b, qp_a->qp_num, &gid))
		die("connect");
	for (int i = 0; i < TOTAL; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(recvbuf + i * MSG),
				       .length = MSG,
				       .lkey = mr_recv->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad;
		if (ibv_post_recv(qp_b, &wr, &bad))
			die("ibv_post_recv");
	}
	printf("mode: %s\n", ex ? "extended CQ (ibv_start_poll)" : "ibv_poll_cq");

	/* 1. post all 128 without polling the send CQ */
	int got = post_until_full(&rc);
	CHECK(got == DEPTH && rc == ENOMEM,
	      "post %d SENDs without polling (max_send_wr %d): %d accepted, then %s",
	      TOTAL, DEPTH, got, rc ? strerror(rc) : "no error");

	/* 2. all accepted ones delivered and acknowledged: still no slot */
	double end = now_s() + 10;
	while (received < posted && now_s() < end)
		poll_recv();
	CHECK(received == DEPTH && recv_bad == 0,
	      "the %d accepted SENDs arrived: %d receive completions", DEPTH, received);
	end = now_s() + 0.2;
	while (now_s() < end)
		poll_recv(); /* moves the device: the ACKs complete A's WQEs */
	rc = posted < TOTAL ? post_one() : 0; /* (never past the buffer) */
	CHECK(rc == ENOMEM,
	      "completed but unpolled send completions hold their slots: %s",
	      rc ? strerror(rc) : "accepted");

	/* 3. poll one, post one, until every SEND is done */
	int extra = 0, in_poll_post = -1, batch_post = -1;
	end = now_s() + 20;
	while (polled < TOTAL && now_s() < end && !poll_err) {
		if (ex) {
			struct ibv_poll_cq_attr pa = { 0 };
			rc = ibv_start_poll(scq_ex, &pa);
			if (rc == 0) {
				check_send_wc(scq_ex->wr_id, scq_ex->status);
				if (ibv_wc_read_opcode(scq_ex) != IBV_WC_SEND)
					bad_wc++;
				/* one read, one slot: the rest of the batch
				 * the library took stays held */
				if (in_poll_post < 0 && posted < TOTAL) {
					int r1 = post_one();
					int r2 = posted < TOTAL ? post_one() : ENOMEM;
					in_poll_post = r1 == 0 && r2 == ENOMEM;
				}
				while (ibv_next_poll(scq_ex) == 0)
					check_send_wc(scq_ex->wr_id, scq_ex->status);
				ibv_end_poll(scq_ex);
			} else if (rc != ENOENT) {
				poll_err++;
			}
		} else {
			rc = poll_send_one();
			if (rc < 0)
				poll_err++;
		}
		int before = posted;
		int k = post_until_full(&rc);
		/* posted - polled never passes max_send_wr, and reaches it */
		if (posted - polled > DEPTH ||
		    (posted < TOTAL && (rc != ENOMEM || posted - polled != DEPTH)))
			extra++;
		if (!ex && batch_post < 0 && polled == 1)
			batch_post = k == 1 && before == DEPTH;
		poll_recv();
	}
	if (ex)
		CHECK(in_poll_post == 1,
		      "ibv_start_poll's completion frees one slot: one post accepted, the next ENOMEM");
	else
		CHECK(batch_post == 1, "the first polled completion lets exactly one more post in");
	CHECK(extra == 0 && bad_post == 0,
	      "while posting on: ENOMEM exactly when %d are unpolled (%d off, %d bad posts)",
	      DEPTH, extra, bad_post);
	CHECK(polled == TOTAL && posted == TOTAL && bad_wc == 0,
	      "%d of %d send completions, all IBV_WC_SUCCESS IBV_WC_SEND in order (%d bad)",
	      polled, TOTAL, bad_wc);
	CHECK(poll_err == 0, "no CQ error (ibv_poll_cq never failed)");

	end = now_s() + 10;
	while (received < TOTAL && now_s() < end)
		poll_recv();
	CHECK(received == TOTAL && recv_bad == 0, "%d receive completions, all IBV_WC_SUCCESS",
	      received);
	CHECK(memcmp(sendbuf, recvbuf, sizeof recvbuf) == 0,
	      "the %d receive buffers hold the bytes sent", TOTAL);

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	memset(&qa, 0, sizeof qa);
	rc = ibv_query_qp(qp_a, &qa, IBV_QP_STATE | IBV_QP_CAP, &qi);
	CHECK(rc == 0 && qa.qp_state == IBV_QPS_RTS,
	      "ibv_query_qp: the sender is still RTS (state %d)", qa.qp_state);
	CHECK(rc == 0 && qa.cap.max_send_wr == DEPTH && qi.cap.max_send_wr == DEPTH,
	      "ibv_query_qp: cap.max_send_wr still %d (%u)", DEPTH, qa.cap.max_send_wr);
	memset(&qa, 0, sizeof qa);
	rc = ibv_query_qp(qp_b, &qa, IBV_QP_STATE, &qi);
	CHECK(rc == 0 && qa.qp_state == IBV_QPS_RTS,
	      "ibv_query_qp: the receiver is still RTS (state %d)", qa.qp_state);

	ibv_destroy_qp(qp_a);
	ibv_destroy_qp(qp_b);
	ibv_dereg_mr(mr_send);
	ibv_dereg_mr(mr_recv);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
