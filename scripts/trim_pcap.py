#!/usr/bin/env python3
"""Copy the first N RoCEv2 frames (UDP destination port 4791) of a classic
pcap into a new pcap, for committing small captures as test data.

    scripts/trim_pcap.py IN.pcap OUT.pcap [--max N] [--skip-tcp]
"""
import argparse
import struct


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('inp')
    ap.add_argument('out')
    ap.add_argument('--max', type=int, default=100, help='RoCE frames to keep (default 100)')
    a = ap.parse_args()
    d = open(a.inp, 'rb').read()
    magic = d[:4]
    if magic not in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1'):
        raise SystemExit('not a little-endian classic pcap')
    out = bytearray(d[:24])
    off, kept = 24, 0
    while off + 16 <= len(d) and kept < a.max:
        _s, _u, incl, _orig = struct.unpack('<IIII', d[off:off + 16])
        rec = d[off:off + 16 + incl]
        f = d[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(f) < 42 or f[12:14] != b'\x08\x00' or f[23] != 17:
            continue
        ihl = (f[14] & 15) * 4
        dport = struct.unpack('>H', f[14 + ihl + 2:14 + ihl + 4])[0]
        if dport != 4791:
            continue
        out += rec
        kept += 1
    open(a.out, 'wb').write(out)
    print(f'{a.out}: {kept} RoCE frames')


if __name__ == '__main__':
    main()
