#!/usr/bin/env python3
"""Write seed inputs of the `device` fuzz target made of real traffic: the
RoCEv2 UDP payloads (BTH to ICRC) of the kernel-rxe captures in
../shared/captures, in the harness's "real packet" form (see `real` in
fuzz/src/lib.rs): a selector byte >= 0xF0 (low bits: which QP, PSN moved or
not, ICRC recomputed or kept), a 2-byte little-endian length, the packet,
then the harness's timer byte.

    fuzz/seeds-device.py [CAPTURES_DIR] [OUT_DIR]"""
import os, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
cap_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, '..', '..', 'shared', 'captures')
out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, 'corpus', 'device')

def roce_payloads(path):
    data = open(path, 'rb').read()
    if len(data) < 24 or data[:4] not in (b'\xd4\xc3\xb2\xa1', b'\xa1\xb2\xc3\xd4', b'\x4d\x3c\xb2\xa1', b'\xa1\xb2\x3c\x4d'):
        return []  # pcap only (the captures are)
    le = data[:4] in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1')
    e = '<' if le else '>'
    linktype = struct.unpack(e + 'I', data[20:24])[0]
    off, out = 24, []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(e + 'IIII', data[off:off + 16])
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        p = 14 if linktype == 1 else 0
        if linktype == 1:
            ethertype = struct.unpack('>H', frame[12:14])[0]
            if ethertype == 0x8100:
                ethertype, p = struct.unpack('>H', frame[16:18])[0], 18
        else:
            ethertype = 0x0800 if frame and frame[0] >> 4 == 4 else 0x86DD
        if ethertype == 0x0800 and len(frame) > p + 20 and frame[p + 9] == 17:
            u = p + (frame[p] & 0xF) * 4
        elif ethertype == 0x86DD and len(frame) > p + 40 and frame[p + 6] == 17:
            u = p + 40
        else:
            continue
        if len(frame) < u + 8 or struct.unpack('>H', frame[u + 2:u + 4])[0] != 4791:
            continue
        ulen = struct.unpack('>H', frame[u + 4:u + 6])[0]
        out.append(frame[u + 8:u + ulen])
    return out

made = 0
os.makedirs(out_dir, exist_ok=True)
for name in sorted(os.listdir(cap_dir)):
    if not name.endswith('.pcap'):
        continue
    pkts = roce_payloads(os.path.join(cap_dir, name))[:48]
    if not pkts:
        continue
    seed = bytearray()
    for k, pkt in enumerate(pkts):
        sel = 0xF0 | (k % 8)           # QP k % 3 ..., PSN moved on odd groups, ICRC recomputed
        seed += bytes([sel]) + struct.pack('<H', len(pkt)) + pkt
        # the harness's timer byte (< 32: the timers fire after the next byte's x 10 ms)
        seed += bytes([5, 5]) if k % 16 == 15 else bytes([0xFF])
    with open(os.path.join(out_dir, 'rxe-' + name[:-5]), 'wb') as f:
        f.write(seed)
    made += 1
print(f'{made} seeds from {cap_dir} in {out_dir}')
