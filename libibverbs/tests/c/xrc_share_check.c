/*
 * One XRC domain shared by two processes of one device (roce0), reached
 * by an initiator on another device (roce1): run three times, by
 * tests/semantics.rs, which passes the numbers between them.
 *
 *   xrc_share_check owner FILE   the domain (O_CREAT), an XRC SRQ, the target QP
 *   xrc_share_check member FILE  the same file's domain (no O_CREAT), its own
 *                                XRC SRQ and memory, ibv_open_qp of the target
 *   xrc_share_check ini          an initiator: SENDs to both SRQs, WRITE,
 *                                WRITE with immediate, READ and FETCH_ADD on
 *                                the member's memory, all through the owner's
 *                                target QP
 *
 * Lines on stdout ("owner tgt N srq N gid HEX", "member srq N rkey N addr
 * N", "ini qpn N gid HEX", checks, "N failures"); lines on stdin ("peer
 * QPN GIDHEX", "go TGT SRQ_O SRQ_M RKEY ADDR GIDHEX", "bye"). Each role
 * exits 0 with "0 failures" when its checks passed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common.h"

#define BUF (64 * 1024)
#define ALL_ACCESS                                                                      \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |    \
	 IBV_ACCESS_REMOTE_ATOMIC)

static struct side s;

static void fill(uint8_t *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + seed);
}

static int same(const uint8_t *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(i * 7 + seed))
			return 0;
	return 1;
}

static void gid_hex(const union ibv_gid *g, char *out)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g->raw[i]);
}

static int hex_gid(const char *h, union ibv_gid *g)
{
	for (int i = 0; i < 16; i++) {
		unsigned int v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			return -1;
		g->raw[i] = (uint8_t)v;
	}
	return 0;
}

static void line(char *buf, size_t n)
{
	if (!fgets(buf, (int)n, stdin))
		die("stdin closed");
}

static void setup(int dev)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 2)
		die("two devices");
	open_side(list[dev], &s, 64, NULL);
	s.buf = calloc(1, BUF);
	s.mr = ibv_reg_mr(s.pd, s.buf, BUF, ALL_ACCESS);
	if (!s.mr)
		die("mr");
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = 16;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
		      IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_XRC;
	a.xrcd = x;
	a.cq = cq;
	a.pd = s.pd;
	return ibv_create_srq_ex(s.ctx, &a);
}

static void post_srq(struct ibv_srq *q, uint64_t id, int off, int len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf + off, .length = len, .lkey = s.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_srq_recv(q, &wr, &bad))
		die("post_srq_recv");
}

static struct ibv_xrcd *open_domain(int fd, int oflags)
{
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						      IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = fd,
					 .oflags = oflags };
	return ibv_open_xrcd(s.ctx, &xa);
}

static int owner(const char *file)
{
	setup(0);
	int fd = open(file, O_RDWR | O_CREAT, 0600);
	if (fd < 0)
		die("open file");
	struct ibv_xrcd *x = open_domain(fd, O_CREAT);
	CHECK(x != NULL, "owner: ibv_open_xrcd(O_CREAT) of the file");
	if (!x)
		die("xrcd");
	struct ibv_cq *cq = ibv_create_cq(s.ctx, 8, NULL, NULL, 0);
	struct ibv_srq *srq = cq ? xrc_srq(x, cq) : NULL;
	uint32_t srqn = 0;
	if (!srq || ibv_get_srq_num(srq, &srqn))
		die("srq");
	post_srq(srq, 200, 0, 4096);
	struct ibv_qp_init_attr_ex ti;
	memset(&ti, 0, sizeof(ti));
	ti.qp_type = IBV_QPT_XRC_RECV;
	ti.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	ti.xrcd = x;
	struct ibv_qp *tgt = ibv_create_qp_ex(s.ctx, &ti);
	if (!tgt)
		die("target QP");
	char g[40], in[256], hex[40];
	gid_hex(&s.gid, g);
	printf("owner tgt %u srq %u gid %s\n", tgt->qp_num, srqn, g);
	fflush(stdout);
	unsigned int peer;
	union ibv_gid pg;
	line(in, sizeof(in));
	if (sscanf(in, "peer %u %39s", &peer, hex) != 2 || hex_gid(hex, &pg))
		die("peer line");
	struct rc_path p = rc_path(peer, pg);
	p.max_dest_rd_atomic = 4;
	CHECK(rc_connect(tgt, ALL_ACCESS, &p) == 0, "owner: the target QP to RTS");
	printf("owner ready\n");
	fflush(stdout);
	struct ibv_wc wc;
	int got = poll_one(cq, &wc, 30) == 0;
	CHECK(got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 200 && wc.byte_len == 300 &&
		      wc.qp_num == tgt->qp_num && same(s.buf, 300, 3),
	      "owner: the SEND to its own SRQ: 300 bytes, the target's QPN, the bytes");
	line(in, sizeof(in));
	CHECK(ibv_destroy_qp(tgt) == 0 && ibv_destroy_srq(srq) == 0 && ibv_close_xrcd(x) == 0,
	      "owner: target, SRQ and domain closed");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}

static int member(const char *file)
{
	setup(0);
	int fd = open(file, O_RDWR);
	if (fd < 0)
		die("open file");
	errno = 0;
	CHECK(open_domain(fd, O_CREAT | O_EXCL) == NULL && errno == EINVAL,
	      "member: O_CREAT | O_EXCL while another process has the domain: EINVAL");
	struct ibv_xrcd *x = open_domain(fd, 0);
	CHECK(x != NULL, "member: ibv_open_xrcd without O_CREAT: the other process's domain");
	if (!x)
		die("xrcd");
	char in[256];
	unsigned int tgtn;
	line(in, sizeof(in));
	if (sscanf(in, "tgt %u", &tgtn) != 1)
		die("tgt line");
	struct ibv_cq *cq = ibv_create_cq(s.ctx, 16, NULL, NULL, 0);
	struct ibv_srq *srq = cq ? xrc_srq(x, cq) : NULL;
	uint32_t srqn = 0;
	if (!srq || ibv_get_srq_num(srq, &srqn))
		die("srq");
	CHECK((srqn >> 16) != (tgtn >> 16), "member: its SRQ number %#x carries its own slot", srqn);
	struct ibv_qp_open_attr oa = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
						    IBV_QP_OPEN_ATTR_TYPE,
				       .qp_num = tgtn,
				       .xrcd = x,
				       .qp_type = IBV_QPT_XRC_RECV };
	struct ibv_qp *tq = ibv_open_qp(s.ctx, &oa);
	CHECK(tq && tq->qp_num == tgtn && tq->qp_type == IBV_QPT_XRC_RECV,
	      "member: ibv_open_qp of the owner's target QP");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(tq && ibv_query_qp(tq, &qa, IBV_QP_STATE, &qi) == EOPNOTSUPP,
	      "member: ibv_query_qp of the other process's QP: EOPNOTSUPP");
	oa.qp_num = (srqn & 0xFF0000) | 0xFFFF;
	errno = 0;
	CHECK(ibv_open_qp(s.ctx, &oa) == NULL && errno == EINVAL,
	      "member: ibv_open_qp of a number that is no target: EINVAL");
	for (int k = 0; k < 4; k++)
		post_srq(srq, 100 + k, k * 8192, 8192);
	fill(s.buf + 32768, 3000, 5);
	uint64_t seven = 7;
	memcpy(s.buf + 40960, &seven, 8);
	printf("member srq %u rkey %u addr %llu\n", srqn, s.mr->rkey,
	       (unsigned long long)(uintptr_t)s.buf);
	fflush(stdout);
	struct ibv_wc wc[4];
	int n = 0;
	double end = now_s() + 30;
	while (n < 4 && now_s() < end) {
		int r = ibv_poll_cq(cq, 4 - n, wc + n);
		if (r < 0)
			break;
		n += r;
		if (!r)
			usleep(1000);
	}
	CHECK(n == 4, "member: 4 receives on its SRQ's CQ (%d)", n);
	int ok = n == 4;
	for (int k = 0; k < n; k++)
		ok = ok && wc[k].status == IBV_WC_SUCCESS && wc[k].qp_num == tgtn &&
		     wc[k].wr_id == (uint64_t)(100 + k);
	CHECK(ok, "member: in order, successful, for the target's QPN");
	CHECK(n == 4 && wc[0].byte_len == 100 && same(s.buf, 100, 1),
	      "member: a 100-byte SEND, the bytes");
	CHECK(n == 4 && wc[1].byte_len == 5000 && same(s.buf + 8192, 5000, 1),
	      "member: a 5000-byte SEND (5 packets), the bytes");
	CHECK(n == 4 && wc[2].byte_len == 64 && same(s.buf + 16384, 64, 2),
	      "member: a 64-byte SEND after the others, the bytes");
	CHECK(n == 4 && wc[3].opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc[3].byte_len == 32 &&
		      (wc[3].wc_flags & IBV_WC_WITH_IMM) && ntohl(wc[3].imm_data) == 0x1234 &&
		      same(s.buf + 53248, 32, 4),
	      "member: a WRITE with immediate: 32 bytes in place, the immediate");
	CHECK(same(s.buf + 49152, 256, 4), "member: an RDMA WRITE with its rkey lands");
	uint64_t v;
	memcpy(&v, s.buf + 40960, 8);
	CHECK(v == 12, "member: FETCH_ADD of 5 on its memory: %llu", (unsigned long long)v);
	printf("member done\n");
	fflush(stdout);
	line(in, sizeof(in));
	CHECK(tq && ibv_destroy_qp(tq) == 0, "member: the opened QP's handle destroyed");
	CHECK(ibv_destroy_srq(srq) == 0 && ibv_close_xrcd(x) == 0, "member: SRQ and domain closed");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}

static int initiator(void)
{
	setup(1);
	struct ibv_qp_init_attr_ex ii;
	memset(&ii, 0, sizeof(ii));
	ii.qp_type = IBV_QPT_XRC_SEND;
	ii.send_cq = s.cq;
	ii.cap.max_send_wr = 16;
	ii.cap.max_send_sge = 1;
	ii.comp_mask = IBV_QP_INIT_ATTR_PD;
	ii.pd = s.pd;
	struct ibv_qp *ini = ibv_create_qp_ex(s.ctx, &ii);
	if (!ini)
		die("initiator QP");
	char g[40], in[256], hex[40];
	gid_hex(&s.gid, g);
	printf("ini qpn %u gid %s\n", ini->qp_num, g);
	fflush(stdout);
	unsigned int tgt, srq_o, srq_m, rkey;
	unsigned long long addr;
	union ibv_gid tg;
	line(in, sizeof(in));
	if (sscanf(in, "go %u %u %u %u %llu %39s", &tgt, &srq_o, &srq_m, &rkey, &addr, hex) != 6 ||
	    hex_gid(hex, &tg))
		die("go line");
	struct rc_path p = rc_path(tgt, tg);
	p.max_rd_atomic = 4;
	if (rc_connect(ini, 0, &p))
		die("connect");
	fill(s.buf, 8192, 1);
	fill(s.buf + 8192, 4096, 3);
	fill(s.buf + 12288, 1024, 2);
	fill(s.buf + 16384, 1024, 4);
	struct {
		enum ibv_wr_opcode op;
		uint32_t srqn;
		int off, len;
		uint64_t raddr;
	} w[] = {
		{ IBV_WR_SEND, srq_m, 0, 100, 0 },
		{ IBV_WR_SEND, srq_m, 0, 5000, 0 },
		{ IBV_WR_SEND, srq_o, 8192, 300, 0 },
		{ IBV_WR_RDMA_WRITE, srq_m, 16384, 256, addr + 49152 },
		{ IBV_WR_RDMA_READ, srq_m, 20480, 3000, addr + 32768 },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, srq_m, 24576, 8, addr + 40960 },
		{ IBV_WR_SEND, srq_m, 12288, 64, 0 },
		{ IBV_WR_RDMA_WRITE_WITH_IMM, srq_m, 16384, 32, addr + 53248 },
	};
	int nw = sizeof(w) / sizeof(w[0]);
	for (int k = 0; k < nw; k++) {
		struct ibv_sge sge = { .addr = (uintptr_t)s.buf + w[k].off,
				       .length = w[k].len,
				       .lkey = s.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = k + 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = w[k].op, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		wr.qp_type.xrc.remote_srqn = w[k].srqn;
		if (w[k].op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			wr.wr.atomic.remote_addr = w[k].raddr;
			wr.wr.atomic.rkey = rkey;
			wr.wr.atomic.compare_add = 5;
		} else {
			wr.wr.rdma.remote_addr = w[k].raddr;
			wr.wr.rdma.rkey = rkey;
		}
		if (w[k].op == IBV_WR_RDMA_WRITE_WITH_IMM)
			wr.imm_data = htonl(0x1234);
		if (ibv_post_send(ini, &wr, &bad))
			die("post_send");
	}
	int ok = 1;
	for (int k = 0; k < nw; k++) {
		struct ibv_wc wc;
		int got = poll_one(s.cq, &wc, 30) == 0;
		ok = ok && got && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(k + 1);
		if (got && wc.status != IBV_WC_SUCCESS)
			printf("wr %llu: %s\n", (unsigned long long)wc.wr_id,
			       ibv_wc_status_str(wc.status));
	}
	CHECK(ok, "ini: 8 work requests through the owner's target complete in order");
	CHECK(same(s.buf + 20480, 3000, 5), "ini: the READ brought the member's bytes");
	uint64_t orig;
	memcpy(&orig, s.buf + 24576, 8);
	CHECK(orig == 7, "ini: FETCH_ADD returned the member's value: %llu",
	      (unsigned long long)orig);
	CHECK(ibv_destroy_qp(ini) == 0, "ini: QP destroyed");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "owner"))
		return owner(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "member"))
		return member(argv[2]);
	if (argc == 2 && !strcmp(argv[1], "ini"))
		return initiator();
	fprintf(stderr, "usage: %s owner FILE | member FILE | ini\n", argv[0]);
	return 2;
}
