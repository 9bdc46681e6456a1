#!/usr/bin/env python3
"""An rxe-side peer for `roce perf` that checks every byte on the rxe side.

perftest 4.5 (the rxe side of the other one-sided interop cases) has no
WRITE_WITH_IMM test and checks no data. This program runs in a lab guest on
the kernel's rxe through pyverbs, speaks the same out-of-band TCP exchange as
`roce perf` (perftest 4.5's, see cli/src/perftest_oob.rs) including the
"roce-emu" mark after the version string, so that `roce perf` treats it as one
of its own and checks every byte on its side too, and checks on its side:

  server (`roce perf OP ADDR` is the requester, rxe memory the target):
    write / imm   every written slot holds the writer's pattern; imm: one
                  RECV_RDMA_WITH_IMM completion per WRITE, immediates 0..n-1 in
                  order, byte_len = message size
    read          the memory the peer READ is unchanged
    faa / cas     every 8-byte slot holds its initial value + its operations
                  (cas: operations - 1, the first one only fetches), nothing
                  else changed
  client (rxe is the requester against `roce perf OP --server`):
    write / imm   the source slots are unchanged (the server checks the target)
    read          every READ slot holds the server's pattern
    faa / cas     every fetched value continues its slot's chain (+1)

Usage (one QP, the lab's GID index):
  pyverbs_peer.py --op imm -d rxe0 -x 1 -p 18600 -s 4096 -n 200            # server
  pyverbs_peer.py --op imm -d rxe0 -x 1 -p 18600 -s 4096 -n 200 HOST       # client
  pyverbs_peer.py --self-test                                               # no device
Both sides must be given the same -s and -n (perftest 4.5 negotiates
nothing). Last line: `result: role=.. peer=.. ops=N checks_ok=K
checks_failed=F error=yes|no`; exit status 0 only when every check passed.
"""
import argparse
import os
import socket
import struct
import sys
import time

M32 = 0xFFFFFFFF
VERSION = b"6.06"
MARK = b"roce-emu"
KEY_MSG = 108
CYCLE_BUFFER = 4096
CACHE_LINE = 64
TX_DEPTH = 128
OPS = ("write", "imm", "read", "faa", "cas")


# --------------------------------------------------------------- pure parts

def rotl32(x, r):
    return ((x << r) | (x >> (32 - r))) & M32


def pattern(psn, qpn, off):
    """The fill byte `roce perf` uses (workloads/src/pattern.rs `Pattern::of_qp`)."""
    seed = ((psn * 0x9E3779B1) & M32) ^ rotl32(qpn, 13)
    x = ((off & M32) * 0x85EBCA6B & M32) ^ seed
    x ^= x >> 15
    return (x ^ (x >> 7) ^ (x >> 23)) & 0xFF


def fill(psn, qpn, start, n):
    return bytes(pattern(psn, qpn, o) for o in range(start, start + n))


class Dest:
    """One QP's 108-byte message: LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID..:SRQN:"""

    def __init__(self, qpn, psn, rkey, vaddr, gid, lid=0, out_reads=16, srqn=0):
        self.qpn, self.psn, self.rkey, self.vaddr = qpn, psn, rkey, vaddr
        self.gid, self.lid, self.out_reads, self.srqn = bytes(gid), lid, out_reads, srqn

    def encode(self):
        s = "%04x:%04x:%06x:%06x:%08x:%016x:" % (
            self.lid, self.out_reads, self.qpn & 0xFFFFFF, self.psn & 0xFFFFFF, self.rkey, self.vaddr)
        s += "".join("%02x:" % b for b in self.gid) + "%08x:" % self.srqn
        b = s.encode()[:KEY_MSG - 1]
        return b + bytes(KEY_MSG - len(b))

    @staticmethod
    def decode(m):
        if len(m) != KEY_MSG:
            raise ValueError("QP message of %d bytes" % len(m))
        f = m.split(b"\0", 1)[0].decode("ascii").split(":")
        if len(f) < 23:
            raise ValueError("%d fields in %r" % (len(f), m))
        return Dest(int(f[2], 16), int(f[3], 16), int(f[4], 16), int(f[5], 16),
                    bytes(int(x, 16) for x in f[6:22]), lid=int(f[0], 16),
                    out_reads=int(f[1], 16), srqn=int(f[22], 16))


class Geo:
    """Buffer geometry, as `roce perf` computes it (`Geo::new`)."""

    def __init__(self, size, cycle, cache_line, tx_depth=TX_DEPTH):
        self.size = size
        self.stride = -(-size // cache_line) * cache_line
        self.slots = max(cycle // self.stride, 1) if size <= cycle // 2 else 1
        self.span = max(size, cycle)
        self.results = self.span
        self.buf_len = -(-(self.results + tx_depth * 8) // 64) * 64

    def off(self, i):
        return (i % self.slots) * self.stride


class Oob:
    """perftest's exchange: equal-sized messages, the client writes first."""

    def __init__(self, sock, client):
        self.s, self.client = sock, client

    def _read(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise ConnectionError("peer closed the exchange")
            b += c
        return b

    def xchg(self, mine):
        if self.client:
            self.s.sendall(mine)
            return self._read(len(mine))
        r = self._read(len(mine))
        self.s.sendall(mine)
        return r

    def prologue(self, mtu_enum):
        v = VERSION + b"\0" + MARK
        rv = self.xchg(v + bytes(16 - len(v)))
        theirs = rv.split(b"\0", 1)
        ours = rv[len(theirs[0]) + 1:len(theirs[0]) + 1 + len(MARK)] == MARK
        rc = struct.unpack(">I", self.xchg(struct.pack(">I", CYCLE_BUFFER)))[0]
        rcl = struct.unpack(">I", self.xchg(struct.pack(">I", CACHE_LINE)))[0]
        rm = self.xchg(bytes([ord("0") + mtu_enum, 0]))
        rmtu = rm[0] - ord("0") if ord("1") <= rm[0] <= ord("5") else mtu_enum
        return {"version": theirs[0].decode(errors="replace"), "ours": ours,
                "cycle": max(CYCLE_BUFFER, rc), "cache_line": max(CACHE_LINE, rcl),
                "mtu": min(mtu_enum, rmtu)}

    def hand_shake(self, d):
        return Dest.decode(self.xchg(d.encode()))

    def reports(self, size, iters, peak, avg, rate):
        out = []
        for v, fmt in ((size, ">Q"), (iters, ">Q"), (peak, ">d"), (avg, ">d"), (rate, ">d")):
            out.append(struct.unpack(fmt, self.xchg(struct.pack(fmt, v)))[0])
        return out

    def close(self, d):
        self.hand_shake(d)
        try:
            self.s.sendall(b"done\0")
        except OSError:
            pass


def self_test():
    # the same vectors as `pattern_matches_the_python_peer` in workloads/src/pattern.rs
    vec = [(0, 0, 0, 0x00), (0x123456, 0x11, 0, 0x15), (0x123456, 0x11, 1, 0x21),
           (0x123456, 0x11, 4095, 0x89), (0xABCDEF, 0x2A, 65535, 0x15), (0xFFFFFF, 0xFFFFFF, 7, 0x72)]
    bad = [(v, pattern(v[0], v[1], v[2])) for v in vec if pattern(v[0], v[1], v[2]) != v[3]]
    d = Dest(0x11, 0xABCDEF, 0x1234, 0x556677889900, bytes(10) + b"\xff\xff\xc0\xa8\x4d\x01")
    rt = Dest.decode(d.encode())
    ok_dest = (rt.qpn, rt.psn, rt.rkey, rt.vaddr, rt.gid) == (d.qpn, d.psn, d.rkey, d.vaddr, d.gid)
    g = Geo(4096, 4096, 64)
    ok_geo = (g.stride, g.slots, g.span, g.buf_len) == (4096, 1, 4096, 5120)
    g8 = Geo(8, 4096, 64)
    ok_geo &= (g8.stride, g8.slots) == (64, 64)
    print("self-test: pattern %s, QP message %s, geometry %s" % (
        "ok" if not bad else "MISMATCH %r" % bad, "ok" if ok_dest else "MISMATCH",
        "ok" if ok_geo else "MISMATCH"))
    return 0 if not bad and ok_dest and ok_geo else 1


# --------------------------------------------------------------- the device

class Side:
    def __init__(self, a):
        import pyverbs.enums as e
        from pyverbs.cq import CQ
        from pyverbs.device import Context
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
        self.e = e
        self.a = a
        self.ctx = Context(name=a.dev)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, a.iters + TX_DEPTH + 16)
        cap = QPCap(max_send_wr=TX_DEPTH, max_recv_wr=max(a.iters, 1), max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        qa = QPAttr(port_num=1)
        qa.qp_access_flags = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                              | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)
        self.qp = QP(self.pd, init, qa)
        self.access = qa.qp_access_flags
        self.MR = MR
        self.mr = None
        gid = str(self.ctx.query_gid(1, a.gid_index))
        self.gid = bytes.fromhex(gid.replace(":", ""))
        self.psn = int.from_bytes(os.urandom(3), "big")
        self.mtu_enum = int(self.ctx.query_port(1).active_mtu)

    def register(self, geo):
        self.mr = self.MR(self.pd, geo.buf_len, self.access)
        self.mine = Dest(self.qp.qp_num, self.psn, self.mr.rkey, self.mr.buf, self.gid)
        self.mr.write(fill(self.psn, self.qp.qp_num, 0, geo.buf_len), geo.buf_len, 0)

    def connect(self, rem, mtu_enum):
        from pyverbs.addr import AHAttr, GID, GlobalRoute
        from pyverbs.qp import QPAttr
        a = QPAttr(port_num=1)
        a.path_mtu = mtu_enum
        a.dest_qp_num = rem.qpn
        a.rq_psn = rem.psn
        a.sq_psn = self.psn
        a.max_dest_rd_atomic = 16
        a.max_rd_atomic = max(1, min(rem.out_reads, 16))
        a.min_rnr_timer = 12
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        g = ":".join(rem.gid[i:i + 2].hex() for i in range(0, 16, 2))
        gr = GlobalRoute(dgid=GID(g), sgid_index=self.a.gid_index, hop_limit=64)
        a.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        self.qp.to_rts(a)

    def read(self, off, n):
        return bytes(self.mr.read(n, off))

    def poll(self, want, timeout):
        """Up to `want` completions; waits at most `timeout` s for the first."""
        end = time.time() + timeout
        while True:
            n, wcs = self.cq.poll(want)
            if n:
                return wcs[:n]
            if time.time() >= end:
                return []
            time.sleep(0.0002)


class Checks:
    def __init__(self):
        self.items = []

    def check(self, ok, what):
        self.items.append((bool(ok), what))
        print(" data check: %s (%s)" % ("OK" if ok else "FAILED", what), flush=True)


def run_client(side, geo, rem, op, iters, checks):
    """rxe is the requester: post every operation (a window of TX_DEPTH, 16
    for atomics, which must not hit one slot twice at once), check results."""
    e = side.e
    from pyverbs.wr import SGE, SendWR
    depth = min(TX_DEPTH, geo.slots, 16) if op in ("faa", "cas") else TX_DEPTH
    known = [None] * geo.slots
    chain_bad = []
    posted = done = 0
    last = time.time()
    while done < iters:
        while posted < iters and posted - done < depth:
            i = posted
            off = geo.off(i)
            if op in ("faa", "cas"):
                res = geo.results + (i % depth) * 8
                wr = SendWR(wr_id=i, num_sge=1, sg=[SGE(side.mr.buf + res, 8, side.mr.lkey)],
                            send_flags=e.IBV_SEND_SIGNALED,
                            opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP if op == "cas" else e.IBV_WR_ATOMIC_FETCH_AND_ADD)
                k = known[i % geo.slots]
                if op == "cas":
                    cmp_, swap = (0, 0) if k is None else (k, (k + 1) & (2**64 - 1))
                else:
                    cmp_, swap = 1, 0
                wr.set_wr_atomic(rem.rkey, rem.vaddr + off, cmp_, swap)
            else:
                opcode = {"write": e.IBV_WR_RDMA_WRITE, "imm": e.IBV_WR_RDMA_WRITE_WITH_IMM,
                          "read": e.IBV_WR_RDMA_READ}[op]
                kw = {"imm_data": socket.htonl(i & M32)} if op == "imm" else {}
                wr = SendWR(wr_id=i, num_sge=1, sg=[SGE(side.mr.buf + off, geo.size, side.mr.lkey)],
                            send_flags=e.IBV_SEND_SIGNALED, opcode=opcode, **kw)
                wr.set_wr_rdma(rem.rkey, rem.vaddr + off)
            side.qp.post_send(wr, None)
            posted += 1
        wcs = side.poll(64, 1.0)
        if not wcs:
            if time.time() - last > 30:
                raise RuntimeError("no completion for 30 s (done %d of %d)" % (done, iters))
            continue
        last = time.time()
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                raise RuntimeError("completion with error: status %d on wr_id %d" % (wc.status, wc.wr_id))
            if wc.wr_id != done:
                raise RuntimeError("completion out of order: %d, expected %d" % (wc.wr_id, done))
            if op in ("faa", "cas"):
                slot = done % geo.slots
                got = struct.unpack("<Q", side.read(geo.results + (done % depth) * 8, 8))[0]
                k = known[slot]
                if k is not None and got != k and len(chain_bad) < 3:
                    chain_bad.append("op %d slot %d: fetched %#x, expected %#x" % (done, slot, got, k))
                known[slot] = got if (op == "cas" and k is None) else (got + 1) & (2**64 - 1)
            done += 1
    used = min(iters, geo.slots)
    if op == "read":
        bad = sum(1 for k in range(used)
                  if side.read(k * geo.stride, geo.size) != fill(rem.psn, rem.qpn, k * geo.stride, geo.size))
        checks.check(bad == 0, "%d READ slots of %d B equal the server's pattern (%d differ)" % (used, geo.size, bad))
    elif op in ("faa", "cas"):
        what = "CMP_AND_SWAP chains (each hit, +1)" if op == "cas" else "FETCH_AND_ADD results (+1 per op)"
        checks.check(not chain_bad, "%d ops, %s per slot %s" % (done, what, "; ".join(chain_bad) or "unbroken"))
    else:
        ok = all(side.read(k * geo.stride, geo.size) == fill(side.psn, side.qp.qp_num, k * geo.stride, geo.size)
                 for k in range(used))
        checks.check(ok, "%d WRITEs of %d B sent from %d slots of our pattern" % (done, geo.size, used))
    return done


def check_server(side, geo, rem, op, iters, checks):
    """rxe memory was the target: check what the requester did to it."""
    mine_psn, mine_qpn = side.psn, side.qp.qp_num
    if op in ("write", "imm"):
        used = min(iters, geo.slots)
        bad = sum(1 for k in range(used)
                  if side.read(k * geo.stride, geo.size) != fill(rem.psn, rem.qpn, k * geo.stride, geo.size))
        checks.check(bad == 0, "%d written slots of %d B equal the writer's pattern (%d not)" % (used, geo.size, bad))
    if op == "imm":
        e = side.e
        got = bad = 0
        first_bad = ""
        last = time.time()
        while got < iters and time.time() - last < 5:
            for wc in side.poll(64, 0.2):
                last = time.time()
                ok = (wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM
                      and socket.ntohl(wc.imm_data) == got and wc.byte_len == geo.size)
                if not ok and not first_bad:
                    first_bad = " first: status %d opcode %d imm %#x byte_len %d" % (
                        wc.status, wc.opcode, socket.ntohl(wc.imm_data), wc.byte_len)
                bad += 0 if ok else 1
                got += 1
        checks.check(bad == 0 and got == iters,
                     "%d WRITE_WITH_IMM receive completions of %d, immediates 0..%d in order, byte_len %d (%d wrong)%s"
                     % (got, iters, iters, geo.size, bad, first_bad))
    if op == "read":
        same = side.read(0, geo.buf_len) == fill(mine_psn, mine_qpn, 0, geo.buf_len)
        checks.check(same, "the memory the peer READ is unchanged")
    if op in ("faa", "cas"):
        mem = side.read(0, geo.span)
        init = fill(mine_psn, mine_qpn, 0, geo.span)
        wrong = misplaced = 0
        for w in range(geo.span // 8):
            o = w * 8
            now = struct.unpack("<Q", mem[o:o + 8])[0]
            was = struct.unpack("<Q", init[o:o + 8])[0]
            delta = (now - was) & (2**64 - 1)
            if o % geo.stride != 0:
                misplaced += delta != 0
                continue
            k = o // geo.stride
            ops_k = -(-(iters - k) // geo.slots) if iters > k and k < geo.slots else 0
            want = max(ops_k - 1, 0) if op == "cas" else ops_k
            wrong += delta != want
        checks.check(wrong == 0 and misplaced == 0,
                     "%d atomics: every slot holds its initial value + its operations (%d slots wrong, %d words hit off-slot)"
                     % (iters, wrong, misplaced))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("server", nargs="?", help="connect to this roce perf server (else: serve)")
    p.add_argument("--op", choices=OPS, default="write")
    p.add_argument("-d", "--ib-dev", dest="dev", default="rxe0")
    p.add_argument("-x", "--gid-index", dest="gid_index", type=int, default=1)
    p.add_argument("-p", "--port", type=int, default=18515)
    p.add_argument("-s", "--size", type=int, default=65536)
    p.add_argument("-n", "--iters", type=int, default=1000)
    p.add_argument("--timeout", type=float, default=60, help="give up after this many seconds")
    p.add_argument("--self-test", action="store_true", help="check the pure parts, no device needed")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if a.op in ("faa", "cas"):
        a.size = 8
    client = a.server is not None
    checks = Checks()
    err = None
    ops = 0
    ours = False
    side = Side(a)
    if client:
        end = time.time() + a.timeout
        while True:
            try:
                s = socket.create_connection((a.server, a.port), timeout=2)
                break
            except OSError:
                if time.time() > end:
                    raise SystemExit("couldn't connect to %s:%d" % (a.server, a.port))
                time.sleep(0.1)
    else:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", a.port))
        ls.listen(1)
        ls.settimeout(a.timeout)
        s, _ = ls.accept()
        ls.close()
    s.settimeout(a.timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    oob = Oob(s, client)
    try:
        neg = oob.prologue(side.mtu_enum)
        ours = neg["ours"]
        geo = Geo(a.size, neg["cycle"], neg["cache_line"])
        side.register(geo)
        rem = oob.hand_shake(side.mine)
        side.connect(rem, neg["mtu"])
        again = oob.hand_shake(side.mine)
        if again.qpn != rem.qpn:
            raise RuntimeError("peer's QP changed between exchanges")
        print(" local QPN %#08x PSN %#08x RKey %#010x VAddr %#018x; remote QPN %#08x PSN %#08x; peer %s (version %s), MTU %d"
              % (side.qp.qp_num, side.psn, side.mr.rkey, side.mr.buf, rem.qpn, rem.psn,
                 "roce perf" if ours else "not roce perf", neg["version"], 128 << neg["mtu"]), flush=True)
        if not ours:
            raise RuntimeError("the peer is not roce perf (no roce-emu mark): nothing to check against")
        if a.op == "imm" and not client:
            from pyverbs.wr import RecvWR, SGE
            for i in range(a.iters):
                side.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(side.mr.buf, 0, side.mr.lkey)]), None)
        oob.hand_shake(side.mine)
        t0 = time.time()
        if client:
            ops = run_client(side, geo, rem, a.op, a.iters, checks)
            secs = max(time.time() - t0, 1e-9)
            oob.hand_shake(side.mine)
            mbps = ops * geo.size / secs / 1048576.0
            oob.reports(geo.size, ops, mbps, mbps, ops / secs / 1e6)
        else:
            print(" (server: the client runs the test; waiting for its end)", flush=True)
            oob.hand_shake(side.mine)
            theirs = oob.reports(geo.size, 0, 0.0, 0.0, 0.0)
            ops = theirs[1]
            print(" peer reported: %d B x %d operations" % (theirs[0], ops), flush=True)
            if ops != a.iters:
                checks.check(False, "peer reported %d operations, expected %d" % (ops, a.iters))
            check_server(side, geo, rem, a.op, ops, checks)
        oob.close(side.mine)
    except Exception as x:  # noqa: BLE001 - every failure ends in the result line
        err = "%s: %s" % (type(x).__name__, x)
        print(" error: " + err, flush=True)
    ok_n = sum(1 for c in checks.items if c[0])
    bad_n = len(checks.items) - ok_n
    print(" result: role=%s peer=%s op=%s ops=%d checks_ok=%d checks_failed=%d error=%s"
          % ("client" if client else "server", "roce" if ours else "other", a.op, ops, ok_n, bad_n,
             "yes" if err else "no"), flush=True)
    return 0 if err is None and bad_n == 0 and ok_n > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
