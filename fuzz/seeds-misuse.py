#!/usr/bin/env python3
"""Write the seed inputs of the `misuse` fuzz target (fuzz/corpus/misuse/).

The byte layout follows the harness in libibverbs/src/fuzz/misuse.rs: a
sequence of calls, each an op byte (% 24) and its arguments. An object
argument is one byte: 0 (or any multiple of 8) is NULL, else object
(b // 8) % count of that kind made so far, live or destroyed."""
import os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seedlib import u8, u16, u32, write_seeds  # noqa: E402

KINDS = ['pd', 'mr', 'cq', 'chan', 'qp', 'srq', 'ah', 'mw', 'ctx']

def obj(n):          # the n-th object of its kind (0-based)
    return u8(8 * (n + 1) + 1)
NULL = u8(0)
def small(v):        # amount(): a small value
    return u8(5) + u8(v)
def huge():          # amount(): u32::MAX
    return u8(1)

def open_dev(d=0): return u8(0) + u8(d)
def alloc_pd(ctx=obj(0)): return u8(1) + ctx
def reg_mr(pd=obj(0), off=0, length=4096, access_any=False):
    return u8(2) + pd + u8(4) + u16(off) + u16(length) + (u8(1) + u32(0xffffffff) if access_any else u8(0))
def reg_mr_at(pd, sel):  # sel 0: NULL, 1: unmapped, 2: wraps
    return u8(2) + pd + u8(sel) + u8(0)
def create_cq(ctx=obj(0), chan=NULL, cqe=small(16)): return u8(3) + ctx + chan + cqe + u32(0)
def channel(ctx=obj(0)): return u8(4) + ctx
def create_qp(pd=obj(0), scq=obj(0), rcq=obj(0), qpt=0, caps=None):
    caps = caps or [small(8), small(8), small(1), small(1), small(16)]
    return u8(5) + pd + scq + rcq + u8(1) + u8(qpt) + b''.join(caps) + u8(0) + u8(0)
def create_srq(pd=obj(0), wr=small(8), sge=small(1), limit=small(0)): return u8(7) + pd + wr + sge + limit
def destroy(kind, o): return u8(10) + u8(KINDS.index(kind)) + o
def query_qp(qp=obj(0)): return u8(14) + qp + u32(0xffffffff)
def modify_qp(qp=obj(0)): return u8(13) + qp + bytes(range(200)) + u8(0) + u32(0x1ffffff)
def resize_cq(cq=obj(0), cqe=huge()): return u8(16) + cq + cqe
def connect(a=0, b=1): return u8(22) + u8(a) + u8(b)
def post_send(qp=0, opcode=0, nsge=1):
    return u8(19) + u8(qp) + u8(0) + u8(5) + u8(64) + u8(1) + u8(nsge) + u32(7) + u8(opcode) + u8(2) + u16(0) + u32(0)
def post_recv(qp=0, nsge=1): return u8(20) + u8(qp) + u8(0) + u8(5) + u8(64) + u8(1) + u8(nsge) + u32(9)
def poll(cq=0, n=16): return u8(21) + u8(cq) + u8(1) + u8(n) + u8(0)

setup = open_dev() + alloc_pd() + reg_mr() + create_cq()
seeds = {
    'double-destroy-every-kind': setup + channel() + create_qp() + create_srq()
        + destroy('qp', obj(0)) + destroy('qp', obj(0)) + destroy('srq', obj(0)) + destroy('srq', obj(0))
        + destroy('mr', obj(0)) + destroy('mr', obj(0)) + destroy('cq', obj(0)) + destroy('cq', obj(0))
        + destroy('chan', obj(0)) + destroy('chan', obj(0)) + destroy('pd', obj(0)) + destroy('pd', obj(0))
        + destroy('ctx', obj(0)) + destroy('ctx', obj(0)),
    'calls-on-destroyed-objects': setup + create_qp() + destroy('qp', obj(0)) + query_qp() + modify_qp()
        + destroy('cq', obj(0)) + resize_cq(obj(0), small(32)) + create_qp() + destroy('pd', obj(0))
        + destroy('mr', obj(0)) + destroy('pd', obj(0)) + reg_mr() + alloc_pd(),
    'destroy-with-dependents': setup + channel() + create_cq(obj(0), obj(0)) + create_qp()
        + destroy('pd', obj(0)) + destroy('cq', obj(0)) + destroy('chan', obj(0)) + destroy('ctx', obj(0))
        + destroy('qp', obj(0)) + destroy('cq', obj(0)) + destroy('cq', obj(1)) + destroy('chan', obj(0)),
    'huge-and-null-arguments': open_dev() + alloc_pd(NULL) + alloc_pd() + reg_mr_at(obj(0), 0)
        + reg_mr_at(obj(0), 1) + reg_mr_at(obj(0), 2) + reg_mr(NULL) + reg_mr(obj(0), 100, 65535, True)
        + create_cq(obj(0), NULL, huge()) + create_cq(NULL) + create_cq(obj(0), NULL, small(4))
        + create_qp(obj(0), obj(0), obj(0), 0, [huge(), huge(), huge(), huge(), huge()])
        + create_qp(NULL, NULL, NULL, 4) + create_srq(obj(0), huge(), huge(), huge()) + resize_cq(obj(0), huge()),
    'traffic-then-teardown': setup + create_qp() + create_qp() + connect(0, 1) + post_recv(1) + post_recv(0)
        + post_send(0, 0) + post_send(0, 4) + post_send(1, 0, 200) + poll() + poll() + destroy('ctx', obj(0))
        + destroy('qp', obj(0)) + destroy('mr', obj(0)),
}
write_seeds(seeds, 'misuse')
