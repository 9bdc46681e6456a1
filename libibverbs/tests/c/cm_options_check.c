/* The rdma_cm options servers use, through the librdmacm drop-in in one
 * process (argv[1]: the server's IPv4 device address, argv[2]: the
 * client's, argv[3]: a port P (P+1, P+2 are used too), argv[4]: "v6" when
 * a device on [::1] is configured, else "nov6"):
 *
 *  - RDMA_OPTION_ID_AFONLY: one id listens on [::]:P with AFONLY, another
 *    on 0.0.0.0:P; an IPv4 client's CONNECT_REQUEST arrives on the second,
 *    an IPv6 client's (over [::1]) on the first (its listen_id);
 *  - without AFONLY (net.ipv6.bindv6only 0) [::]:P+1 and 0.0.0.0:P+1
 *    collide: the second bind fails with EADDRNOTAVAIL, as the kernel's
 *    cma_check_port answers a wildcard;
 *  - RDMA_OPTION_ID_REUSEADDR: two ids bind the same address and port;
 *    none listens while the other holds it (EADDRINUSE), and once one
 *    listens no other binds it;
 *  - RDMA_OPTION_ID_TOS: the client's 0x60 (IPv6: 0xb8) is the traffic
 *    class of both sides' address vectors (rdma_init_qp_attr,
 *    ibv_query_qp), so every packet of the QPs leaves with it (the test
 *    reads the capture);
 *  - the errnos of rdma_set_option: bad lengths, options after bind and
 *    listen, unknown options and levels.
 *
 * Prints one line per check ("ok ..." / "FAIL ...") and exits 0 only if
 * every check held. Built and run by tests/rdmacm.rs. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common.h"

static struct sockaddr_storage addr_of(const char *ip, uint16_t port)
{
	struct sockaddr_storage s;
	struct sockaddr_in *a = (struct sockaddr_in *)&s;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&s;

	memset(&s, 0, sizeof(s));
	if (inet_pton(AF_INET, ip, &a->sin_addr) == 1) {
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
	} else if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
	} else {
		die("inet_pton");
	}
	return s;
}

#define SA(s) ((struct sockaddr *)&(s))

/* The MRs of the connections (deregistered before the end: a PD with MRs
 * keeps the CM's devices open, and their captures unflushed, at exit). */
static struct ibv_mr *mrs[4];
static int nmrs;

static struct rdma_event_channel *channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (!ch)
		die("rdma_create_event_channel");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	return ch;
}

/* The next event of `ch`, which must be `want` (else exit). */
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

static struct rdma_cm_id *new_id(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	return id;
}

/* rdma_set_option with an int: 0, or the errno. */
static int set_int(struct rdma_cm_id *id, int name, int v)
{
	return rdma_set_option(id, RDMA_OPTION_ID, name, &v, sizeof(v)) ? errno : 0;
}

/* rdma_bind_addr: 0, or the errno. */
static int bind_to(struct rdma_cm_id *id, const char *ip, uint16_t port)
{
	struct sockaddr_storage a = addr_of(ip, port);

	return rdma_bind_addr(id, SA(a)) ? errno : 0;
}

static int listen_on(struct rdma_cm_id *id)
{
	return rdma_listen(id, 8) ? errno : 0;
}

/* The traffic class of the RTR address vector rdma_init_qp_attr gives. */
static int rtr_tclass(struct rdma_cm_id *id)
{
	struct ibv_qp_attr a;
	int mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (rdma_init_qp_attr(id, &a, &mask) || !(mask & IBV_QP_AV))
		return -1;
	return a.ah_attr.grh.traffic_class;
}

static int query_tclass(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	if (ibv_query_qp(qp, &a, IBV_QP_AV, &i))
		return -1;
	return a.ah_attr.grh.traffic_class;
}

/* A client on `src` (NULL: let the CM choose) with TOS `tos` connects to
 * dst:port and sends `msg`; the server takes the request from `sch`,
 * which must name `want_listener`. Checks as it goes; the ids are left
 * connected in *client and *server. */
static void connect_pair(struct rdma_event_channel *cch, struct rdma_event_channel *sch,
			 const char *src, const char *dst, uint16_t port, uint8_t tos,
			 struct rdma_cm_id *want_listener, const char *what,
			 struct rdma_cm_id **client, struct rdma_cm_id **server)
{
	struct sockaddr_storage s, d = addr_of(dst, port);
	struct rdma_cm_id *c = new_id(cch), *id;
	struct rdma_cm_event *ev;
	struct ibv_qp_init_attr qa;
	static char rbuf[2][64], sbuf[2][64];
	static int n;
	char *rb = rbuf[n], *sb = sbuf[n];
	int rc;

	n++;
	if (src)
		s = addr_of(src, 0);
	rc = rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos));
	CHECK(rc == 0, "%s: RDMA_OPTION_ID_TOS 0x%02x on the unbound client id", what, tos);
	if (rdma_resolve_addr(c, src ? SA(s) : NULL, SA(d), 2000))
		die("rdma_resolve_addr");
	rdma_ack_cm_event(wait_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(c, 2000))
		die("rdma_resolve_route");
	rdma_ack_cm_event(wait_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	qa = qp_init_attr(NULL, IBV_QPT_RC, 4, 4);
	if (rdma_create_qp(c, NULL, &qa) || rdma_connect(c, NULL))
		die("client rdma_create_qp/rdma_connect");

	ev = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == want_listener, "%s: CONNECT_REQUEST on the %s listener", what,
	      ev->listen_id == want_listener ? "expected" : "WRONG");
	id = ev->id;
	CHECK(rdma_get_peer_addr(id)->sa_family == d.ss_family,
	      "%s: the request's peer address is of family %d", what, d.ss_family);
	rdma_ack_cm_event(ev);
	qa = qp_init_attr(NULL, IBV_QPT_RC, 4, 4);
	if (rdma_create_qp(id, NULL, &qa))
		die("server rdma_create_qp");
	struct ibv_mr *rmr = ibv_reg_mr(id->qp->pd, rb, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rsge = { .addr = (uintptr_t)rb, .length = 64, .lkey = rmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(id->qp, &rwr, &rbad))
		die("ibv_post_recv");
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7 };
	if (rdma_accept(id, &cp))
		die("rdma_accept");
	rdma_ack_cm_event(wait_event(cch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(wait_event(sch, RDMA_CM_EVENT_ESTABLISHED));

	CHECK(rtr_tclass(c) == tos && query_tclass(c->qp) == tos,
	      "%s: the client's QP: traffic class 0x%02x (rdma_init_qp_attr 0x%02x)", what,
	      query_tclass(c->qp), rtr_tclass(c));
	CHECK(rtr_tclass(id) == tos && query_tclass(id->qp) == tos,
	      "%s: the server's QP takes the REQ's: traffic class 0x%02x (rdma_init_qp_attr 0x%02x)",
	      what, query_tclass(id->qp), rtr_tclass(id));

	snprintf(sb, 64, "tos 0x%02x", tos);
	struct ibv_mr *smr = ibv_reg_mr(c->qp->pd, sb, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge ssge = { .addr = (uintptr_t)sb, .length = 64, .lkey = smr->lkey };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ssge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *sbad;
	struct ibv_wc wc;
	if (ibv_post_send(c->qp, &swr, &sbad))
		die("ibv_post_send");
	rc = poll_one(c->send_cq, &wc, 10);
	CHECK(rc == 0 && wc.status == IBV_WC_SUCCESS, "%s: the client's SEND completed", what);
	rc = poll_one(id->recv_cq, &wc, 10);
	CHECK(rc == 0 && wc.status == IBV_WC_SUCCESS && strcmp(rb, sb) == 0,
	      "%s: the server received \"%s\"", what, rb);
	*client = c;
	*server = id;
	mrs[nmrs++] = rmr;
	mrs[nmrs++] = smr;
}

static void disconnect_pair(struct rdma_event_channel *cch, struct rdma_event_channel *sch,
			    struct rdma_cm_id *c, struct rdma_cm_id *s)
{
	rdma_disconnect(c);
	rdma_ack_cm_event(wait_event(cch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_ack_cm_event(wait_event(sch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *l6, *l4, *x, *y, *z, *c4, *s4, *c6 = NULL, *s6 = NULL;
	const char *srv, *cli;
	uint16_t p;
	int v6, rc, one = 1, v6only = 0;
	uint8_t tos = 0x60;
	FILE *f;

	if (argc != 5) {
		fprintf(stderr, "usage: %s SERVER_IPV4 CLIENT_IPV4 PORT v6|nov6\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	srv = argv[1];
	cli = argv[2];
	p = (uint16_t)atoi(argv[3]);
	v6 = strcmp(argv[4], "v6") == 0;
	f = fopen("/proc/sys/net/ipv6/bindv6only", "r");
	if (f) {
		if (fscanf(f, "%d", &v6only) != 1)
			v6only = 0;
		fclose(f);
	}
	sch = channel();
	cch = channel();

	/* ---- AFONLY: one port, two listeners */
	l6 = new_id(sch);
	l4 = new_id(sch);
	CHECK(set_int(l6, RDMA_OPTION_ID_AFONLY, 1) == 0, "RDMA_OPTION_ID_AFONLY 1 on an idle id");
	rc = bind_to(l6, "::", p);
	CHECK(rc == 0, "rdma_bind_addr([::]:%u) with AFONLY: %d", p, rc);
	rc = bind_to(l4, "0.0.0.0", p);
	CHECK(rc == 0, "rdma_bind_addr(0.0.0.0:%u) next to it: %d", p, rc);
	if (v6) {
		rc = listen_on(l6);
		CHECK(rc == 0, "rdma_listen([::]:%u): %d", p, rc);
	}
	rc = listen_on(l4);
	CHECK(rc == 0, "rdma_listen(0.0.0.0:%u): %d", p, rc);
	x = new_id(sch);
	rc = bind_to(x, "0.0.0.0", p);
	CHECK(rc == EADDRNOTAVAIL, "a third id on 0.0.0.0:%u: errno %d (EADDRNOTAVAIL)", p, rc);
	rc = bind_to(x, srv, p);
	CHECK(rc == EADDRNOTAVAIL, "and on %s:%u under the wildcard: errno %d (EADDRNOTAVAIL)",
	      srv, p, rc);
	rdma_destroy_id(x);

	connect_pair(cch, sch, cli, srv, p, tos, l4, "IPv4 client", &c4, &s4);
	if (v6)
		connect_pair(cch, sch, NULL, "::1", p, 0xb8, l6, "IPv6 client", &c6, &s6);
	else
		printf("SKIPPED: the IPv6 client (no device on [::1])\n");

	/* ---- without AFONLY: the two wildcards collide */
	x = new_id(sch);
	y = new_id(sch);
	rc = bind_to(x, "::", p + 1);
	CHECK(rc == 0, "rdma_bind_addr([::]:%u) without AFONLY (bindv6only %d): %d", p + 1,
	      v6only, rc);
	rc = bind_to(y, "0.0.0.0", p + 1);
	if (v6only)
		CHECK(rc == 0, "0.0.0.0:%u next to it (bindv6only 1): %d", p + 1, rc);
	else
		CHECK(rc == EADDRNOTAVAIL, "0.0.0.0:%u next to it: errno %d (EADDRNOTAVAIL)",
		      p + 1, rc);
	rdma_destroy_id(y);
	y = new_id(sch);
	rc = bind_to(y, srv, p + 1);
	if (!v6only)
		CHECK(rc == EADDRNOTAVAIL, "%s:%u under it: errno %d (EADDRNOTAVAIL)", srv, p + 1,
		      rc);
	rdma_destroy_id(y);
	/* AFONLY may still change while bound, not once listening */
	CHECK(set_int(x, RDMA_OPTION_ID_AFONLY, 1) == 0, "RDMA_OPTION_ID_AFONLY on a bound id: 0");
	rdma_destroy_id(x);

	/* ---- REUSEADDR */
	x = new_id(sch);
	y = new_id(sch);
	z = new_id(sch);
	rc = bind_to(x, srv, p + 2);
	CHECK(rc == 0, "rdma_bind_addr(%s:%u): %d", srv, p + 2, rc);
	rc = bind_to(y, srv, p + 2);
	CHECK(rc == EADDRINUSE, "a second id on %s:%u without REUSEADDR: errno %d (EADDRINUSE)",
	      srv, p + 2, rc);
	rdma_destroy_id(x);
	rdma_destroy_id(y);
	x = new_id(sch);
	y = new_id(sch);
	CHECK(set_int(x, RDMA_OPTION_ID_REUSEADDR, 1) == 0 &&
		      set_int(y, RDMA_OPTION_ID_REUSEADDR, 1) == 0,
	      "RDMA_OPTION_ID_REUSEADDR 1 on two idle ids");
	rc = bind_to(x, srv, p + 2);
	CHECK(rc == 0, "the first binds %s:%u: %d", srv, p + 2, rc);
	rc = bind_to(y, srv, p + 2);
	CHECK(rc == 0, "the second binds %s:%u too: %d", srv, p + 2, rc);
	rc = bind_to(z, srv, p + 2);
	CHECK(rc == EADDRINUSE, "a third without REUSEADDR: errno %d (EADDRINUSE)", rc);
	rc = listen_on(x);
	CHECK(rc == EADDRINUSE,
	      "rdma_listen while the other id holds the address: errno %d (EADDRINUSE)", rc);
	CHECK(set_int(y, RDMA_OPTION_ID_REUSEADDR, 0) == EINVAL,
	      "RDMA_OPTION_ID_REUSEADDR 0 on a bound id: EINVAL");
	rdma_destroy_id(y);
	rc = listen_on(x);
	CHECK(rc == 0, "rdma_listen once it is alone: %d", rc);
	CHECK(set_int(x, RDMA_OPTION_ID_REUSEADDR, 1) == EINVAL,
	      "RDMA_OPTION_ID_REUSEADDR 1 on a listening id: EINVAL");
	y = new_id(sch);
	CHECK(set_int(y, RDMA_OPTION_ID_REUSEADDR, 1) == 0, "REUSEADDR on a new id");
	rc = bind_to(y, srv, p + 2);
	CHECK(rc == EADDRINUSE, "it cannot bind the listener's %s:%u: errno %d (EADDRINUSE)", srv,
	      p + 2, rc);
	rdma_destroy_id(y);
	y = new_id(sch);
	CHECK(set_int(y, RDMA_OPTION_ID_REUSEADDR, 1) == 0 && bind_to(y, "0.0.0.0", p + 2) ==
									EADDRNOTAVAIL,
	      "nor 0.0.0.0:%u: EADDRNOTAVAIL", p + 2);
	rdma_destroy_id(y);
	rdma_destroy_id(z);
	rdma_destroy_id(x);

	/* ---- rdma_set_option's errnos */
	x = new_id(sch);
	errno = 0;
	rc = rdma_set_option(x, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof(one));
	CHECK(rc == -1 && errno == EINVAL, "RDMA_OPTION_ID_TOS with optlen %zu: EINVAL",
	      sizeof(one));
	errno = 0;
	rc = rdma_set_option(x, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &tos, sizeof(tos));
	CHECK(rc == -1 && errno == EINVAL, "RDMA_OPTION_ID_REUSEADDR with optlen 1: EINVAL");
	errno = 0;
	rc = rdma_set_option(x, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &tos, sizeof(tos));
	CHECK(rc == -1 && errno == EINVAL, "RDMA_OPTION_ID_AFONLY with optlen 1: EINVAL");
	errno = 0;
	rc = rdma_set_option(x, RDMA_OPTION_ID, 99, &one, sizeof(one));
	CHECK(rc == -1 && errno == ENOSYS, "RDMA_OPTION_ID option 99: ENOSYS");
	errno = 0;
	rc = rdma_set_option(x, 7, RDMA_OPTION_ID_TOS, &tos, sizeof(tos));
	CHECK(rc == -1 && errno == ENOSYS, "level 7: ENOSYS");
	if (bind_to(x, srv, 0))
		die("bind");
	rc = rdma_set_option(x, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos));
	CHECK(rc == 0, "RDMA_OPTION_ID_TOS on a bound id: 0");
	uint8_t t = 12;
	rc = rdma_set_option(x, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t));
	CHECK(rc == 0, "RDMA_OPTION_ID_ACK_TIMEOUT on a bound id: 0");
	CHECK(listen_on(x) == 0 && set_int(x, RDMA_OPTION_ID_AFONLY, 1) == EINVAL,
	      "RDMA_OPTION_ID_AFONLY on a listening id: EINVAL");
	rdma_destroy_id(x);

	/* ---- goodbye: everything torn down, so the captures are complete */
	disconnect_pair(cch, sch, c4, s4);
	if (c6)
		disconnect_pair(cch, sch, c6, s6);
	for (int i = 0; i < nmrs; i++)
		ibv_dereg_mr(mrs[i]);
	rdma_destroy_id(l6);
	rdma_destroy_id(l4);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
