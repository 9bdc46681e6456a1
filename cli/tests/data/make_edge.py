#!/usr/bin/env python3
"""Write edge.pcap: malformed and unusual RoCEv2 frames for `roce decode`.

Run once by hand (needs the project's oracle.py for its ICRC function):
    python3 make_edge.py /path/to/oracles   # writes edge.pcap here
    python3 /path/to/oracles/oracle.py --no-tshark edge.pcap > edge.oracle.jsonl
The tests use only the two committed outputs, never this script.
"""
import os
import struct
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "/work/shared/oracles")
import oracle  # noqa: E402

SRC, DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
MAC = b"\x02\x00\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x02"


def ipv4(payload_len, ident=0, ihl=5, tos=0):
    opts = b"\x01" * ((ihl - 5) * 4)          # NOP options
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, tos,
                              ihl * 4 + payload_len, ident, 0x4000, 64, 17, 0,
                              SRC, DST) + opts)
    c = 0xFFFF - oracle._csum16(bytes(h))
    h[10:12] = struct.pack("!H", c)
    return bytes(h)


def bth(op, psn, qp=0x12, pad=0, tver=0, ack=1, se=0):
    return struct.pack("!BBHII", op, (se << 7) | (pad << 4) | tver, 0xFFFF,
                       qp & 0xFFFFFF, (ack << 31) | psn)


def packet(ib_wo_icrc, sport=49152, dport=4791, ihl=5, icrc=True, extra=b""):
    """Ethernet frame with IPv4/UDP and the ICRC appended."""
    ulen = 8 + len(ib_wo_icrc) + 4
    ip = ipv4(ulen, ihl=ihl)
    udp = struct.pack("!HHHH", sport, dport, ulen, 0)
    crc = oracle.compute_icrc(ip, udp, ib_wo_icrc) if icrc else b"\0\0\0\0"
    return MAC + b"\x08\x00" + ip + udp + ib_wo_icrc + crc + extra


def gso(segs, ident=7):
    """One UDP datagram holding several RoCE packets, each with the ICRC
    kernel segmentation would give it."""
    body = b""
    for k, s in enumerate(segs):
        n = len(s) + 4
        ip_k = ipv4(8 + n, ident=ident + k)
        udp_k = struct.pack("!HHHH", 49152, 4791, 8 + n, 0)
        body += s + oracle.compute_icrc(ip_k, udp_k, s)
    ulen = 8 + len(body)
    ip = ipv4(ulen, ident=ident)
    udp = struct.pack("!HHHH", 49152, 4791, ulen, 0)
    return MAC + b"\x08\x00" + ip + udp + body


reth = struct.pack("!QII", 0x7F0000001000, 0x1234, 612)
frames = [
    # 1 valid SEND_ONLY
    packet(bth(0x04, 1) + b"hello world!"),
    # 2 GSO super-packet: SEND FIRST/MIDDLE/LAST, 256+256+100 bytes
    gso([bth(0x00, 2, ack=0) + b"\x11" * 256,
         bth(0x01, 3, ack=0) + b"\x22" * 256,
         bth(0x02, 4) + b"\x33" * 100]),
    # 3 unknown opcode 0x1e
    packet(bth(0x1E, 5) + b"\0" * 8),
    # 4 TVer 1
    packet(bth(0x04, 6, tver=1) + b"abcd"),
    # 5 RETH cut short
    packet(bth(0x0A, 7) + b"\0" * 8),
    # 6 payload+pad not a multiple of 4
    packet(bth(0x04, 8) + b"abcde"),
    # 7 PadCnt 3 with no payload
    packet(bth(0x04, 9, pad=3)),
    # 8 ACK with a payload
    packet(bth(0x11, 10, ack=0) + struct.pack("!I", 0x1F000001) + b"xxxx"),
    # 9 ATOMIC_WRITE with 4 bytes
    packet(bth(0x1D, 11) + reth[:12] + struct.pack("!I", 4) + b"abcd"),
    # 10 UDP payload too short for BTH + ICRC
    MAC + b"\x08\x00" + ipv4(16) + struct.pack("!HHHH", 49152, 4791, 16, 0)
    + b"\x04\x00\xff\xff\x00\x00\x00\x12",
    # 11 AETH with the reserved bit set (kind ACK)
    packet(bth(0x11, 12, ack=0) + struct.pack("!I", 0x9F000002)),
    # 12 IPv4 with options
    packet(bth(0x04, 13) + b"opts", ihl=6),
    # 13 nonzero pad bytes (warning only)
    packet(bth(0x04, 14, pad=2) + b"ab\x01\x02"),
    # 14 UD with a nonzero DETH reserved byte (warning only)
    packet(bth(0x64, 15, ack=0) + struct.pack("!II", 0x11111111, 0x05000022)
           + b"ud!!"),
    # 15 CNP with nonzero reserved bytes (warning only)
    packet(bth(0x81, 0, ack=0) + b"\x01" + b"\0" * 15),
    # 16-19 NAKs: invalid request, remote access, remote op, reserved kind
    packet(bth(0x11, 16, ack=0) + struct.pack("!I", 0x61000003)),
    packet(bth(0x11, 17, ack=0) + struct.pack("!I", 0x62000003)),
    packet(bth(0x11, 18, ack=0) + struct.pack("!I", 0x63000003)),
    packet(bth(0x11, 19, ack=0) + struct.pack("!I", 0x40000003)),
    # 20 RDMA READ request and its 2-packet response (PMTU 256 from FIRST)
    packet(bth(0x0C, 20) + struct.pack("!QII", 0x7F0000002000, 0x99, 300)),
    packet(bth(0x0D, 20, qp=0x11, ack=0) + struct.pack("!I", 0x1F000003)
           + b"\x44" * 256, sport=49152),
    packet(bth(0x0F, 21, qp=0x11, ack=0) + struct.pack("!I", 0x1F000004)
           + b"\x55" * 44),
    # 23 bad ICRC (all zero)
    packet(bth(0x04, 22) + b"zero", icrc=False),
    # 24 not RoCE: UDP to another port
    packet(bth(0x04, 23) + b"else", dport=53),
    # 25 VLAN-tagged valid packet
    None,
    # 26 UDP length disagreeing with the IP length
    None,
]
vlan = packet(bth(0x04, 24) + b"vlan")
frames[24] = vlan[:12] + b"\x81\x00\x00\x05" + vlan[12:]
bad_len = bytearray(packet(bth(0x04, 25) + b"ulen"))
struct.pack_into("!H", bad_len, 14 + 20 + 4, 8 + 12 + 4 - 4)   # UDP len 4 short
frames[25] = bytes(bad_len)
# The DST->SRC direction for the read responses.
for i in (20, 21):
    f = bytearray(frames[i])
    ip = bytearray(f[14:34])
    ip[12:16], ip[16:20] = DST, SRC
    ip[10:12] = b"\0\0"
    ip[10:12] = struct.pack("!H", 0xFFFF - oracle._csum16(bytes(ip)))
    udp = bytes(f[34:42])
    ib = bytes(f[42:-4])
    frames[i] = bytes(f[:14]) + bytes(ip) + udp + ib + \
        oracle.compute_icrc(bytes(ip), udp, ib)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "edge.pcap")
with open(out, "wb") as fh:
    fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for n, fr in enumerate(frames):
        fh.write(struct.pack("<IIII", 1_700_000_000, n * 1000, len(fr), len(fr)))
        fh.write(fr)
    # 27 truncated capture: the last 10 bytes were not captured
    fr = packet(bth(0x04, 26) + b"\x66" * 40)
    fh.write(struct.pack("<IIII", 1_700_000_000, 27000, len(fr) - 10, len(fr)))
    fh.write(fr[:-10])
print(f"wrote {out}: {len(frames) + 1} frames")
