/*
 * misuse: calls a C program may make with arguments that break the QP's
 * limits. rdma-core with rxe answers EINVAL before it reads past what the
 * QP allows; so must the drop-in, and it must never read the program's
 * memory past the limits (a huge length or count must not be followed).
 * The first cases of the misuse family of issue 26:
 *
 *   inline: IBV_SEND_INLINE with 1 GiB of "inline data" (16 real bytes)
 *   num_sge: ibv_post_send / ibv_post_recv / ibv_post_srq_recv with
 *            num_sge = 2^20 (one real SGE)
 *   wr: ibv_wr_set_inline_data(1 GiB), ibv_wr_set_inline_data_list with
 *       2^20 buffers, ibv_wr_set_sge_list with 2^20 SGEs
 *   readonly: a read-only page registered (or re-registered) with write
 *       or atomic access: EFAULT, as the kernel's pinning answers
 *
 * On a UD QP in RTS (no peer needed), so the checks of a live QP run.
 * Prints one line per case and "N failures"; exits 1 on a failure (a read
 * past the limits crashes instead).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "common.h"

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_context *ctx = open_device_at(0);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd/cq");
	static char buf[16];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");

	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_UD,
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	if (!qp)
		die("ibv_create_qp_ex");
	if (ud_ready(qp, 0x11111111, 1))
		die("INIT/RTR/RTS");

	struct ibv_sge one = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_sge huge = { .addr = (uintptr_t)buf, .length = 1u << 30, .lkey = mr->lkey };
	struct ibv_send_wr *bad = NULL;
	struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &huge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE };
	errno = 0;
	int rc = ibv_post_send(qp, &sw, &bad);
	CHECK(rc == EINVAL && errno == EINVAL && bad == &sw,
	      "inline: ibv_post_send with 1 GiB of inline data: rc %d errno %d", rc, errno);

	sw.sg_list = &one;
	sw.num_sge = 1 << 20;
	sw.send_flags = 0;
	bad = NULL;
	rc = ibv_post_send(qp, &sw, &bad);
	CHECK(rc == EINVAL && bad == &sw, "num_sge: ibv_post_send with num_sge 2^20: rc %d", rc);

	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &one, .num_sge = 1 << 20 }, *rbad = NULL;
	rc = ibv_post_recv(qp, &rw, &rbad);
	CHECK(rc == EINVAL && rbad == &rw, "num_sge: ibv_post_recv with num_sge 2^20: rc %d", rc);

	struct ibv_srq_init_attr si = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	if (!srq)
		die("ibv_create_srq");
	rbad = NULL;
	rc = ibv_post_srq_recv(srq, &rw, &rbad);
	CHECK(rc == EINVAL && rbad == &rw, "num_sge: ibv_post_srq_recv with num_sge 2^20: rc %d", rc);

	/* within the limits, the same posts are taken */
	rw.num_sge = 1;
	rc = ibv_post_recv(qp, &rw, &rbad);
	CHECK(rc == 0, "one SGE: ibv_post_recv: rc %d", rc);
	rc = ibv_post_srq_recv(srq, &rw, &rbad);
	CHECK(rc == 0, "one SGE: ibv_post_srq_recv: rc %d", rc);

	/* the ibv_wr_* interface: the error shows at ibv_wr_complete */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	union ibv_gid g;
	if (ibv_query_gid(ctx, 1, 1, &g))
		die("ibv_query_gid");
	aa.grh.dgid = g;
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 64;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");

	ibv_wr_start(qx);
	qx->wr_id = 3;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, qp->qp_num, 0x11111111);
	ibv_wr_set_inline_data(qx, buf, (size_t)1 << 30);
	rc = ibv_wr_complete(qx);
	CHECK(rc == EINVAL, "wr: ibv_wr_set_inline_data of 1 GiB: ibv_wr_complete rc %d", rc);

	struct ibv_data_buf db = { .addr = buf, .length = sizeof buf };
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, qp->qp_num, 0x11111111);
	ibv_wr_set_inline_data_list(qx, (size_t)1 << 20, &db);
	rc = ibv_wr_complete(qx);
	CHECK(rc == EINVAL, "wr: ibv_wr_set_inline_data_list of 2^20 buffers: ibv_wr_complete rc %d", rc);

	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, qp->qp_num, 0x11111111);
	ibv_wr_set_sge_list(qx, (size_t)1 << 20, &one);
	rc = ibv_wr_complete(qx);
	CHECK(rc == EINVAL, "wr: ibv_wr_set_sge_list of 2^20 SGEs: ibv_wr_complete rc %d", rc);

	/* and a good one still goes */
	ibv_wr_start(qx);
	qx->wr_id = 4;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, qp->qp_num, 0x11111111);
	ibv_wr_set_inline_data(qx, buf, sizeof buf);
	rc = ibv_wr_complete(qx);
	CHECK(rc == 0, "wr: 16 inline bytes: ibv_wr_complete rc %d", rc);

	/* finding 1: a read-only page registered for writes: the kernel pins
	 * for writing and refuses it (EFAULT); a read-only registration of it
	 * is fine. Else a peer's legitimate WRITE faults the engine. */
	long page = sysconf(_SC_PAGESIZE);
	void *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ro == MAP_FAILED)
		die("mmap");
	errno = 0;
	struct ibv_mr *bad_mr = ibv_reg_mr(pd, ro, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(!bad_mr && errno == EFAULT, "readonly: ibv_reg_mr of a read-only page for writing: %p errno %d",
	      (void *)bad_mr, errno);
	errno = 0;
	bad_mr = ibv_reg_mr(pd, ro, page, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE);
	CHECK(!bad_mr && errno == EFAULT, "readonly: ibv_reg_mr of a read-only page for atomics: errno %d", errno);
	struct ibv_mr *ro_mr = ibv_reg_mr(pd, ro, page, IBV_ACCESS_REMOTE_READ);
	CHECK(ro_mr != NULL, "readonly: ibv_reg_mr of a read-only page for remote reads: %p", (void *)ro_mr);
	if (ro_mr) {
		errno = 0;
		rc = ibv_rereg_mr(ro_mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK(rc != 0 && errno == EFAULT, "readonly: ibv_rereg_mr to write access: rc %d errno %d", rc, errno);
		ibv_dereg_mr(ro_mr);
	}
	munmap(ro, page);

	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
