/*
 * What the drop-in's C test programs (and bench/wr_rate.c) share: the
 * setup of devices, protection domains, CQs and QPs, and the moves of a QP
 * through INIT, RTR and RTS. Compiled with each program (common.c); the
 * programs that count checks include check.h as well.
 */
#ifndef ROCE_TESTS_COMMON_H
#define ROCE_TESTS_COMMON_H
#include <infiniband/verbs.h>
#include <stdint.h>

/* Say what could not be set up ("<program>: what: strerror(errno)" on
 * stderr, "FAIL setup: what" on stdout) and exit 2. */
void die(const char *what);

/* CLOCK_MONOTONIC in seconds. */
double now_s(void);

/* Device `i` of ibv_get_device_list, opened (die without it). */
struct ibv_context *open_device_at(int i);

/* One end of a test: a device with a PD, a CQ, and what the program adds. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid; /* the port's GID 1 (IPv4-mapped) */
	struct ibv_mr *mr;
	uint8_t *buf;
};

/* `s` zeroed, then `dev` opened with a PD, a CQ of `cqe` entries (on a
 * new completion channel, stored in *ch, when ch is not NULL) and the GID;
 * die on any failure. */
void open_side(struct ibv_device *dev, struct side *s, int cqe,
	       struct ibv_comp_channel **ch);

/* ibv_qp_init_attr for a QP of `type` with `cq` as send and receive CQ,
 * the given depths, one SGE each way and no inline data. */
struct ibv_qp_init_attr qp_init_attr(struct ibv_cq *cq, enum ibv_qp_type type,
				     uint32_t send_wr, uint32_t recv_wr);

/* An RC QP on `pd` with `cq` for both queues, `depth` work requests each
 * way, moved to INIT with `access` (die on a failure). */
struct ibv_qp *rc_qp_init(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t depth,
			  unsigned int access);

/* One completion of `cq` into *wc within `secs` seconds: 0, or -1 (none,
 * or ibv_poll_cq failed). */
int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double secs);

/* The path and timers of an RC QP's RTR and RTS. */
struct rc_path {
	uint32_t dest_qpn;
	union ibv_gid dgid;
	uint32_t flow_label;
	uint8_t hop_limit;
	uint32_t rq_psn, sq_psn;
	uint8_t max_dest_rd_atomic, max_rd_atomic;
	uint8_t min_rnr_timer, timeout, retry_cnt, rnr_retry;
};

/* The usual path to QP `dest_qpn` at `dgid`: PSNs 0, hop limit 64, one
 * RDMA READ or atomic in flight each way, min_rnr_timer 12, timeout 14,
 * seven retries. */
struct rc_path rc_path(uint32_t dest_qpn, union ibv_gid dgid);

/* RESET -> INIT on port 1 with `access` (qp_access_flags). */
int rc_init(struct ibv_qp *qp, unsigned int access);

/* INIT -> RTR -> RTS along `p` (MTU 1024, GID index 1). */
int rc_rtr_rts(struct ibv_qp *qp, const struct rc_path *p);

/* RESET -> INIT -> RTR -> RTS: rc_init then rc_rtr_rts. */
int rc_connect(struct ibv_qp *qp, unsigned int access, const struct rc_path *p);

/* A UD QP RESET -> INIT (port 1, `qkey`) -> RTR -> RTS (`sq_psn`). */
int ud_init(struct ibv_qp *qp, uint32_t qkey);
int ud_ready(struct ibv_qp *qp, uint32_t qkey, uint32_t sq_psn);

/* The QP's state from ibv_query_qp, -1 if that fails. */
int qp_state(struct ibv_qp *qp);

#endif
