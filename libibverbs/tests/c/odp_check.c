/*
 * On-demand paging through the drop-in: IBV_ACCESS_ON_DEMAND regions
 * (explicit, and implicit: NULL and SIZE_MAX), ibv_advise_mr, odp_caps,
 * and a peer's access to a page that is not mapped. Run by
 * tests/semantics.rs with two devices: A (device 0) is the requester, B
 * (device 1) the responder whose memory is on demand.
 *
 * Exit status 0 with "0 failures" when every check passed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "common.h"

#define ODP_FLUSH (1u << 6)
#define ODP_ATOMIC_WRITE (1u << 7)

static long page;

static struct side a, b;
static struct ibv_qp *qa, *qb;

static void connect_pair(void)
{
	struct ibv_qp_init_attr ia = qp_init_attr(a.cq, IBV_QPT_RC, 16, 16);
	unsigned int acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			   IBV_ACCESS_REMOTE_ATOMIC;

	qa = ibv_create_qp(a.pd, &ia);
	ia = qp_init_attr(b.cq, IBV_QPT_RC, 16, 16);
	qb = ibv_create_qp(b.pd, &ia);
	if (!qa || !qb)
		die("QPs");
	struct rc_path pa = rc_path(qb->qp_num, b.gid), pb = rc_path(qa->qp_num, a.gid);
	pa.retry_cnt = 1;
	pa.timeout = 10;
	if (rc_connect(qa, acc, &pa) || rc_connect(qb, acc, &pb))
		die("connect");
}

/* An RDMA op of `len` bytes between A's buffer `local` (lkey) and B's
 * `remote` (rkey); the completion's status. */
static int rdma(enum ibv_wr_opcode op, void *local, uint32_t lkey, uint64_t remote,
		uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qa, &wr, &bad))
		return -1;
	if (poll_one(a.cq, &wc, 20))
		return -2;
	return wc.status;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	page = sysconf(_SC_PAGESIZE);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 2)
		die("two devices");
	open_side(list[0], &a, 64, NULL);
	open_side(list[1], &b, 64, NULL);

	/* odp_caps */
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(b.ctx, NULL, &dx) == 0 &&
		      (dx.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
		      (dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT),
	      "odp_caps.general_caps: ODP_SUPPORT and IMPLICIT (%#llx)",
	      (unsigned long long)dx.odp_caps.general_caps);
	uint32_t rc_want = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			   IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
			   IBV_ODP_SUPPORT_SRQ_RECV | ODP_FLUSH | ODP_ATOMIC_WRITE;
	CHECK(dx.odp_caps.per_transport_caps.rc_odp_caps == rc_want &&
		      dx.odp_caps.per_transport_caps.ud_odp_caps ==
			      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV) &&
		      dx.odp_caps.per_transport_caps.uc_odp_caps == 0,
	      "rc_odp_caps %#x, ud_odp_caps %#x, uc 0 (rxe 6.15's)",
	      dx.odp_caps.per_transport_caps.rc_odp_caps,
	      dx.odp_caps.per_transport_caps.ud_odp_caps);

	connect_pair();
	uint8_t *src = calloc(1, 4 * page);
	struct ibv_mr *smr = ibv_reg_mr(a.pd, src, 4 * page, IBV_ACCESS_LOCAL_WRITE);
	if (!src || !smr)
		die("A's region");

	/* three pages, the middle one unmapped */
	unsigned int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	uint8_t *m = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	munmap(m + page, page);
	errno = 0;
	struct ibv_mr *pinned = ibv_reg_mr(b.pd, m, 3 * page, acc);
	CHECK(!pinned && errno == EFAULT,
	      "without ON_DEMAND a range with an unmapped page is EFAULT (nothing to pin)");
	struct ibv_mr *odp = ibv_reg_mr(b.pd, m, 3 * page, acc | IBV_ACCESS_ON_DEMAND);
	CHECK(odp != NULL, "with IBV_ACCESS_ON_DEMAND it registers (errno %d)", odp ? 0 : errno);
	if (!odp)
		die("ODP region");

	memset(src, 0x5a, 64);
	CHECK(rdma(IBV_WR_RDMA_WRITE, src, smr->lkey, (uintptr_t)m + 100, odp->rkey, 64) ==
			      IBV_WC_SUCCESS &&
		      m[100] == 0x5a && m[163] == 0x5a && m[164] == 0,
	      "a peer's WRITE into a mapped page of the ODP region lands");

	/* ibv_advise_mr */
	struct ibv_sge s0 = { .addr = (uintptr_t)m, .length = page, .lkey = odp->lkey };
	struct ibv_sge s1 = { .addr = (uintptr_t)m + page, .length = page, .lkey = odp->lkey };
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &s0, 1) == 0,
	      "ibv_advise_mr(PREFETCH_WRITE, FLUSH) of a mapped page: 0");
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &s1,
			    1) == EFAULT,
	      "ibv_advise_mr(PREFETCH, FLUSH) of the unmapped page: EFAULT");
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s1, 1) == 0,
	      "without FLUSH the advice is a hint: 0");
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH,
			    &s1, 1) == 0,
	      "PREFETCH_NO_FAULT of the unmapped page: 0");
	uint8_t *plain = calloc(1, page);
	struct ibv_mr *pmr = ibv_reg_mr(b.pd, plain, page, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sp = { .addr = (uintptr_t)plain, .length = 64, .lkey = pmr->lkey };
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sp, 1) == EINVAL,
	      "advise of a region that is not on demand: EINVAL");
	struct ibv_sge sbad = { .addr = (uintptr_t)m, .length = 8, .lkey = 0xdead00 };
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sbad, 1) == ENOENT,
	      "advise with an unknown lkey: ENOENT");
	struct ibv_sge sout = { .addr = (uintptr_t)m + 2 * page, .length = page + 1, .lkey = odp->lkey };
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sout, 1) == EINVAL,
	      "advise past the region's end: EINVAL");
	CHECK(ibv_advise_mr(b.pd, 7, 0, &s0, 1) == EOPNOTSUPP, "an unknown advice: EOPNOTSUPP");
	CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s0, 0) == EINVAL,
	      "no SGE: EINVAL");

	/* the page mapped again: the region follows the new mapping */
	uint8_t *again = mmap(m + page, page, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	CHECK(again == m + page, "the middle page mapped again");
	memset(src, 0x6b, 64);
	CHECK(rdma(IBV_WR_RDMA_WRITE, src, smr->lkey, (uintptr_t)m + page + 8, odp->rkey, 64) ==
			      IBV_WC_SUCCESS &&
		      m[page + 8] == 0x6b && m[page + 71] == 0x6b,
	      "a WRITE into the page mapped after registration lands (ODP follows the mapping)");

	/* implicit: the whole address space */
	struct ibv_mr *imp = ibv_reg_mr(b.pd, NULL, SIZE_MAX, acc | IBV_ACCESS_ON_DEMAND);
	CHECK(imp && imp->addr == NULL && imp->length == SIZE_MAX,
	      "implicit ODP: ibv_reg_mr(NULL, SIZE_MAX, ON_DEMAND): addr NULL, length SIZE_MAX");
	errno = 0;
	CHECK(ibv_reg_mr(b.pd, NULL, SIZE_MAX, acc) == NULL && errno == EINVAL,
	      "NULL and SIZE_MAX without ON_DEMAND: EINVAL");
	if (imp) {
		uint8_t *later = malloc(4096); /* made after the registration */
		memset(later, 0, 4096);
		memset(src, 0x7c, 128);
		CHECK(rdma(IBV_WR_RDMA_WRITE, src, smr->lkey, (uintptr_t)later + 10, imp->rkey,
			   128) == IBV_WC_SUCCESS &&
			      later[10] == 0x7c && later[137] == 0x7c && later[138] == 0,
		      "a WRITE through the implicit rkey into memory allocated after it lands");
		memset(later + 1000, 0x3e, 32);
		memset(src + 2048, 0, 32);
		CHECK(rdma(IBV_WR_RDMA_READ, src + 2048, smr->lkey, (uintptr_t)later + 1000,
			   imp->rkey, 32) == IBV_WC_SUCCESS &&
			      src[2048] == 0x3e && src[2079] == 0x3e,
		      "a READ through the implicit rkey");
		uint64_t *word = aligned_alloc(8, 8);
		*word = 41;
		CHECK(rdma(IBV_WR_RDMA_WRITE, src, smr->lkey, 0x10, imp->rkey, 8) ==
			      IBV_WC_REM_ACCESS_ERR,
		      "a WRITE through the implicit rkey to address 0x10 (not mapped): REM_ACCESS_ERR, no crash");
		free(word);
		free(later);
		CHECK(ibv_dereg_mr(imp) == 0, "implicit region deregistered");
	}
	CHECK(qp_state(qa) == IBV_QPS_ERR, "the requester's QP is in ERR after the access error");
	/* a page of the explicit region unmapped again: its access fails */
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	connect_pair();
	munmap(m + page, page);
	CHECK(rdma(IBV_WR_RDMA_READ, src, smr->lkey, (uintptr_t)m + page + 8, odp->rkey, 64) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "a READ of the explicit region's page unmapped again: REM_ACCESS_ERR, no crash");
	CHECK(ibv_dereg_mr(odp) == 0 && ibv_dereg_mr(pmr) == 0, "regions deregistered");
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_dereg_mr(smr);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
