#!/usr/bin/env python3
"""Write the seed inputs of the `dropin` fuzz target (fuzz/corpus/dropin/).

The byte layout follows the harness in libibverbs/src/fuzz.rs: the QP type,
each side's CQ size, region rights and QP capacities, whether to connect,
then calls (a selector byte: bit 0 = side, (b >> 1) % 16 = call)."""
import os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seedlib import u8, u16, u32, write_seeds  # noqa: E402

RC, UC, UD = 0, 3, 5

def side(access=0x0f):
    # cqe 16*4, access, cap (send_wr, recv_wr, send_sge, recv_sge, inline), sane, sig_all, send_cq
    return u8(16) + u16(access) + u32(16) + u32(16) + u32(2) + u32(2) + u32(64) + u8(0) + u8(1) + u8(0)

def sge(off, length, sel=0):
    return u8(sel) + u16(off) + u16(length)

def post_send(side_, opcode, length=64, off=0, roff=0, flags=2, ud=False):
    b = u8((2 << 1) | side_) + u8(0) + u8(opcode) + u8(flags) + u8(1) + sge(off, length)
    b += u32(0x12345678)           # imm
    b += u8(0) + u16(roff)         # remote: the peer's region, its rkey
    if ud:
        b += u8(1) + u8(0)         # (an AH exists) pick it; remote qpn = peer's
        b += u8(0)                 # qkey
    elif opcode in (5, 6):
        b += struct.pack('<QQ', 5, 9)
    b += u32(0) + u8(0) + u16(0) + u16(0) + u16(0)   # bind_mw member (unused)
    return b

def post_recv(side_, length=256, off=0):
    return u8((6 << 1) | side_) + u8(1) + sge(off, length)

def poll(side_, n=16):
    return u8((8 << 1) | side_) + u8(n)

def wait(n=50):
    return u8(15 << 1) + u8(n)

def create_ah(side_):
    gid = bytes(16)
    # grh: dgid, flow_label, sgid_index 1, hop 64, tclass; pad; dlid, sl, bits, rate, is_global, port
    attr = gid + u32(0) + u8(1) + u8(64) + u8(0) + u8(0) + u16(0) + u8(0) + u8(0) + u8(0) + u8(1) + u8(1) + u8(0)
    return u8((11 << 1) | side_) + attr

def modify_garbage(side_):
    return u8((0 << 1) | side_) + bytes(range(7, 7 + 200)) + u32(0xffffffff)

seeds = {
    'rc-send-write-read-atomic': u8(RC) + side() + side() + u8(0)
        + post_recv(1) + post_send(0, 2) + post_send(0, 0, 128, 0, 512) + post_send(0, 4, 64, 256, 512)
        + post_send(0, 6, 8, 1024, 1024) + post_send(0, 5, 8, 1032, 1024) + wait() + poll(0) + poll(1),
    'rc-bad-rkey-and-range': u8(RC) + side() + side(0x01) + u8(0)
        + post_send(0, 0, 64, 0, 4090) + wait() + poll(0),
    'uc-send-write': u8(UC) + side() + side() + u8(0)
        + post_recv(1) + post_send(0, 2, 100) + post_send(0, 0, 300, 0, 100) + wait() + poll(0) + poll(1),
    'ud-send': u8(UD) + side() + side() + u8(0)
        + create_ah(0) + post_recv(1, 2048) + post_send(0, 2, 200, ud=True) + wait() + poll(0) + poll(1),
    'rc-modify-garbage': u8(RC) + side() + side() + u8(0) + modify_garbage(0) + post_send(0, 0) + poll(0),
    'unconnected-posts': u8(RC) + side() + side() + u8(255) + post_send(0, 2) + post_recv(0) + poll(0),
}
write_seeds(seeds, 'dropin')
