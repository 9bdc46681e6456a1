#!/usr/bin/env python3
"""roce conform's agent for any verbs device, with pyverbs (rdma-core).

Runs on the host of the device under test and does what `roce conform`
asks, one JSON object per line over TCP (the protocol is in
conform/src/remote.rs): create a PD, a region, a CQ and one RC or UC QP
connected to the tester's made-up QP, post receives and sends, poll
completions, read and write the region, report the QP state. It sends no
packet of its own: every packet on the wire comes from the device.

    roce-conform-agent.py --dev rxe0 --addr 192.168.77.2 [--port 18700]

--addr is the device's IPv4 address (its RoCEv2 GID is looked up from it).
Kernel rxe: run as root (or with a large RLIMIT_MEMLOCK). roce-emu:
`roce run -- python3 conform/agent/roce-conform-agent.py --dev roce0 --addr ...`.
One tester at a time; the agent serves until killed.
"""
import argparse
import json
import os
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

MTU = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024, 2048: e.IBV_MTU_2048,
       4096: e.IBV_MTU_4096}
# access bits beyond the classic five (IBA 1.5 FLUSH): a kernel that does
# not know them refuses the region or the QP; the case is then n/a
NEW_ACCESS = ~0xFF
STATE = {e.IBV_QPS_RESET: 'RESET', e.IBV_QPS_INIT: 'INIT', e.IBV_QPS_RTR: 'RTR', e.IBV_QPS_RTS: 'RTS',
         e.IBV_QPS_SQD: 'SQD', e.IBV_QPS_SQE: 'SQE', e.IBV_QPS_ERR: 'ERR'}


class Unsupported(Exception):
    pass


def mapped(ip):
    return '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' % tuple(int(x) for x in ip.split('.'))


class Agent:
    def __init__(self, dev, addr):
        self.ctx = Context(name=dev)
        self.dev = dev
        self.addr = addr
        self.gidx = None
        want = mapped(addr)
        for i in range(self.ctx.query_port(1).gid_tbl_len):
            try:
                if str(self.ctx.query_gid(1, i)) == want:
                    self.gidx = i
                    break
            except Exception:
                pass
        if self.gidx is None:
            raise SystemExit('%s has no GID for %s' % (dev, addr))
        self.objs = None

    def hello(self, r):
        a = self.ctx.query_device()
        return {'describe': '%s on Linux %s (fw %s, pyverbs agent)' % (self.dev, os.uname().release, a.fw_version),
                'addr': self.addr}

    def teardown(self, r=None):
        if self.objs:
            # the window first: a bound type 2 window holds its QP and region
            for o in ('mw', 'qp', 'srq', 'mr', 'cq', 'pd'):
                try:
                    if self.objs.get(o) is not None:
                        self.objs[o].close()
                except Exception:
                    pass
        self.objs = None
        return {}

    def setup(self, r):
        self.teardown()
        if r['mtu'] not in MTU:
            raise Unsupported('path MTU %d' % r['mtu'])
        qpt = {'rc': e.IBV_QPT_RC, 'uc': e.IBV_QPT_UC, 'ud': e.IBV_QPT_UD}.get(r['service'])
        if qpt is None:
            raise Unsupported('service %s' % r['service'])
        need = r.get('ops', 0)
        if need:
            # IB_UVERBS_DEVICE_FLUSH_GLOBAL (bit 38) and _ATOMIC_WRITE (bit 40)
            flags = self.ctx.query_device_ex().device_cap_flags_ex
            for bit, name, cap in ((1, 'FLUSH', 1 << 38), (2, 'ATOMIC WRITE', 1 << 40)):
                if need & bit and not flags & cap:
                    raise Unsupported('%s (the device does not report it)' % name)
        stop_at = r.get('stop_at', 'RTS')
        if stop_at not in ('RTS', 'RTR') or (stop_at == 'RTR' and qpt != e.IBV_QPT_RC):
            raise Unsupported('set-up stopping at %s' % stop_at)
        pd = PD(self.ctx)
        cq = CQ(self.ctx, 256)
        try:
            mr = MR(pd, r['mr_len'], r['mr_access'])
        except Exception as x:
            if r['mr_access'] & NEW_ACCESS:
                raise Unsupported('region access %#x: %s' % (r['mr_access'], x))
            raise
        srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=64, max_sge=1))) if r.get('srq') else None
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=qpt, scq=cq, rcq=cq, cap=cap, sq_sig_all=1, srq=srq)
        qa = QPAttr(port_num=1)
        if qpt == e.IBV_QPT_UD:
            # explicit masks: RESET -> INIT (P_Key index, port, Q_Key) -> RTR -> RTS
            qp = QP(pd, init)
            a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
            a.pkey_index = 0
            a.qkey = r['qkey']
            qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
            qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
            a = QPAttr(qp_state=e.IBV_QPS_RTS)
            a.sq_psn = r['sq_psn']
            qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
            self.objs = {'pd': pd, 'cq': cq, 'mr': mr, 'qp': qp, 'srq': srq}
            return {'qpn': qp.qp_num, 'mr_addr': mr.buf, 'rkey': mr.rkey}
        qa.qp_access_flags = r['qp_access'] if qpt == e.IBV_QPT_RC else \
            r['qp_access'] & (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        try:
            qp = QP(pd, init, qa)  # -> INIT
        except Exception as x:
            if r['qp_access'] & NEW_ACCESS:
                raise Unsupported('QP access %#x: %s' % (r['qp_access'], x))
            raise
        a = QPAttr(port_num=1)
        a.path_mtu = MTU[r['mtu']]
        a.dest_qp_num = r['peer_qpn']
        a.rq_psn = r['rq_psn']
        a.sq_psn = r['sq_psn']
        a.max_dest_rd_atomic = r['max_dest_rd_atomic']
        a.max_rd_atomic = r['max_rd_atomic']
        a.min_rnr_timer = r['min_rnr_timer']
        a.timeout = r['timeout']
        a.retry_cnt = r['retry_cnt']
        a.rnr_retry = r['rnr_retry']
        gr = GlobalRoute(dgid=GID(mapped(r['peer'])), sgid_index=self.gidx, hop_limit=64)
        a.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        try:
            if stop_at == 'RTR':
                qp.to_rtr(a)
            else:
                qp.to_rts(a)
        except Exception as x:
            if r['qp_access'] & NEW_ACCESS:
                raise Unsupported('QP access %#x: %s' % (r['qp_access'], x))
            raise
        self.objs = {'pd': pd, 'cq': cq, 'mr': mr, 'qp': qp, 'srq': srq}
        mw_rkey = self.bind_window(pd, qp, cq, mr, r['window'], r.get('window_type', 2)) if r.get('window') else 0
        return {'qpn': qp.qp_num, 'mr_addr': mr.buf, 'rkey': mr.rkey, 'mw_rkey': mw_rkey}

    def bind_window(self, pd, qp, cq, mr, length, ty):
        # a window over the region's first `length` bytes, remote read and
        # write: type 2 bound by a BIND_MW work request on the QP, type 1 by
        # ibv_bind_mw
        try:
            mw = MW(pd, e.IBV_MW_TYPE_2 if ty == 2 else e.IBV_MW_TYPE_1)
        except Exception as x:
            raise Unsupported('type %d memory window: %s' % (ty, x))
        self.objs['mw'] = mw
        info = MWBindInfo(mr, mr.buf, length, e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE)
        if ty == 1:
            qp.bind_mw(mw, MWBind(info, e.IBV_SEND_SIGNALED))
            rkey = None  # known once the bind completed
        else:
            wr = SendWR(wr_id=2**64 - 1, opcode=e.IBV_WR_BIND_MW, num_sge=0, send_flags=e.IBV_SEND_SIGNALED)
            wr.set_bind_wr(mw, info)
            rkey = (mw.rkey & ~0xFF) | ((mw.rkey + 1) & 0xFF)  # ibv_inc_rkey, as set_bind_wr does
            qp.post_send(wr, None)
        end = time.time() + 2
        while time.time() < end:
            n, wcs = cq.poll(1)
            if n:
                if wcs[0].status != e.IBV_WC_SUCCESS:
                    raise RuntimeError('BIND_MW completed with status %d' % wcs[0].status)
                return mw.rkey if rkey is None else rkey
            time.sleep(0.0005)
        raise RuntimeError('BIND_MW: no completion within 2 s')

    def o(self, k):
        if not self.objs:
            raise RuntimeError('no QP: setup first')
        return self.objs[k]

    def post_recv(self, r):
        mr = self.o('mr')
        wr = RecvWR(wr_id=r['wr_id'], num_sge=1, sg=[SGE(mr.buf + r['offset'], r['len'], mr.lkey)])
        if self.objs.get('srq') is not None:
            self.objs['srq'].post_recv(wr, None)
        else:
            self.o('qp').post_recv(wr, None)
        return {}

    def modify(self, r):
        to = {'SQD': e.IBV_QPS_SQD, 'RTS': e.IBV_QPS_RTS}.get(r['state'])
        if to is None:
            raise Unsupported('modify to %s' % r['state'])
        self.o('qp').modify(QPAttr(qp_state=to), e.IBV_QP_STATE)
        return {}

    def post_send(self, r):
        mr = self.o('mr')
        op = r['opcode']
        # one SGE even for a zero-length request (pyverbs wants at least one)
        sg = [SGE(mr.buf + r['offset'], r['len'], mr.lkey)]
        flags = e.IBV_SEND_SIGNALED | (e.IBV_SEND_FENCE if r.get('fence') else 0)
        wr = SendWR(wr_id=r['wr_id'], opcode=op, num_sge=len(sg), sg=sg, send_flags=flags)
        if op in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_RDMA_READ):
            wr.set_wr_rdma(r['rkey'], r['remote_addr'])
        elif op in (e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD):
            wr.set_wr_atomic(r['rkey'], r['remote_addr'], r['compare_add'], r['swap'])
        if op in (e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_SEND_WITH_IMM):
            wr.imm_data = socket.htonl(r['imm'])
        self.o('qp').post_send(wr, None)
        return {}

    def poll(self, r):
        cq = self.o('cq')
        end = time.time() + r['wait_ms'] / 1000.0
        while True:
            n, wcs = cq.poll(r['want'])
            if n or time.time() >= end:
                out = []
                for w in wcs[:n]:
                    imm = socket.ntohl(w.imm_data) if w.wc_flags & e.IBV_WC_WITH_IMM else None
                    out.append({'wr_id': w.wr_id, 'status': w.status, 'opcode': w.opcode,
                                'byte_len': w.byte_len, 'imm': imm})
                return {'wcs': out}
            time.sleep(0.0005)

    def qp_state(self, r):
        attr, _ = self.o('qp').query(e.IBV_QP_STATE)
        return {'state': STATE.get(attr.qp_state, str(attr.qp_state))}

    def read(self, r):
        return {'hex': self.o('mr').read(r['len'], r['offset']).hex()}

    def write(self, r):
        b = bytes.fromhex(r['hex'])
        self.o('mr').write(b, len(b), r['offset'])
        return {}


def serve(agent, conn):
    f = conn.makefile('r')
    for line in f:
        req = None
        try:
            req = json.loads(line)
            op = req.get('op')
            if op not in ('hello', 'setup', 'post_recv', 'post_send', 'poll', 'qp_state', 'modify', 'read',
                          'write', 'teardown'):
                raise Unsupported('op %r' % op)
            rep = getattr(agent, op)(req)
            rep['ok'] = True
        except Unsupported as x:
            rep = {'ok': False, 'unsupported': True, 'error': str(x)}
        except Exception as x:
            rep = {'ok': False, 'unsupported': False, 'error': '%s: %s' % (type(x).__name__, x)}
        if isinstance(req, dict) and 'seq' in req:
            rep['seq'] = req['seq']
        conn.sendall((json.dumps(rep) + '\n').encode())
    agent.teardown()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--dev', required=True, help='verbs device name (rxe0, roce0, mlx5_0, ...)')
    p.add_argument('--addr', required=True, help="the device's IPv4 address")
    p.add_argument('--listen', default='0.0.0.0', help='address to listen on (default all)')
    p.add_argument('--port', type=int, default=18700, help='TCP port (default 18700)')
    args = p.parse_args()
    agent = Agent(args.dev, args.addr)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.listen, args.port))
    ls.listen(1)
    print('roce-conform-agent: %s (%s) on TCP %s:%d' % (args.dev, args.addr, args.listen, args.port), flush=True)
    while True:
        conn, peer = ls.accept()
        try:
            serve(agent, conn)
        finally:
            conn.close()


if __name__ == '__main__':
    sys.exit(main())
