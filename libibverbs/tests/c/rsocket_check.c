/*
 * rsockets from C on the drop-in (the `rsocket` calls of <rdma/rsocket.h>):
 * a server and a client process exchange checked bytes over two stream
 * rsockets, one blocking and one non-blocking, and every misuse answers
 * with rdma-core's errno: a bad or closed rsocket (EBADF), NULL buffers
 * (EFAULT), calls before the connection (ENOTCONN), a refused connect
 * (ECONNREFUSED), an unknown option level (ENOTSUP), queue sizes after
 * the connection (EINVAL), a send after shutdown (ECONNRESET); a plain
 * CM connect whose private data is no rsocket connection data is refused
 * and the listener goes on.
 *
 * usage: rsocket_check server|client|sink ADDR PORT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"

#define BIG 100000

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static uint8_t pattern(int i)
{
	return (uint8_t)(i * 7 + 3);
}

/* All `len` bytes, blocking. */
static int recv_all(int s, void *buf, int len)
{
	int got = 0;

	while (got < len) {
		ssize_t n = rrecv(s, (char *)buf + got, len - got, 0);
		if (n <= 0)
			return got;
		got += n;
	}
	return got;
}

static int send_all(int s, const void *buf, int len)
{
	int done = 0;

	while (done < len) {
		ssize_t n = rsend(s, (const char *)buf + done, len - done, 0);
		if (n <= 0)
			return done;
		done += n;
	}
	return done;
}

/* Wait for `events` on rsocket `s` (at most 10 s). */
static short wait_for(int s, short events)
{
	struct pollfd p = { .fd = s, .events = events };
	int r = rpoll(&p, 1, 10000);
	return r == 1 ? p.revents : 0;
}

static void server_blocking(int lfd)
{
	struct sockaddr_in peer;
	socklen_t plen = sizeof peer;
	static uint8_t buf[BIG];
	char small[64];
	int fd, i, ok;

	fd = raccept(lfd, (struct sockaddr *)&peer, &plen);
	CHECK(fd >= 0 && peer.sin_family == AF_INET, "raccept: a connected rsocket and the peer's address");
	{
		struct sockaddr_in me;
		socklen_t mlen = sizeof me;
		char p[32], m[32];

		rgetsockname(fd, (struct sockaddr *)&me, &mlen);
		inet_ntop(AF_INET, &peer.sin_addr, p, sizeof p);
		inet_ntop(AF_INET, &me.sin_addr, m, sizeof m);
		printf("accepted %s:%d on %s:%d\n", p, ntohs(peer.sin_port), m, ntohs(me.sin_port));
		CHECK(peer.sin_addr.s_addr != me.sin_addr.s_addr || peer.sin_port != me.sin_port,
		      "the accepted rsocket's peer is the client, not itself");
	}
	CHECK(recv_all(fd, buf, BIG) == BIG, "rrecv: %d bytes", BIG);
	for (ok = 1, i = 0; i < BIG; i++)
		ok &= buf[i] == pattern(i);
	CHECK(ok, "the client's %d bytes arrived intact", BIG);
	CHECK(send_all(fd, buf, BIG) == BIG, "rsend: the %d bytes back", BIG);

	{
		char a[10], b[20], all[30];
		struct iovec iov[2] = { { a, sizeof a }, { b, sizeof b } };
		ssize_t n = rreadv(fd, iov, 2);

		if (n > 0) {
			memcpy(all, a, n < 10 ? n : 10);
			if (n > 10)
				memcpy(all + 10, b, n - 10);
		}
		if (n > 0 && n < 30)
			n += recv_all(fd, all + n, 30 - n);
		CHECK(n == 30 && !memcmp(all, "0123456789abcdefghijklmnopqrst", 30),
		      "rreadv: the client's rwritev, 10 + 20 bytes");
	}
	{
		char m[16] = { 0 };
		struct iovec iov = { m, 11 };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n = rrecvmsg(fd, &mh, 0);
		if (n > 0 && n < 11)
			n += recv_all(fd, m + n, 11 - n);
		CHECK(n == 11 && !strcmp(m, "hello world"), "rrecvmsg: the client's rsendmsg (%zd bytes)", n);
	}
	CHECK(rrecv(fd, small, sizeof small, 0) == 0, "rrecv after the client's rshutdown(SHUT_WR): 0, end of file");
	CHECK(rsend(fd, "bye", 3, 0) == 3, "rsend after the peer's SHUT_WR: our side still writes");
	CHECK(rclose(fd) == 0, "rclose");
	errno = 0;
	CHECK(rclose(fd) == -1 && errno == EBADF, "rclose of a closed rsocket: EBADF");
}

static void server_nonblocking(int lfd)
{
	int pfd[2], fd;
	char small[64];
	struct pollfd p[2];
	ssize_t n;

	CHECK(rfcntl(lfd, F_SETFL, rfcntl(lfd, F_GETFL) | O_NONBLOCK) == 0 && (rfcntl(lfd, F_GETFL) & O_NONBLOCK),
	      "rfcntl F_SETFL O_NONBLOCK, read back with F_GETFL");
	if (pipe(pfd))
		return;
	(void)!write(pfd[1], "x", 1);
	p[0] = (struct pollfd){ .fd = pfd[0], .events = POLLIN };
	p[1] = (struct pollfd){ .fd = lfd, .events = POLLIN };
	n = rpoll(p, 2, 1000);
	CHECK(n >= 1 && (p[0].revents & POLLIN), "rpoll of a pipe and an rsocket together: the pipe is readable");
	p[0].events = 0;
	do {
		n = rpoll(&p[1], 1, 10000);
	} while (n == 0);
	CHECK(n == 1 && (p[1].revents & POLLIN), "rpoll: a connection waits on the listening rsocket");
	fd = raccept(lfd, NULL, NULL);
	CHECK(fd >= 0, "raccept on the non-blocking listener");
	errno = 0;
	CHECK(rrecv(fd, small, sizeof small, 0) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
	      "rrecv on an empty non-blocking rsocket: EAGAIN");
	while (rsend(fd, "go", 2, 0) != 2 && errno == EAGAIN)
		wait_for(fd, POLLOUT);
	CHECK(wait_for(fd, POLLIN) & POLLIN, "rpoll: the client's answer is readable");
	n = rrecv(fd, small, sizeof small, 0);
	CHECK(n == 5 && !memcmp(small, "later", 5), "rrecv: the client's 5 bytes");
	CHECK(wait_for(fd, POLLIN) & POLLIN, "rpoll after the client closed: readable (end of file)");
	CHECK(rrecv(fd, small, sizeof small, 0) == 0, "rrecv: 0 after the client's rclose");
	rclose(fd);
	close(pfd[0]);
	close(pfd[1]);
}

static void server(const char *ip, const char *port)
{
	struct sockaddr_in a = addr_of(ip, atoi(port)), got;
	socklen_t len = sizeof got;
	int lfd, other, one = 1;

	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd >= 0, "rsocket(AF_INET, SOCK_STREAM)");
	CHECK(rsetsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0, "rsetsockopt SO_REUSEADDR");
	CHECK(rbind(lfd, (struct sockaddr *)&a, sizeof a) == 0, "rbind %s:%s", ip, port);
	CHECK(rlisten(lfd, 4) == 0, "rlisten");
	CHECK(rgetsockname(lfd, (struct sockaddr *)&got, &len) == 0 && got.sin_port == a.sin_port,
	      "rgetsockname: the bound port");

	other = rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	a.sin_port = htons(atoi(port) + 1);
	rbind(other, (struct sockaddr *)&a, sizeof a);
	rlisten(other, 1);
	errno = 0;
	CHECK(raccept(other, NULL, NULL) == -1 && errno == EAGAIN, "raccept with nobody connecting, non-blocking: EAGAIN");
	rclose(other);

	server_blocking(lfd);
	server_nonblocking(lfd);
	rclose(lfd);
	printf("server done, %d failures\n", failures);
}

static void misuse(const char *ip, int port)
{
	struct sockaddr_in a = addr_of(ip, port + 2);
	char c;
	int s, v, r;
	socklen_t len = sizeof v;

	errno = 0;
	CHECK(rsend(12345, "x", 1, 0) == -1 && errno == EBADF, "rsend on a number that is no rsocket: EBADF");
	errno = 0;
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == ENOTSUP, "rsocket(AF_UNIX): ENOTSUP");
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	CHECK(rsend(s, "x", 1, 0) == -1 && errno == ENOTCONN, "rsend before rconnect: ENOTCONN");
	errno = 0;
	CHECK(rrecv(s, &c, 1, 0) == -1 && errno == ENOTCONN, "rrecv before rconnect: ENOTCONN");
	errno = 0;
	CHECK(rsetsockopt(s, 999, 1, &v, sizeof v) == -1 && errno == ENOTSUP, "rsetsockopt of an unknown level: ENOTSUP");
	CHECK(rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &len) == 0 && v > 0, "rgetsockopt SO_RCVBUF: %d", v);
	errno = 0;
	r = rconnect(s, (struct sockaddr *)&a, sizeof a);
	CHECK(r == -1 && errno == ECONNREFUSED, "rconnect to a port nobody listens on: ECONNREFUSED (%s)",
	      strerror(errno));
	rclose(s);
	errno = 0;
	CHECK(rrecv(s, &c, 1, 0) == -1 && errno == EBADF, "rrecv on a closed rsocket: EBADF");
}

/* The next CM event on `ch`, acknowledged: its type, or -1. */
static int next_event(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *e;
	int type;

	if (rdma_get_cm_event(ch, &e))
		return -1;
	type = e->event;
	rdma_ack_cm_event(e);
	return type;
}

/* A plain RDMA CM connect to the rsocket listener with `len` bytes of
 * private data that are no rsocket connection data: refused. */
static void hostile_connect(const char *ip, int port, const void *data, int len, const char *what)
{
	struct sockaddr_in a = addr_of(ip, port);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_qp_init_attr qa = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_conn_param p = {
		.private_data = data, .private_data_len = len, .retry_count = 7, .rnr_retry_count = 7,
	};
	struct rdma_cm_id *id = NULL;
	int ev = -1;

	if (ch && !rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) &&
	    !rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) &&
	    next_event(ch) == RDMA_CM_EVENT_ADDR_RESOLVED && !rdma_resolve_route(id, 2000) &&
	    next_event(ch) == RDMA_CM_EVENT_ROUTE_RESOLVED && !rdma_create_qp(id, NULL, &qa) &&
	    !rdma_connect(id, &p))
		ev = next_event(ch);
	CHECK(ev == RDMA_CM_EVENT_REJECTED, "a CM connect with %s: rejected by the listener (event %d)", what, ev);
	if (id) {
		if (id->qp)
			rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	if (ch)
		rdma_destroy_event_channel(ch);
}

static void hostile(const char *ip, int port)
{
	uint8_t bad[40];

	memset(bad, 0xA5, 10);
	hostile_connect(ip, port, bad, 10, "10 bytes of garbage");
	memset(bad, 0, sizeof bad);
	bad[0] = 2; /* version 2 */
	bad[3] = 16;
	hostile_connect(ip, port, bad, sizeof bad, "connection data of version 2");
}

static void client_blocking(const char *ip, int port)
{
	struct sockaddr_in a = addr_of(ip, port), peer;
	socklen_t len = sizeof peer;
	static uint8_t buf[BIG];
	char small[64];
	int s, i, ok, v = 64;

	s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof v) == 0, "rsetsockopt RDMA_SQSIZE 64");
	v = 1;
	CHECK(rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) == 0, "rsetsockopt TCP_NODELAY");
	CHECK(rconnect(s, (struct sockaddr *)&a, sizeof a) == 0, "rconnect %s:%d", ip, port);
	len = sizeof v;
	CHECK(rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, &len) == 0 && v == 64, "rgetsockopt RDMA_SQSIZE: %d", v);
	errno = 0;
	CHECK(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof v) == -1 && errno == EINVAL,
	      "rsetsockopt RDMA_SQSIZE once connected: EINVAL");
	len = sizeof peer;
	CHECK(rgetpeername(s, (struct sockaddr *)&peer, &len) == 0 && peer.sin_port == a.sin_port,
	      "rgetpeername: the server's port");
	errno = 0;
	CHECK(rsend(s, NULL, 10, 0) == -1 && errno == EFAULT, "rsend of a NULL buffer: EFAULT");
	errno = 0;
	CHECK(rrecv(s, NULL, 10, 0) == -1 && errno == EFAULT, "rrecv into a NULL buffer: EFAULT");

	for (i = 0; i < BIG; i++)
		buf[i] = pattern(i);
	CHECK(send_all(s, buf, BIG) == BIG, "rsend: %d bytes", BIG);
	memset(buf, 0, BIG);
	CHECK(recv_all(s, buf, BIG) == BIG, "rrecv: the %d bytes echoed", BIG);
	for (ok = 1, i = 0; i < BIG; i++)
		ok &= buf[i] == pattern(i);
	CHECK(ok, "the echo is intact");

	{
		struct iovec iov[2] = { { "0123456789", 10 }, { "abcdefghijklmnopqrst", 20 } };
		CHECK(rwritev(s, iov, 2) == 30, "rwritev: 10 + 20 bytes");
	}
	{
		struct iovec iov[2] = { { "hello ", 6 }, { "world", 5 } };
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
		CHECK(rsendmsg(s, &mh, 0) == 11, "rsendmsg: 6 + 5 bytes");
	}
	CHECK(rshutdown(s, SHUT_WR) == 0, "rshutdown(SHUT_WR)");
	errno = 0;
	CHECK(rsend(s, "x", 1, 0) == -1 && errno == ECONNRESET, "rsend after SHUT_WR: ECONNRESET");
	CHECK(recv_all(s, small, 3) == 3 && !memcmp(small, "bye", 3), "rrecv: the server's goodbye");
	CHECK(rrecv(s, small, sizeof small, 0) == 0, "rrecv: end of file after the server's rclose");
	CHECK(rclose(s) == 0, "rclose");
	errno = 0;
	CHECK(rsend(s, "x", 1, 0) == -1 && errno == EBADF, "rsend on a closed rsocket: EBADF");
}

static void client_nonblocking(const char *ip, int port)
{
	struct sockaddr_in a = addr_of(ip, port);
	char small[64];
	int s, r, err = -1;
	socklen_t len = sizeof err;
	fd_set rd;
	struct timeval tv = { 10, 0 };

	s = rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	errno = 0;
	r = rconnect(s, (struct sockaddr *)&a, sizeof a);
	CHECK(r == 0 || errno == EINPROGRESS, "non-blocking rconnect: EINPROGRESS (%d)", r);
	CHECK(wait_for(s, POLLOUT) & POLLOUT, "rpoll: POLLOUT once connected");
	CHECK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0, "SO_ERROR: 0");
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	r = rselect(s + 1, &rd, NULL, NULL, &tv);
	CHECK(r == 1 && FD_ISSET(s, &rd), "rselect: the server's message is readable");
	CHECK(rrecv(s, small, sizeof small, 0) == 2 && !memcmp(small, "go", 2), "rrecv: \"go\"");
	CHECK(rsend(s, "later", 5, 0) == 5, "rsend: 5 bytes, non-blocking");
	CHECK(rclose(s) == 0, "rclose with data just sent");
}

static void client(const char *ip, const char *port)
{
	misuse(ip, atoi(port));
	hostile(ip, atoi(port));
	client_blocking(ip, atoi(port));
	client_nonblocking(ip, atoi(port));
	printf("client done, %d failures\n", failures);
}

/* Accept one connection, read to its end, check the bytes are the
 * pattern (i * 7 + 3) mod 256 a TCP client sent: the far end of a TCP
 * program run under librspreload. */
static void sink(const char *ip, const char *port)
{
	struct sockaddr_in a = addr_of(ip, atoi(port));
	static uint8_t buf[65536];
	long got = 0, bad = -1;
	ssize_t n;
	int lfd, fd, one = 1;

	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	rsetsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	CHECK(rbind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && rlisten(lfd, 1) == 0, "sink: listening");
	fd = raccept(lfd, NULL, NULL);
	CHECK(fd >= 0, "sink: raccept");
	while ((n = rrecv(fd, buf, sizeof buf, 0)) > 0) {
		for (ssize_t i = 0; i < n; i++)
			if (bad < 0 && buf[i] != (uint8_t)((got + i) * 7 + 3))
				bad = got + i;
		got += n;
	}
	CHECK(n == 0, "sink: end of file");
	CHECK(bad < 0, "sink: %ld bytes, all as sent (first wrong byte: %ld)", got, bad);
	printf("sink got %ld\n", got);
	rclose(fd);
	rclose(lfd);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4) {
		fprintf(stderr, "usage: %s server|client|sink ADDR PORT\n", argv[0]);
		return 2;
	}
	if (strcmp(argv[1], "sink") == 0)
		sink(argv[2], argv[3]);
	else if (strcmp(argv[1], "server") == 0)
		server(argv[2], argv[3]);
	else
		client(argv[2], argv[3]);
	return failures ? 1 : 0;
}
