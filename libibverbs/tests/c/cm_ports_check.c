/* librdmacm semantics middleware relies on, through the librdmacm drop-in
 * in one process with two devices (argv[1]: roce0's address, argv[2]:
 * roce1's):
 *
 *  - rdma_bind_addr to port 0 assigns an ephemeral port from the local
 *    port range, reported by rdma_get_src_port at once (qperf -cm1 binds
 *    port 0 and publishes it), unique among this process's ids; an id
 *    that listens or resolves without a bind gets one too;
 *  - the published port is live: a client connects to it;
 *  - rdma_getaddrinfo(NULL, NULL, &hints) answers from the hints'
 *    addresses as librdmacm's addrinfo.c does (libfabric's verbs provider
 *    asks this way), and rdma_create_ep + rdma_connect work on the answer;
 *    rdma_getaddrinfo(NULL, NULL, NULL) is EINVAL.
 *
 * Prints one line per check ("ok ..." / "FAIL ...") and exits 0 only if
 * every check held. Built and run by tests/semantics.rs. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common.h"

static struct sockaddr_in sin_of(const char *ip, uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		die("inet_pton");
	return a;
}

/* The next event of `ch` within `secs` (the fd is non-blocking). */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch,
					double secs)
{
	struct rdma_cm_event *e;
	double end = now_s() + secs;

	while (now_s() < end) {
		struct pollfd p = { ch->fd, POLLIN, 0 };

		if (rdma_get_cm_event(ch, &e) == 0)
			return e;
		if (errno != EAGAIN)
			return NULL;
		poll(&p, 1, 50);
	}
	return NULL;
}

static void nonblocking(struct rdma_event_channel *ch)
{
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
}

/* ---------------------------------------------------------------- server */

struct server {
	struct rdma_event_channel *ch;
	volatile int stop;
	int established;
	int requests;
};

/* Accept every connection request of the listener's channel. */
static void *serve(void *arg)
{
	struct server *s = arg;
	double end = now_s() + 40;

	while (!s->stop && now_s() < end) {
		struct rdma_cm_event *e = next_event(s->ch, 0.2);
		struct ibv_qp_init_attr a = qp_init_attr(NULL, IBV_QPT_RC, 4, 4);

		if (!e)
			continue;
		if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			s->requests++;
			if (rdma_create_qp(e->id, NULL, &a) ||
			    rdma_accept(e->id, NULL))
				perror("server: accept");
		} else if (e->event == RDMA_CM_EVENT_ESTABLISHED) {
			__atomic_add_fetch(&s->established, 1, __ATOMIC_SEQ_CST);
		}
		rdma_ack_cm_event(e);
	}
	return NULL;
}

static void port_range(int *lo, int *hi)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	*lo = 32768;
	*hi = 60999;
	if (f) {
		if (fscanf(f, "%d %d", lo, hi) != 2) {
			*lo = 32768;
			*hi = 60999;
		}
		fclose(f);
	}
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch, *cch;
	struct rdma_cm_id *l, *ids[50], *wild[10], *u, *unbound, *c, *ep = NULL;
	struct sockaddr_in a0, a1, any;
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr qa;
	struct server srv;
	pthread_t thr;
	uint16_t lport, p;
	int lo, hi, i, j, rc, err, dup, inrange, est;
	double end;

	if (argc != 3) {
		fprintf(stderr, "usage: %s ADDR0 ADDR1\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	port_range(&lo, &hi);
	a0 = sin_of(argv[1], 0);
	a1 = sin_of(argv[2], 0);
	any = sin_of("0.0.0.0", 0);

	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	nonblocking(ch);

	/* bind to port 0: an ephemeral port, at once */
	if (rdma_create_id(ch, &l, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	rc = rdma_bind_addr(l, (struct sockaddr *)&a0);
	lport = ntohs(rdma_get_src_port(l));
	CHECK(rc == 0 && lport != 0 && lport >= lo && lport <= hi,
	      "rdma_bind_addr(%s:0): rdma_get_src_port %u, in the local port range %d-%d",
	      argv[1], lport, lo, hi);
	rc = rdma_listen(l, 8);
	CHECK(rc == 0 && ntohs(rdma_get_src_port(l)) == lport,
	      "rdma_listen: still port %u", ntohs(rdma_get_src_port(l)));

	/* every id gets a port of its own */
	dup = 0;
	inrange = 1;
	for (i = 0; i < 50; i++) {
		if (rdma_create_id(ch, &ids[i], NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(ids[i], (struct sockaddr *)&a0))
			die("bind 50 ids");
		p = ntohs(rdma_get_src_port(ids[i]));
		inrange &= p >= lo && p <= hi;
		dup |= p == lport;
		for (j = 0; j < i; j++)
			dup |= p == ntohs(rdma_get_src_port(ids[j]));
	}
	for (i = 0; i < 10; i++) {
		if (rdma_create_id(ch, &wild[i], NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(wild[i], (struct sockaddr *)&any))
			die("bind 10 wildcard ids");
		p = ntohs(rdma_get_src_port(wild[i]));
		inrange &= p >= lo && p <= hi;
		dup |= p == lport;
		for (j = 0; j < 50; j++)
			dup |= p == ntohs(rdma_get_src_port(ids[j]));
		for (j = 0; j < i; j++)
			dup |= p == ntohs(rdma_get_src_port(wild[j]));
	}
	CHECK(!dup && inrange,
	      "50 ids bound to %s:0 and 10 to 0.0.0.0:0: 60 distinct ports in the range, none the listener's",
	      argv[1]);
	for (i = 0; i < 50; i++)
		rdma_destroy_id(ids[i]);
	for (i = 0; i < 10; i++)
		rdma_destroy_id(wild[i]);
	if (rdma_create_id(ch, &u, NULL, RDMA_PS_UDP))
		die("rdma_create_id UDP");
	rc = rdma_bind_addr(u, (struct sockaddr *)&a0);
	CHECK(rc == 0 && ntohs(rdma_get_src_port(u)) != 0,
	      "an RDMA_PS_UDP id bound to port 0: port %u",
	      ntohs(rdma_get_src_port(u)));
	rdma_destroy_id(u);
	if (rdma_create_id(ch, &unbound, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	rc = rdma_listen(unbound, 8);
	p = ntohs(rdma_get_src_port(unbound));
	CHECK(rc == 0 && p != 0 && p != lport,
	      "rdma_listen without a bind: listening on port %u", p);
	rdma_destroy_id(unbound);

	/* the listener's port is live: a client on the other device connects */
	memset(&srv, 0, sizeof(srv));
	srv.ch = ch;
	if (pthread_create(&thr, NULL, serve, &srv))
		die("pthread_create");
	cch = rdma_create_event_channel();
	if (!cch)
		die("rdma_create_event_channel");
	nonblocking(cch);
	if (rdma_create_id(cch, &c, NULL, RDMA_PS_TCP))
		die("rdma_create_id client");
	a0.sin_port = htons(lport);
	rc = rdma_resolve_addr(c, (struct sockaddr *)&a1, (struct sockaddr *)&a0,
			       2000);
	est = 0;
	end = now_s() + 20;
	while (rc == 0 && !est && now_s() < end) {
		struct rdma_cm_event *e = next_event(cch, 1);

		if (!e)
			continue;
		switch (e->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			p = ntohs(rdma_get_src_port(c));
			CHECK(p != 0 && p >= lo && p <= hi,
			      "the client's rdma_resolve_addr without a port: source port %u",
			      p);
			rc = rdma_resolve_route(c, 2000);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			qa = qp_init_attr(NULL, IBV_QPT_RC, 4, 4);
			rc = rdma_create_qp(c, NULL, &qa);
			if (!rc)
				rc = rdma_connect(c, NULL);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			est = 1;
			break;
		default:
			printf("client event %s, status %d\n",
			       rdma_event_str(e->event), e->status);
			rc = -1;
		}
		rdma_ack_cm_event(e);
	}
	CHECK(est && ntohs(rdma_get_dst_port(c)) == lport,
	      "a client connected to the published port %u: ESTABLISHED", lport);

	/* rdma_getaddrinfo(NULL, NULL, &hints), as libfabric asks */
	errno = 0;
	rc = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	err = errno;
	CHECK(rc == -1 && err == EINVAL,
	      "rdma_getaddrinfo(NULL, NULL, NULL): %d, errno %d (EINVAL)", rc, err);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_qp_type = IBV_QPT_RC;
	hints.ai_port_space = RDMA_PS_TCP;
	a1.sin_port = 0;
	hints.ai_src_addr = (struct sockaddr *)&a1;
	hints.ai_src_len = sizeof(a1);
	hints.ai_dst_addr = (struct sockaddr *)&a0;
	hints.ai_dst_len = sizeof(a0);
	res = NULL;
	rc = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	CHECK(rc == 0 && res, "rdma_getaddrinfo(NULL, NULL, &hints): %d", rc);
	if (!res)
		return 1;
	CHECK(res->ai_dst_len == sizeof(a0) && res->ai_dst_addr &&
		      res->ai_dst_addr != hints.ai_dst_addr &&
		      memcmp(res->ai_dst_addr, &a0, sizeof(a0)) == 0,
	      "ai_dst_addr: a copy of the hints' destination");
	CHECK(res->ai_src_len == sizeof(a1) && res->ai_src_addr &&
		      memcmp(res->ai_src_addr, &a1, sizeof(a1)) == 0,
	      "ai_src_addr: a copy of the hints' source");
	CHECK(res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC &&
		      res->ai_port_space == RDMA_PS_TCP && res->ai_flags == 0,
	      "family %d, qp_type %d, port_space 0x%x, flags %d from the hints",
	      res->ai_family, res->ai_qp_type, res->ai_port_space,
	      res->ai_flags);
	qa = qp_init_attr(NULL, IBV_QPT_RC, 4, 4);
	rc = rdma_create_ep(&ep, res, NULL, &qa);
	CHECK(rc == 0, "rdma_create_ep on the answer: %d (errno %d)", rc,
	      rc ? errno : 0);
	rdma_freeaddrinfo(res);
	if (rc == 0) {
		rc = rdma_connect(ep, NULL);
		CHECK(rc == 0, "rdma_connect of the endpoint: %d (errno %d)", rc,
		      rc ? errno : 0);
	}
	end = now_s() + 10;
	while (__atomic_load_n(&srv.established, __ATOMIC_SEQ_CST) < 2 &&
	       now_s() < end)
		poll(NULL, 0, 10);
	CHECK(srv.established == 2 && srv.requests == 2,
	      "the listener accepted %d requests, %d ESTABLISHED", srv.requests,
	      srv.established);

	/* passive hints: the source only */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_src_addr = (struct sockaddr *)&a0;
	hints.ai_src_len = sizeof(a0);
	res = NULL;
	rc = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	CHECK(rc == 0 && res && res->ai_flags == RAI_PASSIVE &&
		      res->ai_src_len == sizeof(a0) && !res->ai_dst_addr &&
		      res->ai_dst_len == 0 &&
		      memcmp(res->ai_src_addr, &a0, sizeof(a0)) == 0,
	      "rdma_getaddrinfo(NULL, NULL, passive hints): the source, no destination");
	if (res)
		rdma_freeaddrinfo(res);

	/* localhost, which no device has: bound and resolved to the first
	 * device, as the kernel's CM does (libfabric's server binds it) */
	struct rdma_cm_id *lb = NULL;
	struct sockaddr_in lh = sin_of("127.0.0.1", 0);
	rc = rdma_create_id(NULL, &lb, NULL, RDMA_PS_TCP);
	if (rc == 0)
		rc = rdma_bind_addr(lb, (struct sockaddr *)&lh);
	CHECK(rc == 0 && lb->verbs && strcmp(ibv_get_device_name(lb->verbs->device), "roce0") == 0,
	      "rdma_bind_addr(127.0.0.1:0): on the first device (%s)",
	      rc == 0 && lb->verbs ? ibv_get_device_name(lb->verbs->device) : "none");
	if (lb)
		rdma_destroy_id(lb);
	lb = NULL;
	lh = sin_of("127.0.0.1", lport);
	rc = rdma_create_id(NULL, &lb, NULL, RDMA_PS_TCP);
	if (rc == 0)
		rc = rdma_resolve_addr(lb, NULL, (struct sockaddr *)&lh, 2000);
	struct sockaddr_in *peer = rc == 0 ? (struct sockaddr_in *)rdma_get_peer_addr(lb) : NULL;
	CHECK(rc == 0 && peer && peer->sin_addr.s_addr == inet_addr(argv[1]) &&
		      ntohs(peer->sin_port) == lport,
	      "rdma_resolve_addr(127.0.0.1): the first device's address, %s", argv[1]);
	if (lb)
		rdma_destroy_id(lb);

	srv.stop = 1;
	pthread_join(thr, NULL);
	/* exit without tearing down: the peer is this process */
	printf("%d failures\n", failures);
	_exit(failures ? 1 : 0);
}
