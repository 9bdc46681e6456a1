/* The librdmacm drop-in from C, as a program sees it: rdma_getaddrinfo,
 * a non-blocking event channel fd (EAGAIN, poll), private data in
 * CONNECT_REQUEST (56 bytes after librdmacm's header), REJECTED (status 28,
 * 148 bytes), ESTABLISHED (196 bytes), rdma_create_qp with a NULL PD and
 * NULL CQs (the library makes them), a SEND over the connection,
 * disconnect, a connection whose QPs the program moves itself
 * (rdma_init_qp_attr, CONNECT_RESPONSE, rdma_establish), and librdmacm's
 * errnos for what is not supported.
 *
 *   rdmacm_check server ADDR PORT      rdmacm_check client ADDR PORT
 *
 * Prints "ok   ..." per check; exits 1 at the first failure. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "common.h"

#define CHECK(c, ...)                                                        \
	do {                                                                 \
		if (!(c)) {                                                  \
			printf("FAIL %s:%d: %s (errno %d %s)\n", __FILE__,   \
			       __LINE__, #c, errno, strerror(errno));        \
			exit(1);                                             \
		}                                                            \
		printf("ok   " __VA_ARGS__);                                 \
		printf("\n");                                                \
		fflush(stdout);                                              \
	} while (0)

static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch,
					enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	for (;;) {
		if (rdma_get_cm_event(ch, &ev) == 0)
			break;
		if (errno != EAGAIN) {
			printf("FAIL rdma_get_cm_event: %s\n", strerror(errno));
			exit(1);
		}
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		if (poll(&p, 1, 20000) != 1) {
			printf("FAIL no event (%s) within 20 s\n", rdma_event_str(want));
			exit(1);
		}
	}
	if (ev->event != want) {
		printf("FAIL got %s status %d, wanted %s\n", rdma_event_str(ev->event),
		       ev->status, rdma_event_str(want));
		exit(1);
	}
	return ev;
}

static int all_zero(const unsigned char *p, int n)
{
	for (int i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}


/* move `qp` to `state` with the attributes rdma_init_qp_attr gives */
static int move_qp(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state)
{
	struct ibv_qp_attr a = { .qp_state = state };
	int mask;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -1;
	return ibv_modify_qp(qp, &a, mask);
}

static struct ibv_qp *own_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr qa = qp_init_attr(cq, IBV_QPT_RC, 4, 4);
	return ibv_create_qp(pd, &qa);
}

static void server(const char *addr, const char *port)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	CHECK(rdma_getaddrinfo(addr, port, &hints, &res) == 0 && res->ai_src_addr &&
		      res->ai_src_addr->sa_family == AF_INET,
	      "rdma_getaddrinfo(%s, %s, RAI_PASSIVE) gives the source address", addr, port);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0, "event channel with a real fd");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "fd made non-blocking");
	struct rdma_cm_event *ev;
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "empty non-blocking channel: EAGAIN");
	struct rdma_cm_id *listen;
	CHECK(rdma_create_id(ch, &listen, (void *)0x1234, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(listen, res->ai_src_addr) == 0, "rdma_bind_addr");
	CHECK(rdma_get_src_port(listen) == htons(atoi(port)), "rdma_get_src_port");
	CHECK(rdma_listen(listen, 4) == 0, "rdma_listen");
	rdma_freeaddrinfo(res);

	/* 1: reject with private data */
	ev = wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == listen && ev->id != listen && ev->id->context == (void *)0x1234,
	      "CONNECT_REQUEST: listen_id, new id, the listener's context");
	CHECK(ev->param.conn.private_data_len == 56 &&
		      memcmp(ev->param.conn.private_data, "hello-req", 10) == 0 &&
		      all_zero((const unsigned char *)ev->param.conn.private_data + 10, 46),
	      "CONNECT_REQUEST private data: the client's 10 bytes, length 56");
	CHECK(ev->id->verbs != NULL && rdma_get_peer_addr(ev->id)->sa_family == AF_INET,
	      "the new id has verbs and the peer's address");
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(rdma_reject(id, "go-away", 8) == 0, "rdma_reject with 8 bytes");
	rdma_destroy_id(id);

	/* 2: accept, receive a SEND */
	ev = wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	rdma_ack_cm_event(ev);
	struct ibv_qp_init_attr qa = qp_init_attr(NULL, IBV_QPT_RC, 4, 4);
	CHECK(rdma_create_qp(id, NULL, &qa) == 0 && id->qp && id->qp->qp_num > 1 && id->send_cq &&
		      id->recv_cq && id->recv_cq_channel,
	      "rdma_create_qp(id, NULL pd, NULL CQs): QP %u, CQs and channels made",
	      id->qp ? id->qp->qp_num : 0);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(id->qp->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr != NULL, "ibv_reg_mr on the QP's PD");
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(id->qp, &rwr, &bad) == 0, "receive posted before accept");
	struct rdma_conn_param cp = { .private_data = "welcome", .private_data_len = 8,
				      .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7 };
	CHECK(rdma_accept(id, &cp) == 0, "rdma_accept with 8 bytes");
	ev = wait_event(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == id, "ESTABLISHED on the accepted id");
	rdma_ack_cm_event(ev);
	struct ibv_wc wc;
	int n = 0;
	for (int i = 0; i < 2000000 && n == 0; i++)
		n = ibv_poll_cq(id->recv_cq, 1, &wc);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && strcmp(buf, "ping") == 0,
	      "the client's SEND landed: \"%s\"", buf);
	ev = wait_event(ch, RDMA_CM_EVENT_DISCONNECTED);
	rdma_ack_cm_event(ev);
	CHECK(1, "DISCONNECTED");
	ibv_dereg_mr(mr);
	rdma_destroy_qp(id);
	CHECK(id->qp == NULL && rdma_destroy_id(id) == 0, "rdma_destroy_qp, rdma_destroy_id");
	/* a destroyed id handed back (perftest -R does on an error path):
	 * refused with EINVAL, as the kernel refuses a stale handle, no crash */
	errno = 0;
	CHECK(rdma_resolve_addr(id, NULL, res->ai_src_addr, 100) == -1 && errno == EINVAL,
	      "rdma_resolve_addr on a destroyed id: EINVAL");
	errno = 0;
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL, "rdma_destroy_id twice: EINVAL");

	/* 3: the server moves its own QP with rdma_init_qp_attr */
	ev = wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	uint32_t peer_qpn = ev->param.conn.qp_num;
	rdma_ack_cm_event(ev);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_qp *qp = own_qp(id, pd, cq);
	CHECK(qp && move_qp(id, qp, IBV_QPS_INIT) == 0 && move_qp(id, qp, IBV_QPS_RTR) == 0 &&
		      move_qp(id, qp, IBV_QPS_RTS) == 0,
	      "own QP %u to INIT, RTR, RTS with rdma_init_qp_attr", qp ? qp->qp_num : 0);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK(ibv_query_qp(qp, &qattr, IBV_QP_DEST_QPN, &qinit) == 0 && qattr.dest_qp_num == peer_qpn,
	      "its destination is the requester's QP %u", peer_qpn);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	sge.lkey = mr->lkey;
	CHECK(ibv_post_recv(qp, &rwr, &bad) == 0, "receive posted");
	struct rdma_conn_param cp3 = { .responder_resources = 1, .initiator_depth = 1,
				       .rnr_retry_count = 7, .qp_num = qp->qp_num };
	CHECK(rdma_accept(id, &cp3) == 0, "rdma_accept announcing the own QP");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ESTABLISHED));
	for (n = 0; n == 0;)
		n = ibv_poll_cq(cq, 1, &wc);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && strcmp(buf, "pong") == 0,
	      "a SEND on the own QPs landed: \"%s\"", buf);
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_DISCONNECTED));
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	{
		/* the CM's context outlives its ids and channels (librdmacm
		 * keeps it for the process): a PD and MR the program keeps on
		 * it, and new objects, work after the last id and channel are
		 * gone (libfabric's verbs domain does this) */
		struct ibv_context *verbs = id->verbs;
		static char keep[64];
		struct ibv_mr *kmr = ibv_reg_mr(pd, keep, sizeof(keep), IBV_ACCESS_LOCAL_WRITE);
		struct ibv_cq *later;

		rdma_destroy_id(id);
		CHECK(rdma_destroy_id(listen) == 0, "listener destroyed");
		rdma_destroy_event_channel(ch);
		later = ibv_create_cq(verbs, 16, NULL, NULL, 0);
		CHECK(kmr && later && ibv_destroy_cq(later) == 0 && ibv_dereg_mr(kmr) == 0 &&
			      ibv_dealloc_pd(pd) == 0,
		      "after the last id and channel: the CM's context, the program's PD and MR live");
	}
	/* destroyed twice, then used (perftest -R's error path): refused, no hang */
	rdma_destroy_event_channel(ch);
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EINVAL,
	      "rdma_get_cm_event on a destroyed channel: EINVAL");
	printf("server done\n");
}

static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, struct rdma_addrinfo *res)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(id, NULL, res->ai_dst_addr, 2000) == 0, "rdma_resolve_addr");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(id->verbs != NULL && rdma_get_local_addr(id)->sa_family == AF_INET,
	      "ADDR_RESOLVED: verbs %s", ibv_get_device_name(id->verbs->device));
	CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	return id;
}

static void client(const char *addr, const char *port)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	CHECK(rdma_getaddrinfo(addr, port, &hints, &res) == 0 && res->ai_dst_addr,
	      "rdma_getaddrinfo gives the destination");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch != NULL, "event channel (blocking)");
	struct rdma_conn_param cp = { .private_data = "hello-req", .private_data_len = 10,
				      .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };

	/* 1: rejected */
	struct rdma_cm_id *id = resolved(ch, res);
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect without a QP (qp_num 0)");
	struct rdma_cm_event *ev = wait_event(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28 && ev->param.conn.private_data_len == 148 &&
		      strcmp(ev->param.conn.private_data, "go-away") == 0,
	      "REJECTED: status 28 (consumer), the server's private data, length 148");
	CHECK(strcmp(rdma_event_str(ev->event), "RDMA_CM_EVENT_REJECTED") == 0, "rdma_event_str");
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);

	/* 2: connected, one SEND */
	id = resolved(ch, res);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = qp_init_attr(cq, IBV_QPT_RC, 4, 4);
	CHECK(pd && cq && rdma_create_qp(id, pd, &qa) == 0 && id->qp, "rdma_create_qp with own PD/CQ");
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect");
	ev = wait_event(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->param.conn.private_data_len == 196 &&
		      strcmp(ev->param.conn.private_data, "welcome") == 0,
	      "ESTABLISHED: the server's private data, length 196");
	rdma_ack_cm_event(ev);
	static char msg[64] = "ping";
	struct ibv_mr *mr = ibv_reg_mr(pd, msg, sizeof(msg), 0);
	struct ibv_sge sge = { .addr = (uintptr_t)msg, .length = 5, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(id->qp, &wr, &bad) == 0, "SEND posted");
	struct ibv_wc wc;
	int n = 0;
	for (int i = 0; i < 2000000 && n == 0; i++)
		n = ibv_poll_cq(cq, 1, &wc);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 9, "SEND completed");
	CHECK(rdma_disconnect(id) == 0, "rdma_disconnect");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_DISCONNECTED));

	/* what is not supported answers as librdmacm does */
	struct sockaddr_in nowhere = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x0a090909) };
	struct rdma_cm_id *other;
	CHECK(rdma_create_id(ch, &other, NULL, RDMA_PS_TCP) == 0, "another id");
	errno = 0;
	CHECK(rdma_bind_addr(other, (struct sockaddr *)&nowhere) == -1 && errno == EADDRNOTAVAIL,
	      "bind to an address no device has: EADDRNOTAVAIL");
	errno = 0;
	CHECK(rdma_join_multicast(other, (struct sockaddr *)&nowhere, NULL) == -1 && errno == EINVAL,
	      "rdma_join_multicast on a TCP id on no device: EINVAL");
	uint8_t tos = 0;
	CHECK(rdma_set_option(other, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0,
	      "rdma_set_option(TOS) accepted");
	/* ECE, as librdmacm keeps it for a device without ECE options (rxe) */
	struct ibv_ece ece = { .vendor_id = 0, .options = 1 };
	errno = 0;
	CHECK(rdma_set_local_ece(other, &ece) == -1 && errno == EINVAL,
	      "rdma_set_local_ece without a vendor ID: EINVAL");
	ece.vendor_id = 0x15b3;
	CHECK(rdma_set_local_ece(other, &ece) == 0, "rdma_set_local_ece before the QP: 0");
	errno = 0;
	CHECK(rdma_set_local_ece(other, NULL) == -1 && errno == EINVAL, "rdma_set_local_ece(NULL): EINVAL");
	ece.comp_mask = 7;
	CHECK(rdma_get_remote_ece(other, &ece) == 0 && ece.vendor_id == 0 && ece.options == 0 &&
		      ece.comp_mask == 0,
	      "rdma_get_remote_ece: no offer from the peer (0, 0)");
	errno = 0;
	CHECK(rdma_get_remote_ece(id, &ece) == -1 && errno == EINVAL,
	      "rdma_get_remote_ece of an id with a QP: EINVAL");
	rdma_destroy_id(other);

	/* a UDP id on this side's device: the joins the CM refuses */
	struct sockaddr_in here = *(struct sockaddr_in *)rdma_get_local_addr(id);
	here.sin_port = 0;
	struct rdma_cm_id *ud;
	CHECK(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0 &&
		      rdma_bind_addr(ud, (struct sockaddr *)&here) == 0,
	      "a UDP id bound to the device's address");
	errno = 0;
	CHECK(rdma_join_multicast(ud, (struct sockaddr *)&nowhere, NULL) == -1 && errno == EINVAL,
	      "rdma_join_multicast of a unicast address: EINVAL");
	struct sockaddr_in6 g6 = { .sin6_family = AF_INET6 };
	g6.sin6_addr.s6_addr[0] = 0xff;
	g6.sin6_addr.s6_addr[1] = 0x0e;
	g6.sin6_addr.s6_addr[15] = 1;
	errno = 0;
	CHECK(rdma_join_multicast(ud, (struct sockaddr *)&g6, NULL) == -1 && errno == EOPNOTSUPP,
	      "rdma_join_multicast of an IPv6 group: EOPNOTSUPP (as the kernel's CM on RoCEv2)");
	struct sockaddr_in g4 = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0xef2f0001) };
	errno = 0;
	CHECK(rdma_leave_multicast(ud, (struct sockaddr *)&g4) == -1 && errno == EADDRNOTAVAIL,
	      "rdma_leave_multicast of a group not joined: EADDRNOTAVAIL");
	struct rdma_cm_join_mc_attr_ex jx = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS,
					      .addr = (struct sockaddr *)&g4 };
	errno = 0;
	CHECK(rdma_join_multicast_ex(ud, &jx, NULL) == -1 && errno == EINVAL,
	      "rdma_join_multicast_ex without join flags: EINVAL");
	rdma_destroy_id(ud);

	ibv_dereg_mr(mr);
	rdma_destroy_qp(id);
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "CQ and PD freed after the QP");
	rdma_destroy_id(id);

	/* 3: the client moves its own QP: CONNECT_RESPONSE, then rdma_establish */
	id = resolved(ch, res);
	pd = ibv_alloc_pd(id->verbs);
	cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_qp *qp = own_qp(id, pd, cq);
	CHECK(qp && move_qp(id, qp, IBV_QPS_INIT) == 0, "own QP %u to INIT", qp ? qp->qp_num : 0);
	struct rdma_conn_param cp3 = { .responder_resources = 1, .initiator_depth = 1,
				       .retry_count = 7, .rnr_retry_count = 7, .qp_num = qp->qp_num };
	CHECK(rdma_connect(id, &cp3) == 0, "rdma_connect announcing the own QP");
	ev = wait_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	rdma_ack_cm_event(ev);
	CHECK(move_qp(id, qp, IBV_QPS_RTR) == 0 && move_qp(id, qp, IBV_QPS_RTS) == 0,
	      "CONNECT_RESPONSE, own QP to RTR and RTS");
	/* the RTU goes out; ESTABLISHED is the passive side's event only */
	CHECK(rdma_establish(id) == 0, "rdma_establish");
	strcpy(msg, "pong");
	mr = ibv_reg_mr(pd, msg, sizeof(msg), 0);
	sge.lkey = mr->lkey;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "SEND posted on the own QP");
	for (n = 0; n == 0;)
		n = ibv_poll_cq(cq, 1, &wc);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "SEND completed");
	CHECK(rdma_disconnect(id) == 0, "rdma_disconnect");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_DISCONNECTED));
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(id);
	rdma_freeaddrinfo(res);
	rdma_destroy_event_channel(ch);
	printf("client done\n");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4) {
		fprintf(stderr, "usage: %s server|client ADDR PORT\n", argv[0]);
		return 2;
	}
	if (strcmp(argv[1], "server") == 0)
		server(argv[2], argv[3]);
	else
		client(argv[2], argv[3]);
	return 0;
}
