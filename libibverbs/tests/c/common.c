/* See common.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

void die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
		strerror(errno));
	printf("FAIL setup: %s\n", what);
	fflush(stdout);
	exit(2);
}

double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

struct ibv_context *open_device_at(int i)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx;

	if (!list || n <= i)
		die("ibv_get_device_list: too few devices");
	ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		die("ibv_open_device");
	return ctx;
}

void open_side(struct ibv_device *dev, struct side *s, int cqe,
	       struct ibv_comp_channel **ch)
{
	memset(s, 0, sizeof(*s));
	s->ctx = ibv_open_device(dev);
	if (!s->ctx)
		die("ibv_open_device");
	s->pd = ibv_alloc_pd(s->ctx);
	if (ch) {
		*ch = ibv_create_comp_channel(s->ctx);
		if (!*ch)
			die("ibv_create_comp_channel");
	}
	s->cq = ibv_create_cq(s->ctx, cqe, NULL, ch ? *ch : NULL, 0);
	if (!s->pd || !s->cq || ibv_query_gid(s->ctx, 1, 1, &s->gid))
		die("pd/cq/gid");
}

struct ibv_qp_init_attr qp_init_attr(struct ibv_cq *cq, enum ibv_qp_type type,
				     uint32_t send_wr, uint32_t recv_wr)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = type;
	ia.cap.max_send_wr = send_wr;
	ia.cap.max_recv_wr = recv_wr;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	return ia;
}

struct ibv_qp *rc_qp_init(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t depth,
			  unsigned int access)
{
	struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_RC, depth, depth);
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	if (rc_init(qp, access))
		die("INIT");
	return qp;
}

int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double end = now_s() + secs;

	while (now_s() < end) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			return -1;
		if (n == 1)
			return 0;
	}
	return -1;
}

struct rc_path rc_path(uint32_t dest_qpn, union ibv_gid dgid)
{
	struct rc_path p = {
		.dest_qpn = dest_qpn,
		.dgid = dgid,
		.hop_limit = 64,
		.max_dest_rd_atomic = 1,
		.max_rd_atomic = 1,
		.min_rnr_timer = 12,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
	};
	return p;
}

int rc_init(struct ibv_qp *qp, unsigned int access)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS);
}

int rc_rtr_rts(struct ibv_qp *qp, const struct rc_path *p)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = p->dest_qpn;
	a.rq_psn = p->rq_psn;
	a.max_dest_rd_atomic = p->max_dest_rd_atomic;
	a.min_rnr_timer = p->min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->dgid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = p->hop_limit;
	a.ah_attr.grh.flow_label = p->flow_label;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = p->timeout;
	a.retry_cnt = p->retry_cnt;
	a.rnr_retry = p->rnr_retry;
	a.sq_psn = p->sq_psn;
	a.max_rd_atomic = p->max_rd_atomic;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC);
}

int rc_connect(struct ibv_qp *qp, unsigned int access, const struct rc_path *p)
{
	if (rc_init(qp, access))
		return -1;
	return rc_rtr_rts(qp, p);
}

int ud_init(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = qkey;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_QKEY);
}

int ud_ready(struct ibv_qp *qp, uint32_t qkey, uint32_t sq_psn)
{
	struct ibv_qp_attr a;

	if (ud_init(qp, qkey))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	return ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) ? -1 : (int)a.qp_state;
}
