/*
 * XRC through the drop-in, in one process on two devices: B (device 0)
 * has an XRC domain opened by a file, two XRC SRQs with a CQ each, and a
 * target QP; A (device 1) an initiator QP connected to the target. Checks
 * the bytes and the CQ of SENDs to each SRQ, an RDMA WRITE, the domain's
 * file semantics and errnos, and a request naming another domain's SRQ.
 * Run by tests/semantics.rs. Exit 0 with "0 failures" when all passed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common.h"

static struct side a, b;

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex s;

	memset(&s, 0, sizeof(s));
	s.attr.max_wr = 8;
	s.attr.max_sge = 1;
	s.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
		      IBV_SRQ_INIT_ATTR_PD;
	s.srq_type = IBV_SRQT_XRC;
	s.xrcd = x;
	s.cq = cq;
	s.pd = b.pd;
	return ibv_create_srq_ex(b.ctx, &s);
}

static void post_srq(struct ibv_srq *s, uint64_t id, int off)
{
	struct ibv_sge sge = { .addr = (uintptr_t)b.buf + off, .length = 512, .lkey = b.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_srq_recv(s, &wr, &bad))
		die("post_srq_recv");
}

static int send_to(struct ibv_qp *ini, uint32_t srqn, int off, int len, uint64_t id,
		   enum ibv_wr_opcode op, uint64_t raddr)
{
	struct ibv_sge sge = { .addr = (uintptr_t)a.buf + off, .length = len, .lkey = a.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;

	wr.qp_type.xrc.remote_srqn = srqn;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = b.mr->rkey;
	if (ibv_post_send(ini, &wr, &bad))
		return -1;
	if (poll_one(a.cq, &wc, 20))
		return -2;
	return wc.status;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 2)
		die("two devices");
	open_side(list[0], &b, 16, NULL);
	open_side(list[1], &a, 16, NULL);
	for (struct side *s = &a; s; s = s == &a ? &b : NULL) {
		s->buf = calloc(1, 8192);
		s->mr = ibv_reg_mr(s->pd, s->buf, 8192,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!s->mr)
			die("mr");
	}
	char path[] = "/tmp/roce-xrc-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		die("mkstemp");

	/* the domain, by the file */
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						      IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = fd,
					 .oflags = 0 };
	errno = 0;
	CHECK(ibv_open_xrcd(b.ctx, &xa) == NULL && errno == EAGAIN,
	      "ibv_open_xrcd of a file with no domain, without O_CREAT: EAGAIN");
	xa.oflags = O_CREAT;
	struct ibv_xrcd *x = ibv_open_xrcd(b.ctx, &xa);
	CHECK(x != NULL, "ibv_open_xrcd(O_CREAT)");
	if (!x)
		die("xrcd");
	xa.oflags = O_CREAT | O_EXCL;
	errno = 0;
	CHECK(ibv_open_xrcd(b.ctx, &xa) == NULL && errno == EINVAL,
	      "O_CREAT | O_EXCL on a file that has a domain: EINVAL");
	xa.oflags = 0;
	struct ibv_xrcd *x2 = ibv_open_xrcd(b.ctx, &xa);
	CHECK(x2 != NULL, "the same file again: the same domain");

	struct ibv_cq *cq1 = ibv_create_cq(b.ctx, 8, NULL, NULL, 0);
	struct ibv_cq *cq2 = ibv_create_cq(b.ctx, 8, NULL, NULL, 0);
	struct ibv_srq *s1 = xrc_srq(x, cq1), *s2 = xrc_srq(x2, cq2);
	CHECK(s1 && s2, "two XRC SRQs (one made through each handle)");
	if (!s1 || !s2)
		die("srqs");
	uint32_t n1 = 0, n2 = 0;
	CHECK(ibv_get_srq_num(s1, &n1) == 0 && ibv_get_srq_num(s2, &n2) == 0 && n1 != n2,
	      "ibv_get_srq_num: %u and %u", n1, n2);

	struct ibv_qp_init_attr_ex ti;
	memset(&ti, 0, sizeof(ti));
	ti.qp_type = IBV_QPT_XRC_RECV;
	ti.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	ti.xrcd = x;
	struct ibv_qp *tgt = ibv_create_qp_ex(b.ctx, &ti);
	CHECK(tgt && tgt->qp_type == IBV_QPT_XRC_RECV && tgt->pd == NULL,
	      "an XRC_RECV QP: no PD of its own");
	struct ibv_qp_init_attr_ex ii;
	memset(&ii, 0, sizeof(ii));
	ii.qp_type = IBV_QPT_XRC_SEND;
	ii.send_cq = a.cq;
	ii.cap.max_send_wr = 8;
	ii.cap.max_send_sge = 1;
	ii.comp_mask = IBV_QP_INIT_ATTR_PD;
	ii.pd = a.pd;
	struct ibv_qp *ini = ibv_create_qp_ex(a.ctx, &ii);
	CHECK(ini && ini->qp_type == IBV_QPT_XRC_SEND, "an XRC_SEND QP");
	if (!tgt || !ini)
		die("qps");
	struct rc_path pa = rc_path(tgt->qp_num, b.gid), pb = rc_path(ini->qp_num, a.gid);
	pa.retry_cnt = 1;
	pa.timeout = 10;
	if (rc_connect(ini, 0, &pa) || rc_connect(tgt, IBV_ACCESS_REMOTE_WRITE, &pb))
		die("connect");
	struct ibv_recv_wr rw = { .wr_id = 1 }, *bad;
	CHECK(ibv_post_recv(ini, &rw, &bad) != 0, "an initiator has no receive queue");

	post_srq(s1, 11, 0);
	post_srq(s2, 22, 1024);
	for (int i = 0; i < 300; i++)
		a.buf[i] = (uint8_t)(i * 7 + 1);
	CHECK(send_to(ini, n2, 0, 300, 1, IBV_WR_SEND, 0) == IBV_WC_SUCCESS,
	      "SEND to the second SRQ completes");
	CHECK(send_to(ini, n1, 100, 50, 2, IBV_WR_SEND, 0) == IBV_WC_SUCCESS,
	      "SEND to the first SRQ completes");
	struct ibv_wc w1, w2;
	int g2 = poll_one(cq2, &w2, 10) == 0, g1 = poll_one(cq1, &w1, 10) == 0;
	CHECK(g2 && w2.wr_id == 22 && w2.byte_len == 300 && w2.qp_num == tgt->qp_num &&
		      !memcmp(b.buf + 1024, a.buf, 300),
	      "the second SRQ's receive: its CQ, 300 bytes, the target's QPN, the bytes");
	CHECK(g1 && w1.wr_id == 11 && w1.byte_len == 50 && !memcmp(b.buf, a.buf + 100, 50),
	      "the first SRQ's receive: its CQ, 50 bytes, the bytes");
	CHECK(send_to(ini, n1, 0, 200, 3, IBV_WR_RDMA_WRITE, (uintptr_t)b.buf + 4096) ==
			      IBV_WC_SUCCESS &&
		      !memcmp(b.buf + 4096, a.buf, 200),
	      "an RDMA WRITE through the target lands (the SRQ's PD's key)");
	errno = 0;
	int rc = ibv_close_xrcd(x);
	CHECK(rc == 0, "closing one of two handles of the domain: 0");
	rc = ibv_close_xrcd(x2);
	CHECK(rc == EBUSY, "closing the last handle while SRQs and the QP use it: EBUSY (%d)", rc);

	/* an SRQ of another domain: an invalid request */
	struct ibv_xrcd_init_attr oa = { .comp_mask = IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
					 .oflags = O_CREAT };
	struct ibv_xrcd *other = ibv_open_xrcd(b.ctx, &oa);
	struct ibv_cq *cq3 = ibv_create_cq(b.ctx, 8, NULL, NULL, 0);
	struct ibv_srq *s3 = other ? xrc_srq(other, cq3) : NULL;
	uint32_t n3 = 0;
	if (!s3 || ibv_get_srq_num(s3, &n3))
		die("foreign srq");
	post_srq(s3, 33, 2048);
	CHECK(send_to(ini, n3, 0, 8, 4, IBV_WR_SEND, 0) == IBV_WC_REM_INV_REQ_ERR,
	      "a SEND naming another domain's SRQ: REM_INV_REQ_ERR");
	CHECK(qp_state(tgt) == IBV_QPS_ERR, "the target QP went to ERR");

	CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0, "QPs destroyed");
	CHECK(ibv_destroy_srq(s1) == 0 && ibv_destroy_srq(s2) == 0 && ibv_destroy_srq(s3) == 0,
	      "SRQs destroyed");
	CHECK(ibv_close_xrcd(x2) == 0 && ibv_close_xrcd(other) == 0,
	      "the domains close once nothing uses them");
	close(fd);
	unlink(path);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
