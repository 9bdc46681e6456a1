/*
 * UD multicast through the verbs (ibv_attach_mcast / ibv_detach_mcast),
 * run by tests/semantics.rs on the drop-in.
 *
 *   mcast_check verbs GROUP
 *       one process, device 0: two UD QPs attached to GROUP, one with
 *       another Q_Key, one not attached, a sender QP; the datagram's bytes,
 *       immediate and GRH in each receiver, the Q_Key drop, and the errnos
 *       (a unicast GID, an RC QP, a detach of a group not joined, the
 *       destroy of an attached QP: EBUSY).
 *   mcast_check recv GROUP N READY_FILE
 *       device 0: one UD QP attached to GROUP with N receives posted;
 *       touches READY_FILE once attached, then waits (20 s at most) for N
 *       datagrams and checks each one's bytes (datagram i: 64 bytes of
 *       the pattern i*7+j).
 *   mcast_check send GROUP N
 *       device 0: sends N such datagrams to GROUP, QPN 0xFFFFFF.
 *
 * Exit status 0 with "0 failures" when every check passed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common.h"

#define QKEY 0x11111111u
#define LEN 64
#define SLOT 256

static union ibv_gid group_gid(const char *s)
{
	union ibv_gid g;
	struct in_addr a;

	memset(&g, 0, sizeof(g));
	if (inet_pton(AF_INET, s, &a) == 1) {
		g.raw[10] = 0xff;
		g.raw[11] = 0xff;
		memcpy(&g.raw[12], &a, 4);
	} else if (inet_pton(AF_INET6, s, g.raw) != 1) {
		die("group address");
	}
	return g;
}

static struct ibv_qp *ud_qp(struct side *s, struct ibv_cq *cq, uint32_t qkey, int depth)
{
	struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_UD, depth, depth);
	struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);

	if (!qp || ud_ready(qp, qkey, 0))
		die("UD QP");
	return qp;
}

static void post_recv_at(struct ibv_qp *qp, struct side *s, int slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->buf + slot * SLOT),
			       .length = SLOT,
			       .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	if (ibv_post_recv(qp, &wr, &bad))
		die("post_recv");
}

static void fill(uint8_t *p, int i)
{
	for (int j = 0; j < LEN; j++)
		p[j] = (uint8_t)(i * 7 + j);
}

static int send_to_group(struct side *s, struct ibv_qp *qp, union ibv_gid g, int i)
{
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	struct ibv_ah *ah;
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = LEN, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	aa.grh.dgid = g;
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(s->pd, &aa);
	if (!ah)
		die("ibv_create_ah to the group");
	fill(s->buf, i);
	wr.imm_data = htonl(0x5000 + i);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 0xffffff;
	wr.wr.ud.remote_qkey = QKEY;
	if (ibv_post_send(qp, &wr, &bad))
		die("post_send to the group");
	if (poll_one(qp->send_cq, &wc, 10) != 0 || wc.status != IBV_WC_SUCCESS)
		die("send completion");
	ibv_destroy_ah(ah);
	return 0;
}

/* Datagram `i` in slot `slot` of `s`: the GRH area's IPv4 destination is
 * the group, then the 64 bytes. */
static int landed(struct side *s, int slot, int i, union ibv_gid g)
{
	uint8_t want[LEN];
	uint8_t *p = s->buf + slot * SLOT;

	fill(want, i);
	return memcmp(p + 20 + 16, &g.raw[12], 4) == 0 && memcmp(p + 40, want, LEN) == 0;
}

static void setup(struct side *s)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list || n < 1)
		die("no device");
	open_side(list[0], s, 64, NULL);
	s->buf = calloc(1, 64 * SLOT);
	s->mr = ibv_reg_mr(s->pd, s->buf, 64 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	if (!s->buf || !s->mr)
		die("mr");
}

static int part_verbs(const char *grp)
{
	struct side s;
	union ibv_gid g = group_gid(grp);
	struct ibv_device_attr da;
	struct ibv_wc wc[8];
	int n = 0;

	setup(&s);
	CHECK(ibv_query_device(s.ctx, &da) == 0 && da.max_mcast_grp == 8192 &&
		      da.max_mcast_qp_attach == 56 && da.max_total_mcast_qp_attach == 0x70000,
	      "ibv_query_device: max_mcast_grp %d, max_mcast_qp_attach %d, max_total %d (rxe's)",
	      da.max_mcast_grp, da.max_mcast_qp_attach, da.max_total_mcast_qp_attach);
	struct ibv_qp *r1 = ud_qp(&s, s.cq, QKEY, 8), *r2 = ud_qp(&s, s.cq, QKEY, 8);
	struct ibv_qp *other_key = ud_qp(&s, s.cq, 0x2222, 8), *idle = ud_qp(&s, s.cq, QKEY, 8);
	struct ibv_cq *txcq = ibv_create_cq(s.ctx, 16, NULL, NULL, 0);
	if (!txcq)
		die("sender's CQ");
	struct ibv_qp *tx = ud_qp(&s, txcq, QKEY, 8);
	post_recv_at(r1, &s, 1);
	post_recv_at(r2, &s, 2);
	post_recv_at(other_key, &s, 3);
	post_recv_at(idle, &s, 4);
	CHECK(ibv_attach_mcast(r1, &g, 0) == 0, "ibv_attach_mcast(%s)", grp);
	CHECK(ibv_attach_mcast(r1, &g, 0) == 0, "a second attach of the same QP: 0 (a no-op)");
	CHECK(ibv_attach_mcast(r2, &g, 0) == 0, "a second QP in the group");
	CHECK(ibv_attach_mcast(other_key, &g, 0) == 0, "a QP with another Q_Key");
	send_to_group(&s, tx, g, 5);
	double end = now_s() + 10;
	int got1 = 0, got2 = 0;
	while (now_s() < end && !(got1 && got2)) {
		n = ibv_poll_cq(s.cq, 8, wc);
		for (int k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS || wc[k].opcode != IBV_WC_RECV)
				continue;
			int ok = wc[k].byte_len == 40 + LEN && (wc[k].wc_flags & IBV_WC_GRH) &&
				 (wc[k].wc_flags & IBV_WC_WITH_IMM) &&
				 ntohl(wc[k].imm_data) == 0x5005 && wc[k].src_qp == tx->qp_num &&
				 landed(&s, (int)wc[k].wr_id, 5, g);
			if (wc[k].qp_num == r1->qp_num && ok)
				got1 = 1;
			if (wc[k].qp_num == r2->qp_num && ok)
				got2 = 1;
			if (wc[k].qp_num == other_key->qp_num || wc[k].qp_num == idle->qp_num)
				got1 = got2 = -1;
		}
	}
	CHECK(got1 == 1 && got2 == 1,
	      "both attached QPs got the datagram: 40 + 64 bytes, GRH (destination %s), immediate, src_qp, the bytes",
	      grp);
	usleep(100000);
	n = ibv_poll_cq(s.cq, 8, wc);
	CHECK(n == 0, "no completion for the QP with another Q_Key, none for the QP not attached");

	union ibv_gid uni = s.gid;
	errno = 0;
	CHECK(ibv_attach_mcast(r1, &uni, 0) == EINVAL, "attach to a unicast GID: EINVAL");
	struct ibv_qp_init_attr ia = qp_init_attr(s.cq, IBV_QPT_RC, 1, 1);
	struct ibv_qp *rc = ibv_create_qp(s.pd, &ia);
	CHECK(rc && ibv_attach_mcast(rc, &g, 0) == EINVAL, "attach of an RC QP: EINVAL");
	if (rc)
		ibv_destroy_qp(rc);
	union ibv_gid g2 = group_gid("239.9.9.9");
	CHECK(ibv_detach_mcast(r1, &g2, 0) == EINVAL, "detach from a group not joined: EINVAL");
	CHECK(ibv_destroy_qp(r2) == EBUSY, "ibv_destroy_qp of an attached QP: EBUSY");
	CHECK(ibv_detach_mcast(r2, &g, 0) == 0 && ibv_destroy_qp(r2) == 0,
	      "detached, then destroyed");
	CHECK(ibv_detach_mcast(r1, &g, 0) == 0 && ibv_detach_mcast(other_key, &g, 0) == 0,
	      "the others detached");
	CHECK(ibv_detach_mcast(r1, &g, 0) == EINVAL, "detached twice: EINVAL");
	/* nobody attached: the next datagram is dropped by the device */
	post_recv_at(r1, &s, 5);
	send_to_group(&s, tx, g, 6);
	usleep(200000);
	n = ibv_poll_cq(s.cq, 8, wc);
	CHECK(n == 0, "after the detaches nothing is received");
	ibv_destroy_qp(r1);
	ibv_destroy_qp(other_key);
	ibv_destroy_qp(idle);
	ibv_destroy_qp(tx);
	ibv_destroy_cq(txcq);
	return 0;
}

static int part_recv(const char *grp, int count, const char *ready)
{
	struct side s;
	union ibv_gid g = group_gid(grp);
	struct ibv_wc wc;
	int good = 0;

	setup(&s);
	struct ibv_qp *qp = ud_qp(&s, s.cq, QKEY, count);
	for (int i = 0; i < count; i++)
		post_recv_at(qp, &s, i);
	CHECK(ibv_attach_mcast(qp, &g, 0) == 0, "attached to %s", grp);
	int fd = open(ready, O_CREAT | O_WRONLY, 0600);
	if (fd < 0)
		die("ready file");
	close(fd);
	for (int i = 0; i < count; i++) {
		if (poll_one(s.cq, &wc, 20) != 0)
			break;
		int k = (int)wc.wr_id;
		if (wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + LEN &&
		    ntohl(wc.imm_data) == 0x5000u + k && landed(&s, k, k, g))
			good++;
	}
	CHECK(good == count, "received %d of %d datagrams, each with its bytes, in order", good,
	      count);
	CHECK(ibv_detach_mcast(qp, &g, 0) == 0 && ibv_destroy_qp(qp) == 0, "detached and destroyed");
	return 0;
}

static int part_send(const char *grp, int count)
{
	struct side s;
	union ibv_gid g = group_gid(grp);

	setup(&s);
	struct ibv_qp *qp = ud_qp(&s, s.cq, QKEY, 4);
	for (int i = 0; i < count; i++)
		send_to_group(&s, qp, g, i);
	CHECK(1, "sent %d datagrams to %s", count, grp);
	ibv_destroy_qp(qp);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "verbs"))
		part_verbs(argv[2]);
	else if (argc >= 5 && !strcmp(argv[1], "recv"))
		part_recv(argv[2], atoi(argv[3]), argv[4]);
	else if (argc >= 4 && !strcmp(argv[1], "send"))
		part_send(argv[2], atoi(argv[3]));
	else {
		fprintf(stderr, "usage: mcast_check verbs|recv|send GROUP [N [READY]]\n");
		return 2;
	}
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
