#!/usr/bin/env python3
"""Merge the summary.txt of several interop runs into a markdown table.

    scripts/interop_results.py RUNDIR... > table.md

One row per case (the order of the first run), one column per run:
"PASS (4.2 s)" or "FAIL (...)"; a totals row at the end.
"""
import re
import sys


def read(run):
    rows = {}
    order = []
    for line in open(run + '/summary.txt'):
        m = re.match(r'^(\S+)\s+(PASS|FAIL)\s+oracle=(\S+)\s+([\d.]+)s\s*(.*)$', line)
        if m:
            rows[m[1]] = (m[2], m[3], float(m[4]), m[5].strip())
            order.append(m[1])
    return order, rows


def main():
    runs = sys.argv[1:]
    data = [read(r) for r in runs]
    order = data[0][0]
    print('| case | ' + ' | '.join(f'run {i + 1}' for i in range(len(runs))) + ' |')
    print('|---|' + '---|' * len(runs))
    for c in order:
        cells = []
        for _, rows in data:
            if c not in rows:
                cells.append('—')
                continue
            res, oracle, secs, codes = rows[c]
            cell = f'{res} ({secs:.1f} s)'
            if res != 'PASS':
                cell = f'**{res}** ({secs:.1f} s; oracle {oracle}; {codes})'
            cells.append(cell)
        print(f'| `{c}` | ' + ' | '.join(cells) + ' |')
    tot = []
    for _, rows in data:
        p = sum(1 for v in rows.values() if v[0] == 'PASS')
        t = sum(v[2] for v in rows.values())
        tot.append(f'**{p}/{len(rows)}** in {t:.0f} s')
    print('| **total** | ' + ' | '.join(tot) + ' |')


if __name__ == '__main__':
    main()
