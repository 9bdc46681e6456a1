/*
 * forks: fork() while the parent runs traffic (issue 26, finding 5).
 *
 * The parent connects two RC QPs on one device and a thread of its own
 * ping-pongs SENDs between them without pause. The main thread forks
 * ROUNDS x FORKS children, one after the other. Each child:
 *   - uses what it inherited: ibv_post_send, ibv_post_recv, ibv_poll_cq,
 *     ibv_req_notify_cq, ibv_query_qp, ibv_dealloc_pd on the parent's
 *     objects must fail cleanly (an error, no hang, nothing sent);
 *   - every NEWDEV-th child also opens the device anew and sends itself a
 *     UD datagram through a QP of its own, checking the bytes.
 * A child that does not end within 20 s is a hang (killed, counted).
 * After each round the parent's QPs must still be in RTS and its traffic
 * must have gone on with no error completion.
 *
 * Prints one line per check and "N failures".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "common.h"

#define ROUNDS 5
#define FORKS 50
#define NEWDEV 10

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qa, *qb;
static struct ibv_mr *mr;
static char buf[2][4096];
static union ibv_gid gid;
static volatile int stop;
static volatile long done_msgs, bad_wcs;
/* why the traffic stopped, if it did */
static char why[128];

static struct ibv_qp *rc_qp(void)
{
	return rc_qp_init(pd, cq, 16, IBV_ACCESS_LOCAL_WRITE);
}

static void connect_to(struct ibv_qp *q, uint32_t dest)
{
	struct rc_path p = rc_path(dest, gid);

	p.rq_psn = 1;
	p.sq_psn = 1;
	p.min_rnr_timer = 1;
	if (rc_rtr_rts(q, &p))
		die("RTR/RTS");
}

static int post_recv(struct ibv_qp *q, char *b)
{
	struct ibv_sge s = { .addr = (uintptr_t)b, .length = 4096, .lkey = mr->lkey };
	struct ibv_recv_wr w = { .wr_id = 2, .sg_list = &s, .num_sge = 1 }, *bad;
	return ibv_post_recv(q, &w, &bad);
}

static int post_send(struct ibv_qp *q, char *b, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)b, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	return ibv_post_send(q, &w, &bad);
}

/* The parent's traffic: a SEND from qa to qb and back, forever. */
static void *traffic(void *arg)
{
	(void)arg;
	struct ibv_qp *from = qa, *to = qb;
	while (!stop) {
		if (post_recv(to, buf[1]) || post_send(from, buf[0], 256)) {
			snprintf(why, sizeof why, "post failed: %s", strerror(errno));
			bad_wcs++;
			return NULL;
		}
		int got = 0;
		double t0 = now_s();
		while (got < 2 && now_s() - t0 < 10) {
			struct ibv_wc wc;
			int n = ibv_poll_cq(cq, 1, &wc);
			if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) {
				snprintf(why, sizeof why, "poll %d, status %s", n,
					 n == 1 ? ibv_wc_status_str(wc.status) : "-");
				bad_wcs++;
				return NULL;
			}
			got += n;
		}
		if (got < 2) {
			snprintf(why, sizeof why, "no completion in 10 s (%d of 2)", got);
			bad_wcs++;
			return NULL;
		}
		done_msgs++;
		struct ibv_qp *t = from;
		from = to;
		to = t;
	}
	return NULL;
}

/* In a child: a device of its own, a UD QP sending itself 64 bytes. */
static int new_device_works(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 0;
	struct ibv_context *c = ibv_open_device(l[0]);
	if (!c)
		return 0;
	struct ibv_pd *p = ibv_alloc_pd(c);
	struct ibv_cq *q = ibv_create_cq(c, 8, NULL, NULL, 0);
	static char b[2][128];
	struct ibv_mr *m = p ? ibv_reg_mr(p, b, sizeof b, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!p || !q || !m)
		return 0;
	struct ibv_qp_init_attr ia = qp_init_attr(q, IBV_QPT_UD, 2, 2);
	struct ibv_qp *u = ibv_create_qp(p, &ia);
	if (!u)
		return 0;
	int ok = !ud_ready(u, 0x1234, 3);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(p, &aa);
	if (!ok || !ah)
		return 0;
	memset(b[0], 0x3c, 64);
	struct ibv_sge rs = { .addr = (uintptr_t)b[1], .length = 128, .lkey = m->lkey };
	struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *rbad;
	struct ibv_sge ss = { .addr = (uintptr_t)b[0], .length = 64, .lkey = m->lkey };
	struct ibv_send_wr sw = { .wr_id = 8, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = u->qp_num;
	sw.wr.ud.remote_qkey = 0x1234;
	if (ibv_post_recv(u, &rw, &rbad) || ibv_post_send(u, &sw, &sbad))
		return 0;
	int got = 0, good = 0;
	double t0 = now_s();
	while (got < 2 && now_s() - t0 < 10) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(q, 1, &wc);
		if (n == 1) {
			got++;
			good += wc.status == IBV_WC_SUCCESS;
		}
	}
	/* 40 bytes of GRH, then the datagram */
	int bytes = good == 2 && b[1][40] == 0x3c && b[1][103] == 0x3c;
	ibv_destroy_ah(ah);
	ibv_destroy_qp(u);
	ibv_dereg_mr(m);
	ibv_destroy_cq(q);
	ibv_dealloc_pd(p);
	ibv_close_device(c);
	ibv_free_device_list(l);
	return bytes;
}

/* A child's work; its exit code: 0, or bits for what failed. */
static int child(int k)
{
	alarm(20);
	int f = 0;
	errno = 0;
	if (post_send(qa, buf[0], 64) == 0)
		f |= 1;
	if (post_recv(qb, buf[1]) == 0)
		f |= 2;
	struct ibv_wc wc;
	if (ibv_poll_cq(cq, 1, &wc) >= 0)
		f |= 4;
	if (ibv_req_notify_cq(cq, 0) == 0)
		f |= 8;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qa, &a, IBV_QP_STATE, &ia) != EINVAL)
		f |= 16;
	if (ibv_dealloc_pd(pd) != EINVAL)
		f |= 32;
	if (k % NEWDEV == 0 && !new_device_works())
		f |= 64;
	return f;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	ctx = open_device_at(0);
	if (ibv_query_gid(ctx, 1, 1, &gid))
		die("ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!pd || !cq || !mr)
		die("pd/cq/mr");
	qa = rc_qp();
	qb = rc_qp();
	connect_to(qa, qb->qp_num);
	connect_to(qb, qa->qp_num);
	pthread_t th;
	if (pthread_create(&th, NULL, traffic, NULL))
		die("pthread_create");

	int hangs = 0, bad_children = 0;
	for (int r = 0; r < ROUNDS; r++) {
		long before = done_msgs;
		int round_bad = 0, round_hangs = 0, first_code = 0;
		for (int k = 0; k < FORKS; k++) {
			pid_t pid = fork();
			if (pid < 0)
				die("fork");
			if (pid == 0)
				_exit(child(k));
			int st = 0;
			double t0 = now_s();
			pid_t w = 0;
			while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_s() - t0 < 20)
				usleep(2000);
			if (w == 0) {
				kill(pid, SIGKILL);
				waitpid(pid, &st, 0);
				round_hangs++;
			} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				if (!round_bad)
					first_code = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
				round_bad++;
			}
		}
		/* the parent's traffic goes on */
		double t0 = now_s();
		while (done_msgs < before + 20 && !bad_wcs && now_s() - t0 < 10)
			usleep(1000);
		CHECK(round_hangs == 0, "round %d: %d forks, %d hangs", r + 1, FORKS, round_hangs);
		CHECK(round_bad == 0, "round %d: every child's inherited objects failed cleanly and its "
				      "own device worked (%d failed; first exit code %d)",
		      r + 1, round_bad, first_code);
		CHECK(qp_state(qa) == IBV_QPS_RTS && qp_state(qb) == IBV_QPS_RTS,
		      "round %d: the parent's QPs are still in RTS (%d, %d)", r + 1, qp_state(qa),
		      qp_state(qb));
		CHECK(bad_wcs == 0 && done_msgs >= before + 20,
		      "round %d: the parent's traffic went on: %ld messages, %ld errors %s", r + 1,
		      done_msgs - before, bad_wcs, why);
		hangs += round_hangs;
		bad_children += round_bad;
	}
	stop = 1;
	pthread_join(th, NULL);
	printf("forks: %d, hangs: %d, failed children: %d, parent messages: %ld\n", ROUNDS * FORKS,
	       hangs, bad_children, done_msgs);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
