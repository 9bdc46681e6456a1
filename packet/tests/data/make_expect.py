#!/usr/bin/env python3
"""Regenerate packet/tests/data/ from /work/shared (run once; the tests do not
need /work/shared).

  python3 packet/tests/data/make_expect.py [SHARED_DIR]

Copies the rxe captures (write_bw.pcap trimmed to its first 300 frames) and
the oracle samples, then runs the oracle (oracle.py --no-tshark) on each and
writes NAME.expect.tsv: one line per RoCE packet the oracle reports, columns
named in the first line. Absent values are '-'. The `ext` column lists the
extension headers as name=v1:v2 separated by ';' (all integers decimal):
  reth=va:rkey:dmalen aeth=syndrome:msn atomiceth=va:rkey:swap_add:compare
  atomicacketh=orig_rem_data immdt=v ieth=rkey deth=qkey:srcqp rdeth=v feth=v
"""
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = sys.argv[1] if len(sys.argv) > 1 else "/work/shared"
ORACLE = os.path.join(SHARED, "oracles", "oracle.py")
TRIM = {"write_bw.pcap": 300}

COLS = ["frame", "seg", "ipver", "src", "dst", "sport", "dport", "tos", "ttl",
        "trailer", "opcode", "se", "migreq", "padcnt", "tver", "pkey", "fecn",
        "becn", "resv6", "destqp", "ackreq", "resv7", "psn", "icrc_ok",
        "icrc_expected", "payload_len", "errors", "ext"]


def trim_pcap(src, dst, n):
    with open(src, "rb") as f:
        data = f.read()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), "LE pcap only"
    off, out = 24, [data[:24]]
    for _ in range(n):
        if off + 16 > len(data):
            break
        incl = struct.unpack_from("<I", data, off + 8)[0]
        out.append(data[off: off + 16 + incl])
        off += 16 + incl
    with open(dst, "wb") as f:
        f.write(b"".join(out))


def ext_of(r):
    parts = []
    if "reth" in r:
        x = r["reth"]
        parts.append(f"reth={x['va']}:{x['rkey']}:{x['dmalen']}")
    if "aeth" in r:
        x = r["aeth"]
        parts.append(f"aeth={x['syndrome']}:{x['msn']}")
    if "atomiceth" in r:
        x = r["atomiceth"]
        parts.append(f"atomiceth={x['va']}:{x['rkey']}:{x['swap_add']}:{x['compare']}")
    if "atomicacketh" in r:
        parts.append(f"atomicacketh={r['atomicacketh']['orig_rem_data']}")
    if "immdt" in r:
        parts.append(f"immdt={r['immdt']}")
    if "ieth_rkey" in r:
        parts.append(f"ieth={r['ieth_rkey']}")
    if "deth" in r:
        parts.append(f"deth={r['deth']['qkey']}:{r['deth']['srcqp']}")
    if "rdeth_eecnxt" in r:
        parts.append(f"rdeth={r['rdeth_eecnxt']}")
    if "feth" in r:
        parts.append(f"feth={r['feth']}")
    return ";".join(parts) or "-"


def row(r):
    v6 = r["ip_version"] == 6
    val = {
        "frame": r["frame"], "seg": r.get("gso_segment", "-"),
        "ipver": r["ip_version"], "src": r["src"], "dst": r["dst"],
        "sport": r["udp_sport"], "dport": r["udp_dport"],
        "tos": r["ipv6_tc"] if v6 else r["ip_tos"],
        "ttl": r["ipv6_hlim"] if v6 else r["ip_ttl"],
        "trailer": r.get("l2_trailer_bytes", 0),
        "icrc_ok": int(r["icrc_ok"]),
        "errors": ",".join(e.split(" ")[0] for e in r.get("errors", [])) or "-",
        "ext": ext_of(r),
    }
    out = []
    for c in COLS:
        v = val[c] if c in val else r.get(c, "-")
        out.append(str(v))
    return "\t".join(out)


def main():
    srcs = sorted(os.path.join(SHARED, "captures", f)
                  for f in os.listdir(os.path.join(SHARED, "captures"))
                  if f.endswith(".pcap"))
    srcs.append(os.path.join(SHARED, "oracles", "samples.pcap"))
    shutil.copy(os.path.join(SHARED, "oracles", "samples.manifest.json"), HERE)
    for src in srcs:
        name = os.path.basename(src)
        dst = os.path.join(HERE, name)
        if name in TRIM:
            trim_pcap(src, dst, TRIM[name])
        else:
            shutil.copy(src, dst)
        os.chmod(dst, 0o644)
        res = subprocess.run([sys.executable, ORACLE, "--no-tshark", dst],
                             capture_output=True, text=True)
        if res.returncode not in (0, 1):
            sys.exit(f"oracle failed on {dst}: {res.stderr}")
        recs = [json.loads(l) for l in res.stdout.splitlines() if l.strip()]
        with open(os.path.join(HERE, name[:-5] + ".expect.tsv"), "w") as f:
            f.write("\t".join(COLS) + "\n")
            for r in recs:
                f.write(row(r) + "\n")
        print(f"{name}: {len(recs)} records")


if __name__ == "__main__":
    main()
