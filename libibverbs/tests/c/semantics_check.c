/* Verbs semantics that middleware (UCX, libfabric, qperf) and rdma-core's
 * own tools rely on, checked through the libibverbs drop-in in one
 * process. One part per run, named by argv[1]:
 *
 *  flow    ah_attr.grh.flow_label = 0xFFFFFFFF (UCX passes ~0) is taken
 *          by ibv_modify_qp and ibv_create_ah; the low 20 bits are kept
 *          and the QP carries traffic;
 *  errno   every failing verb that returns an error number also leaves
 *          it in errno; verbs returning NULL set errno;
 *  ud      a UD receive completion over IPv4 as a RoCE v2 NIC reports it:
 *          IBV_WC_GRH, src_qp, slid 0, dlid_path_bits 0, sl 2 (the IPv4
 *          packet type of mlx5's CQE, which UCX reads), the IPv4 header
 *          in the last 20 bytes of the 40-byte GRH area (rxe's layout);
 *  ud6     the same over IPv6 (one device on ::1, two QPs): sl 1, the
 *          IPv6 header in all 40 bytes;
 *  inline  max_inline_data rounded up as rxe sizes a send WQE: a QP made
 *          with max_inline_data 0 takes a 16-byte inline SEND; the real
 *          values come back from ibv_create_qp and ibv_query_qp.
 *
 * Prints one line per check ("ok ..." / "FAIL ...") and exits 0 only if
 * every check held (77: the part cannot run here, e.g. ::1:4791 is
 * taken). Built and run by tests/semantics.rs. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common.h"

/* A verb's return value and errno after it (errno cleared before). */
#define CALL_RC(rc, err, expr)                                                 \
	do {                                                                   \
		errno = 0;                                                     \
		rc = (expr);                                                   \
		err = errno;                                                   \
	} while (0)

#define BUF 4096

/* open_side and a registered buffer of BUF bytes. */
static void open_buf_side(struct ibv_device *dev, struct side *s)
{
	open_side(dev, s, 64, NULL);
	s->buf = calloc(1, BUF);
	if (!s->buf)
		die("calloc");
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr)
		die("ibv_reg_mr");
}

static struct ibv_qp *make_qp(struct side *s, enum ibv_qp_type t,
			      uint32_t sge, uint32_t inl, struct ibv_qp_cap *out)
{
	struct ibv_qp_init_attr ia = qp_init_attr(s->cq, t, 16, 16);
	struct ibv_qp *qp;

	ia.cap.max_send_sge = sge;
	ia.cap.max_inline_data = inl;
	qp = ibv_create_qp(s->pd, &ia);
	if (qp && out)
		*out = ia.cap;
	return qp;
}

#define QKEY 0x11111111

static int to_init(struct ibv_qp *qp, int ud)
{
	return ud ? ud_init(qp, QKEY) : rc_init(qp, IBV_ACCESS_REMOTE_WRITE);
}

/* RC INIT -> RTR -> RTS towards `peer` with the given flow label. */
static int connect_to(struct ibv_qp *qp, struct ibv_qp *peer,
		      union ibv_gid *dgid, uint32_t flow_label)
{
	struct rc_path p = rc_path(peer->qp_num, *dgid);

	p.flow_label = flow_label;
	return rc_connect(qp, IBV_ACCESS_REMOTE_WRITE, &p);
}

static int post_recv(struct side *s, struct ibv_qp *qp, uint32_t off,
		     uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)(s->buf + off), len, s->mr->lkey };
	struct ibv_recv_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

/* An RC SEND of `len` bytes from `src` (inline when asked), waited for. */
static int rc_send(struct side *s, struct ibv_qp *qp, const void *src,
		   uint32_t len, int inl, struct ibv_wc *wc)
{
	struct ibv_sge sge = { (uintptr_t)src, len, inl ? 0 : s->mr->lkey };
	struct ibv_send_wr wr, *bad;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 7;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
	rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		return rc;
	return poll_one(s->cq, wc, 10) ? -1 : 0;
}

static void open_two(struct side *a, struct side *b)
{
	struct ibv_device **list;
	int num;

	list = ibv_get_device_list(&num);
	if (!list || num < 2)
		die("ibv_get_device_list: two devices");
	open_buf_side(list[0], a);
	open_buf_side(list[1], b);
}

/* ---------------------------------------------------------------- flow */

static int part_flow(void)
{
	struct side a, b;
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	struct ibv_ah_attr ah;
	struct ibv_ah *h;
	struct ibv_wc wc;
	int rc;

	open_two(&a, &b);
	a.qp = make_qp(&a, IBV_QPT_RC, 1, 64, NULL);
	b.qp = make_qp(&b, IBV_QPT_RC, 1, 64, NULL);
	if (!a.qp || !b.qp)
		die("ibv_create_qp");
	if (to_init(a.qp, 0))
		die("INIT");
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_RTR;
	q.path_mtu = IBV_MTU_1024;
	q.dest_qp_num = b.qp->qp_num;
	q.max_dest_rd_atomic = 1;
	q.min_rnr_timer = 12;
	q.ah_attr.is_global = 1;
	q.ah_attr.grh.dgid = b.gid;
	q.ah_attr.grh.sgid_index = 1;
	q.ah_attr.grh.hop_limit = 64;
	q.ah_attr.grh.flow_label = 0xFFFFFFFF;
	q.ah_attr.port_num = 1;
	rc = ibv_modify_qp(a.qp, &q,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	CHECK(rc == 0, "ibv_modify_qp to RTR with flow_label 0xFFFFFFFF: %d", rc);
	memset(&q, 0, sizeof(q));
	rc = ibv_query_qp(a.qp, &q, IBV_QP_AV, &qi);
	CHECK(rc == 0 && q.ah_attr.grh.flow_label == 0xFFFFF,
	      "ibv_query_qp: flow_label 0x%x (the low 20 bits)",
	      q.ah_attr.grh.flow_label);
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_RTS;
	q.timeout = 14;
	q.retry_cnt = 7;
	q.rnr_retry = 7;
	q.max_rd_atomic = 1;
	rc = ibv_modify_qp(a.qp, &q,
			   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				   IBV_QP_MAX_QP_RD_ATOMIC);
	CHECK(rc == 0, "ibv_modify_qp to RTS: %d", rc);
	rc = connect_to(b.qp, a.qp, &a.gid, 0x12345678);
	CHECK(rc == 0, "the peer to RTS with flow_label 0x12345678: %d", rc);
	memset(&q, 0, sizeof(q));
	ibv_query_qp(b.qp, &q, IBV_QP_AV, &qi);
	CHECK(q.ah_attr.grh.flow_label == 0x45678,
	      "ibv_query_qp: flow_label 0x%x", q.ah_attr.grh.flow_label);

	/* the QP carries traffic */
	memcpy(a.buf, "flow label ~0 works", 20);
	post_recv(&b, b.qp, 0, 64, 1);
	rc = rc_send(&a, a.qp, a.buf, 20, 0, &wc);
	CHECK(rc == 0 && wc.status == IBV_WC_SUCCESS,
	      "SEND over the QP: status %s", ibv_wc_status_str(wc.status));
	rc = poll_one(b.cq, &wc, 10);
	CHECK(rc == 0 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 20 &&
		      memcmp(b.buf, "flow label ~0 works", 20) == 0,
	      "the peer received \"%.19s\"", (char *)b.buf);

	/* ibv_create_ah */
	memset(&ah, 0, sizeof(ah));
	ah.is_global = 1;
	ah.grh.dgid = b.gid;
	ah.grh.sgid_index = 1;
	ah.grh.hop_limit = 64;
	ah.grh.flow_label = 0xFFFFFFFF;
	ah.port_num = 1;
	errno = 0;
	h = ibv_create_ah(a.pd, &ah);
	CHECK(h != NULL, "ibv_create_ah with flow_label 0xFFFFFFFF (errno %d)",
	      errno);
	if (h)
		ibv_destroy_ah(h);
	return 0;
}

/* ---------------------------------------------------------------- errno */

static int part_errno(void)
{
	struct side a, b;
	struct ibv_qp_attr q;
	struct ibv_port_attr pa;
	struct ibv_send_wr sw, *bad_s;
	struct ibv_recv_wr rw, *bad_r;
	struct ibv_sge sge[4];
	struct ibv_srq_init_attr si;
	struct ibv_srq_attr sa;
	struct ibv_srq *srq;
	struct ibv_comp_channel *ch;
	struct ibv_cq *chcq;
	struct ibv_qp_init_attr ia;
	struct ibv_gid_entry ge[1];
	struct ibv_ah_attr ah;
	struct ibv_qp_ex *qx;
	uint8_t big[600];
	void *p;
	ssize_t n;
	int rc, err, i;

	open_two(&a, &b);
	a.qp = make_qp(&a, IBV_QPT_RC, 1, 64, NULL);
	if (!a.qp)
		die("ibv_create_qp");
	memset(big, 'x', sizeof(big));

	/* ibv_modify_qp: RESET -> RTR is no legal transition */
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_RTR;
	CALL_RC(rc, err, ibv_modify_qp(a.qp, &q, IBV_QP_STATE));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_modify_qp RESET->RTR: returns %d, errno %d (EINVAL)", rc, err);
	/* ibv_modify_qp: RTR without a GRH on RoCE */
	to_init(a.qp, 0);
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_RTR;
	q.path_mtu = IBV_MTU_1024;
	q.dest_qp_num = 17;
	q.ah_attr.port_num = 1;
	CALL_RC(rc, err,
		ibv_modify_qp(a.qp, &q,
			      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC |
				      IBV_QP_MIN_RNR_TIMER));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_modify_qp RTR without GRH: returns %d, errno %d (EINVAL)",
	      rc, err);

	/* ibv_post_send: a QP in INIT cannot send */
	memset(&sw, 0, sizeof(sw));
	sge[0].addr = (uintptr_t)a.buf;
	sge[0].length = 8;
	sge[0].lkey = a.mr->lkey;
	sw.sg_list = sge;
	sw.num_sge = 1;
	sw.opcode = IBV_WR_SEND;
	bad_s = NULL;
	CALL_RC(rc, err, ibv_post_send(a.qp, &sw, &bad_s));
	CHECK(rc == EINVAL && err == EINVAL && bad_s == &sw,
	      "ibv_post_send in INIT: returns %d, errno %d (EINVAL), bad_wr set",
	      rc, err);
	/* ibv_post_send: inline data above max_inline_data */
	sge[0].addr = (uintptr_t)big;
	sge[0].length = sizeof(big);
	sw.send_flags = IBV_SEND_INLINE;
	CALL_RC(rc, err, ibv_post_send(a.qp, &sw, &bad_s));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_post_send with 600 inline bytes: returns %d, errno %d (EINVAL)",
	      rc, err);

	/* ibv_post_recv: more SGEs than max_recv_sge; a full queue */
	for (i = 0; i < 4; i++) {
		sge[i].addr = (uintptr_t)a.buf;
		sge[i].length = 8;
		sge[i].lkey = a.mr->lkey;
	}
	memset(&rw, 0, sizeof(rw));
	rw.sg_list = sge;
	rw.num_sge = 4;
	CALL_RC(rc, err, ibv_post_recv(a.qp, &rw, &bad_r));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_post_recv with 4 SGEs (max 1): returns %d, errno %d (EINVAL)",
	      rc, err);
	rw.num_sge = 1;
	for (i = 0; i < 16; i++)
		ibv_post_recv(a.qp, &rw, &bad_r);
	CALL_RC(rc, err, ibv_post_recv(a.qp, &rw, &bad_r));
	CHECK(rc == ENOMEM && err == ENOMEM,
	      "ibv_post_recv on a full queue: returns %d, errno %d (ENOMEM)",
	      rc, err);

	/* ibv_query_port: no port 2 */
	CALL_RC(rc, err, ibv_query_port(a.ctx, 2, &pa));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_query_port port 2: returns %d, errno %d (EINVAL)", rc, err);
	/* ibv_query_gid_ex: an empty entry */
	CALL_RC(rc, err, ibv_query_gid_ex(a.ctx, 1, 900, ge, 0));
	CHECK(rc == ENODATA && err == ENODATA,
	      "ibv_query_gid_ex of an empty entry: returns %d, errno %d (ENODATA)",
	      rc, err);
	/* ibv_query_gid_table: too small an array */
	errno = 0;
	n = ibv_query_gid_table(a.ctx, ge, 1, 0);
	err = errno;
	CHECK(n == -EINVAL && err == EINVAL,
	      "ibv_query_gid_table into 1 entry: returns %zd, errno %d (EINVAL)",
	      n, err);

	/* ibv_destroy_cq / ibv_dealloc_pd while a QP uses them */
	CALL_RC(rc, err, ibv_destroy_cq(a.cq));
	CHECK(rc == EBUSY && err == EBUSY,
	      "ibv_destroy_cq with a QP on it: returns %d, errno %d (EBUSY)", rc,
	      err);
	CALL_RC(rc, err, ibv_dealloc_pd(a.pd));
	CHECK(rc == EBUSY && err == EBUSY,
	      "ibv_dealloc_pd with a QP on it: returns %d, errno %d (EBUSY)", rc,
	      err);
	/* the context's cmd_fd is a real descriptor (close-on-exec), as a
	 * kernel device's; importing it is EOPNOTSUPP (no kernel objects) */
	int cfd = a.ctx->cmd_fd >= 0 ? dup(a.ctx->cmd_fd) : -1;
	int cflags = a.ctx->cmd_fd >= 0 ? fcntl(a.ctx->cmd_fd, F_GETFD) : -1;
	errno = 0;
	struct ibv_context *imp = cfd >= 0 ? ibv_import_device(cfd) : NULL;
	err = errno;
	CHECK(cfd >= 0 && cflags >= 0 && (cflags & FD_CLOEXEC) && !imp && err == EOPNOTSUPP,
	      "cmd_fd %d can be dup'ed (close-on-exec); ibv_import_device of it: NULL, errno %d "
	      "(EOPNOTSUPP)",
	      a.ctx->cmd_fd, err);
	if (cfd >= 0)
		close(cfd);
	/* ibv_resize_cq to 0 entries */
	CALL_RC(rc, err, ibv_resize_cq(a.cq, 0));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_resize_cq to 0: returns %d, errno %d (EINVAL)", rc, err);
	/* ibv_destroy_comp_channel while a CQ uses it */
	ch = ibv_create_comp_channel(a.ctx);
	chcq = ch ? ibv_create_cq(a.ctx, 4, NULL, ch, 0) : NULL;
	CALL_RC(rc, err, ibv_destroy_comp_channel(ch));
	CHECK(chcq && rc == EBUSY && err == EBUSY,
	      "ibv_destroy_comp_channel with a CQ on it: returns %d, errno %d (EBUSY)",
	      rc, err);
	ibv_destroy_cq(chcq);
	ibv_destroy_comp_channel(ch);

	/* SRQ: post more SGEs than it takes; resize; destroy while used */
	memset(&si, 0, sizeof(si));
	si.attr.max_wr = 4;
	si.attr.max_sge = 1;
	srq = ibv_create_srq(a.pd, &si);
	if (!srq)
		die("ibv_create_srq");
	rw.num_sge = 4;
	CALL_RC(rc, err, ibv_post_srq_recv(srq, &rw, &bad_r));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_post_srq_recv with 4 SGEs: returns %d, errno %d (EINVAL)", rc,
	      err);
	/* resize (IBV_DEVICE_SRQ_RESIZE, as rxe): up, then not below what is
	 * queued, not to 0, not with the limit at or over the new size */
	memset(&sa, 0, sizeof(sa));
	sa.max_wr = 8;
	CALL_RC(rc, err, ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
	struct ibv_srq_attr qa;
	int qr = ibv_query_srq(srq, &qa);
	CHECK(rc == 0 && qr == 0 && qa.max_wr == 8,
	      "ibv_modify_srq IBV_SRQ_MAX_WR 4 -> 8: returns %d, max_wr %u", rc, qa.max_wr);
	struct ibv_sge one = { .addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey };
	struct ibv_recv_wr r6 = { .wr_id = 6, .sg_list = &one, .num_sge = 1 };
	int posted = 0;
	for (int k = 0; k < 6; k++)
		posted += ibv_post_srq_recv(srq, &r6, &bad_r) == 0;
	sa.max_wr = 5;
	CALL_RC(rc, err, ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
	CHECK(posted == 6 && rc == EINVAL && err == EINVAL,
	      "ibv_modify_srq IBV_SRQ_MAX_WR below the 6 WRs queued: returns %d, errno %d (EINVAL)",
	      rc, err);
	sa.max_wr = 0;
	CALL_RC(rc, err, ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_modify_srq IBV_SRQ_MAX_WR 0: returns %d, errno %d (EINVAL)", rc, err);
	sa.max_wr = 16;
	sa.srq_limit = 16;
	CALL_RC(rc, err, ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT));
	CHECK(rc == EINVAL && err == EINVAL && ibv_query_srq(srq, &qa) == 0 && qa.max_wr == 8,
	      "ibv_modify_srq to 16 with limit 16: returns %d, errno %d (EINVAL), max_wr stays %u",
	      rc, err, qa.max_wr);
	sa.srq_limit = 3;
	CALL_RC(rc, err, ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT));
	CHECK(rc == 0 && ibv_query_srq(srq, &qa) == 0 && qa.max_wr == 16 && qa.srq_limit == 3,
	      "ibv_modify_srq to 16 with limit 3: returns %d, max_wr %u, limit %u", rc, qa.max_wr,
	      qa.srq_limit);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = a.cq;
	ia.recv_cq = a.cq;
	ia.srq = srq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 1;
	ia.cap.max_send_sge = 1;
	b.qp = ibv_create_qp(a.pd, &ia);
	CALL_RC(rc, err, ibv_destroy_srq(srq));
	CHECK(b.qp && rc == EBUSY && err == EBUSY,
	      "ibv_destroy_srq with a QP on it: returns %d, errno %d (EBUSY)", rc,
	      err);
	ibv_destroy_qp(b.qp);
	ibv_destroy_srq(srq);

	/* multicast: only UD QPs, only multicast GIDs (the kernel's checks) */
	CALL_RC(rc, err, ibv_attach_mcast(a.qp, &a.gid, 0));
	CHECK(rc == EINVAL && err == EINVAL,
	      "ibv_attach_mcast of an RC QP to a unicast GID: returns %d, errno %d (EINVAL)", rc, err);

	/* ibv_wr_complete on a QP that cannot send */
	memset(&ia, 0, sizeof(ia));
	{
		struct ibv_qp_init_attr_ex x;
		struct ibv_qp *xq;

		memset(&x, 0, sizeof(x));
		x.send_cq = a.cq;
		x.recv_cq = a.cq;
		x.qp_type = IBV_QPT_RC;
		x.cap.max_send_wr = 4;
		x.cap.max_recv_wr = 4;
		x.cap.max_send_sge = 1;
		x.cap.max_recv_sge = 1;
		x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		x.pd = a.pd;
		x.send_ops_flags = IBV_QP_EX_WITH_SEND;
		xq = ibv_create_qp_ex(a.ctx, &x);
		if (!xq)
			die("ibv_create_qp_ex");
		qx = ibv_qp_to_qp_ex(xq);
		ibv_wr_start(qx);
		qx->wr_id = 1;
		ibv_wr_send(qx);
		ibv_wr_set_sge(qx, a.mr->lkey, (uintptr_t)a.buf, 8);
		CALL_RC(rc, err, ibv_wr_complete(qx));
		CHECK(rc == EINVAL && err == EINVAL,
		      "ibv_wr_complete in RESET: returns %d, errno %d (EINVAL)", rc,
		      err);
		CALL_RC(rc, err, ibv_destroy_qp(xq));
		CHECK(rc == 0, "ibv_destroy_qp: %d", rc);
	}

	/* verbs returning NULL set errno */
	errno = 0;
	p = ibv_create_cq(a.ctx, 0, NULL, NULL, 0);
	CHECK(!p && errno == EINVAL, "ibv_create_cq with 0 entries: NULL, errno %d (EINVAL)", errno);
	errno = 0;
	p = make_qp(&a, IBV_QPT_RC, 1, 100000, NULL);
	CHECK(!p && errno == EINVAL, "ibv_create_qp with max_inline_data 100000: NULL, errno %d (EINVAL)", errno);
	errno = 0;
	p = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(p, 8192);
	errno = 0;
	p = ibv_reg_mr(a.pd, p, 8192, IBV_ACCESS_LOCAL_WRITE);
	CHECK(!p && errno == EFAULT, "ibv_reg_mr of unmapped memory: NULL, errno %d (EFAULT)", errno);
	memset(&ah, 0, sizeof(ah));
	ah.port_num = 1;
	errno = 0;
	p = ibv_create_ah(a.pd, &ah);
	CHECK(!p && errno == EINVAL, "ibv_create_ah without GRH: NULL, errno %d (EINVAL)", errno);

	/* ibv_destroy_qp, then the PD and CQ go: success leaves errno alone */
	errno = 12345;
	rc = ibv_destroy_qp(a.qp);
	CHECK(rc == 0 && errno == 12345, "ibv_destroy_qp: 0, errno untouched");
	ibv_dereg_mr(a.mr);
	CALL_RC(rc, err, ibv_dealloc_pd(a.pd));
	CHECK(rc == 0, "ibv_dealloc_pd once its objects are gone: %d", rc);
	return 0;
}

/* ---------------------------------------------------------------- UD */

static uint16_t ip_csum(const uint8_t *h, int len)
{
	uint32_t s = 0;
	int i;

	for (i = 0; i < len; i += 2)
		s += (h[i] << 8) | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

/* A UD SEND of 32 bytes from `s` (QP sq) to `r` (QP rq); checks the
 * receive completion and the GRH area. `v6`: the devices are IPv6. */
static void ud_exchange(struct side *s, struct ibv_qp *sq, struct side *r,
			struct ibv_qp *rq, union ibv_gid *dgid, int v6)
{
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc, rwc;
	struct ibv_ah_attr back;
	const uint8_t *g;
	int rc, i, zero;
	uint8_t payload[32];

	for (i = 0; i < 32; i++)
		payload[i] = (uint8_t)(0xA0 + i);
	memset(r->buf, 0xEE, 256);
	if (post_recv(r, rq, 0, 40 + 64, 42))
		die("ibv_post_recv");
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	aa.grh.dgid = *dgid;
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 64;
	aa.port_num = 1;
	ah = ibv_create_ah(s->pd, &aa);
	if (!ah)
		die("ibv_create_ah");
	memcpy(s->buf + 1024, payload, 32);
	sge.addr = (uintptr_t)(s->buf + 1024);
	sge.length = 32;
	sge.lkey = s->mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 9;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = rq->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	rc = ibv_post_send(sq, &wr, &bad);
	CHECK(rc == 0, "UD post_send: %d", rc);
	/* the send's and the receive's completions (one CQ when s == r) */
	memset(&wc, 0, sizeof(wc));
	memset(&rwc, 0, sizeof(rwc));
	for (i = 0; i < 2; i++) {
		struct ibv_wc w;

		if (poll_one(i == 0 ? s->cq : r->cq, &w, 10)) {
			CHECK(0, "completion %d arrived", i);
			return;
		}
		if (w.wr_id == 42)
			rwc = w;
		else
			wc = w;
	}
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 9, "send completion: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(rwc.status == IBV_WC_SUCCESS && rwc.opcode == IBV_WC_RECV,
	      "receive completion: %s", ibv_wc_status_str(rwc.status));
	CHECK(rwc.byte_len == 40 + 32, "byte_len %u (40 GRH + 32)", rwc.byte_len);
	CHECK(rwc.wc_flags & IBV_WC_GRH, "wc_flags 0x%x has IBV_WC_GRH",
	      rwc.wc_flags);
	CHECK(rwc.src_qp == sq->qp_num, "src_qp %u is the sender's QPN %u",
	      rwc.src_qp, sq->qp_num);
	CHECK(rwc.qp_num == rq->qp_num, "qp_num %u", rwc.qp_num);
	CHECK(rwc.slid == 0 && rwc.dlid_path_bits == 0 && rwc.pkey_index == 0,
	      "slid %u, dlid_path_bits %u, pkey_index %u (RoCE: 0)", rwc.slid,
	      rwc.dlid_path_bits, rwc.pkey_index);
	CHECK(rwc.sl == (v6 ? 1 : 2),
	      "sl %u: the network header type (mlx5's %s packet type %d)",
	      rwc.sl, v6 ? "IPv6" : "IPv4", v6 ? 1 : 2);
	CHECK(memcmp(r->buf + 40, payload, 32) == 0,
	      "the 32 payload bytes follow the 40-byte GRH area");
	g = r->buf;
	if (!v6) {
		for (zero = 1, i = 0; i < 20; i++)
			zero &= g[i] == 0;
		CHECK(zero, "GRH area bytes 0..20 are zero (rxe)");
		CHECK(g[20] == 0x45, "byte 20: 0x%02x, an IPv4 header (version 4, IHL 5)",
		      g[20]);
		CHECK(((g[22] << 8) | g[23]) == 20 + 8 + 12 + 8 + 32 + 4,
		      "IPv4 total length %u (IP 20 + UDP 8 + BTH 12 + DETH 8 + 32 + ICRC 4)",
		      (g[22] << 8) | g[23]);
		CHECK(g[28] == 64 && g[29] == 17, "TTL %u, protocol %u (UDP)", g[28],
		      g[29]);
		CHECK(ip_csum(g + 20, 20) == 0xffff, "IPv4 header checksum is valid");
		CHECK(memcmp(g + 32, s->gid.raw + 12, 4) == 0 &&
			      memcmp(g + 36, r->gid.raw + 12, 4) == 0,
		      "source %u.%u.%u.%u and destination %u.%u.%u.%u are the devices'",
		      g[32], g[33], g[34], g[35], g[36], g[37], g[38], g[39]);
	} else {
		CHECK(g[0] >> 4 == 6, "byte 0: 0x%02x, an IPv6 header", g[0]);
		CHECK(((g[4] << 8) | g[5]) == 8 + 12 + 8 + 32 + 4,
		      "IPv6 payload length %u (UDP 8 + BTH 12 + DETH 8 + 32 + ICRC 4)",
		      (g[4] << 8) | g[5]);
		CHECK(g[6] == 17 && g[7] == 64, "next header %u (UDP), hop limit %u",
		      g[6], g[7]);
		CHECK(memcmp(g + 8, s->gid.raw, 16) == 0 &&
			      memcmp(g + 24, r->gid.raw, 16) == 0,
		      "source and destination GIDs are the devices'");
	}
	/* the GRH area answers ibv_init_ah_from_wc */
	rc = ibv_init_ah_from_wc(r->ctx, 1, &rwc, (struct ibv_grh *)g, &back);
	CHECK(rc == 0 && back.is_global &&
		      memcmp(back.grh.dgid.raw, s->gid.raw, 16) == 0,
	      "ibv_init_ah_from_wc: back to the sender's GID (%d)", rc);
	ibv_destroy_ah(ah);
}

static struct ibv_qp *ud_qp(struct side *s)
{
	struct ibv_qp *qp = make_qp(s, IBV_QPT_UD, 1, 0, NULL);

	if (!qp || ud_ready(qp, QKEY, 0))
		die("UD QP");
	return qp;
}

static int part_ud(void)
{
	struct side a, b;
	struct ibv_qp *aq, *bq;

	open_two(&a, &b);
	aq = ud_qp(&a);
	bq = ud_qp(&b);
	ud_exchange(&a, aq, &b, bq, &b.gid, 0);

	/* the same fields through ibv_cq_ex */
	{
		struct ibv_cq_init_attr_ex cx;
		struct ibv_cq_ex *xcq;
		struct ibv_qp_init_attr ia;
		struct ibv_qp *xq;
		struct ibv_qp_attr q;
		struct ibv_poll_cq_attr pa = { 0 };
		struct ibv_ah_attr aa;
		struct ibv_ah *ah;
		struct ibv_sge sge;
		struct ibv_send_wr wr, *bad;
		struct ibv_wc wc;
		double end;
		int rc;

		memset(&cx, 0, sizeof(cx));
		cx.cqe = 16;
		cx.wc_flags = IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SL |
			      IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_DLID_PATH_BITS |
			      IBV_WC_EX_WITH_BYTE_LEN;
		xcq = ibv_create_cq_ex(b.ctx, &cx);
		if (!xcq)
			die("ibv_create_cq_ex");
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = ibv_cq_ex_to_cq(xcq);
		ia.recv_cq = ibv_cq_ex_to_cq(xcq);
		ia.qp_type = IBV_QPT_UD;
		ia.cap.max_send_wr = 4;
		ia.cap.max_recv_wr = 4;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		xq = ibv_create_qp(b.pd, &ia);
		if (!xq || to_init(xq, 1))
			die("UD QP on the extended CQ");
		memset(&q, 0, sizeof(q));
		q.qp_state = IBV_QPS_RTR;
		ibv_modify_qp(xq, &q, IBV_QP_STATE);
		if (post_recv(&b, xq, 2048, 40 + 64, 77))
			die("post_recv");
		memset(&aa, 0, sizeof(aa));
		aa.is_global = 1;
		aa.grh.dgid = b.gid;
		aa.grh.sgid_index = 1;
		aa.grh.hop_limit = 64;
		aa.port_num = 1;
		ah = ibv_create_ah(a.pd, &aa);
		sge.addr = (uintptr_t)a.buf;
		sge.length = 8;
		sge.lkey = a.mr->lkey;
		memset(&wr, 0, sizeof(wr));
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = xq->qp_num;
		wr.wr.ud.remote_qkey = 0x11111111;
		if (!ah || ibv_post_send(aq, &wr, &bad))
			die("UD send to the extended CQ");
		poll_one(a.cq, &wc, 10);
		end = now_s() + 10;
		while ((rc = ibv_start_poll(xcq, &pa)) == ENOENT && now_s() < end)
			;
		CHECK(rc == 0 && xcq->status == IBV_WC_SUCCESS && xcq->wr_id == 77,
		      "ibv_start_poll: the receive (%d)", rc);
		if (rc == 0) {
			CHECK(ibv_wc_read_sl(xcq) == 2 &&
				      ibv_wc_read_src_qp(xcq) == aq->qp_num &&
				      ibv_wc_read_slid(xcq) == 0 &&
				      ibv_wc_read_dlid_path_bits(xcq) == 0 &&
				      (ibv_wc_read_wc_flags(xcq) & IBV_WC_GRH) &&
				      ibv_wc_read_byte_len(xcq) == 48,
			      "ibv_wc_read_*: sl %u, src_qp %u, slid %u, dlid_path_bits %u, flags 0x%x, byte_len %u",
			      ibv_wc_read_sl(xcq), ibv_wc_read_src_qp(xcq),
			      ibv_wc_read_slid(xcq),
			      ibv_wc_read_dlid_path_bits(xcq),
			      ibv_wc_read_wc_flags(xcq),
			      ibv_wc_read_byte_len(xcq));
			ibv_end_poll(xcq);
		}
	}
	return 0;
}

static int part_ud6(void)
{
	struct ibv_device **list;
	struct side a;
	struct ibv_qp *q1, *q2;
	int num;

	list = ibv_get_device_list(&num);
	if (!list || num < 1)
		die("ibv_get_device_list");
	memset(&a, 0, sizeof(a));
	a.ctx = ibv_open_device(list[0]);
	if (!a.ctx) {
		printf("SKIP cannot open the IPv6 device (errno %d)\n", errno);
		return 77;
	}
	ibv_close_device(a.ctx);
	open_buf_side(list[0], &a);
	CHECK(a.gid.raw[15] == 1 && a.gid.raw[0] == 0,
	      "GID index 1 is ::1, the device's IPv6 address");
	q1 = ud_qp(&a);
	q2 = ud_qp(&a);
	ud_exchange(&a, q1, &a, q2, &a.gid, 1);
	return 0;
}

/* ---------------------------------------------------------------- inline */

static int part_inline(void)
{
	struct side a, b;
	struct ibv_qp_cap cap;
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	struct ibv_qp *t;
	struct ibv_wc wc;
	static const struct {
		uint32_t sge, inl, want_sge, want_inl;
	} cases[] = {
		{ 1, 0, 1, 16 },   { 1, 16, 1, 16 },  { 1, 17, 1, 17 },
		{ 1, 100, 6, 100 }, { 4, 0, 4, 64 },   { 2, 512, 32, 512 },
		{ 32, 0, 32, 512 },
	};
	unsigned i;
	int rc, err;
	char msg[17] = "sixteen bytes!!!";
	char seventeen[18] = "seventeen bytes!!";

	open_two(&a, &b);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		t = make_qp(&a, IBV_QPT_RC, cases[i].sge, cases[i].inl, &cap);
		memset(&q, 0, sizeof(q));
		memset(&qi, 0, sizeof(qi));
		if (t)
			ibv_query_qp(t, &q, IBV_QP_CAP, &qi);
		CHECK(t && cap.max_send_sge == cases[i].want_sge &&
			      cap.max_inline_data == cases[i].want_inl &&
			      q.cap.max_send_sge == cases[i].want_sge &&
			      q.cap.max_inline_data == cases[i].want_inl &&
			      qi.cap.max_inline_data == cases[i].want_inl,
		      "max_send_sge %u, max_inline_data %u: created with %u, %u; queried %u, %u (rxe: %u, %u)",
		      cases[i].sge, cases[i].inl, cap.max_send_sge,
		      cap.max_inline_data, q.cap.max_send_sge,
		      q.cap.max_inline_data, cases[i].want_sge,
		      cases[i].want_inl);
		if (t)
			ibv_destroy_qp(t);
	}

	/* rdma_xclient's QP: max_inline_data 0, then a 16-byte inline SEND */
	a.qp = make_qp(&a, IBV_QPT_RC, 1, 0, &cap);
	b.qp = make_qp(&b, IBV_QPT_RC, 1, 0, NULL);
	if (!a.qp || !b.qp || connect_to(a.qp, b.qp, &b.gid, 0) ||
	    connect_to(b.qp, a.qp, &a.gid, 0))
		die("RC pair");
	post_recv(&b, b.qp, 0, 64, 1);
	rc = rc_send(&a, a.qp, msg, 16, 1, &wc);
	CHECK(rc == 0 && wc.status == IBV_WC_SUCCESS,
	      "16-byte inline SEND on a QP made with max_inline_data 0: %d, %s",
	      rc, rc == 0 ? ibv_wc_status_str(wc.status) : "not posted");
	rc = poll_one(b.cq, &wc, 10);
	CHECK(rc == 0 && wc.byte_len == 16 && memcmp(b.buf, msg, 16) == 0,
	      "the peer received \"%.16s\"", (char *)b.buf);
	CALL_RC(rc, err, rc_send(&a, a.qp, seventeen, 17, 1, &wc));
	CHECK(rc == EINVAL && err == EINVAL,
	      "17 inline bytes on it: returns %d, errno %d (EINVAL)", rc, err);
	return 0;
}

int main(int argc, char **argv)
{
	int r;
	const char *part = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(part, "flow"))
		r = part_flow();
	else if (!strcmp(part, "errno"))
		r = part_errno();
	else if (!strcmp(part, "ud"))
		r = part_ud();
	else if (!strcmp(part, "ud6"))
		r = part_ud6();
	else if (!strcmp(part, "inline"))
		r = part_inline();
	else {
		fprintf(stderr, "usage: %s flow|errno|ud|ud6|inline\n", argv[0]);
		return 2;
	}
	if (r)
		return r;
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
