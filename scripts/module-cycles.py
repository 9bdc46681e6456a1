#!/usr/bin/env python3
"""Print the module dependency graph of a crate's top-level modules and its cycles.

Usage: scripts/module-cycles.py [--docs] [--tests] [--graph] [SRC_DIR]
(default SRC_DIR: emulator/src). A module is a file `x.rs` or a directory
`x/` under SRC_DIR (its files merged). A dependency is a `crate::x` path in
code (a `use`, a type, a call), or `crate::Name` resolved through the
crate root's `pub use x::{Name, ..}` re-exports. Comments (including doc
links) and `#[cfg(test)] mod` blocks are ignored unless --docs / --tests.
Prints every strongly connected component with more than one module and
every elementary cycle in it (shortest first); exit status 1 if any.
"""
import os
import re
import sys


def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def strip_test_mods(text):
    """Drop `#[cfg(test)] mod name { ... }` blocks (brace matched)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
        if not m:
            return text
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        text = text[: m.start()] + text[j:]


def reexports(root_text, modules):
    """Name -> module for the crate root's `pub use module::{..}` lines."""
    names = {}
    for m in re.finditer(r"pub\s+use\s+(\w+)::(\{[^}]*\}|\*|\w+)\s*;", root_text):
        mod, what = m.group(1), m.group(2)
        if mod not in modules:
            continue
        for name in re.findall(r"\w+", what):
            names[name] = mod
        if what == "*":
            names.setdefault("*" + mod, mod)
    return names


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    docs, tests, graph = "--docs" in sys.argv, "--tests" in sys.argv, "--graph" in sys.argv
    src = args[0] if args else "emulator/src"
    files = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            files[entry[:-3]] = [path]
        elif os.path.isdir(path):
            files[entry] = [
                os.path.join(d, f) for d, _, fs in os.walk(path) for f in sorted(fs) if f.endswith(".rs")
            ]
    modules = set(files)
    root = open(os.path.join(src, "lib.rs")).read()
    names = reexports(strip_comments(root), modules)
    glob_mods = [m for k, m in names.items() if k.startswith("*")]
    deps = {m: set() for m in modules}
    for mod, paths in files.items():
        text = "".join(open(p).read() for p in paths)
        if not docs:
            text = strip_comments(text)
        if not tests:
            text = strip_test_mods(text)
        for m in re.finditer(r"crate::(\{[^}]*\}|\w+)", text):
            for ident in re.findall(r"\w+", m.group(1))[:1] if not m.group(1).startswith("{") else [
                s.split("::")[0].strip() for s in m.group(1)[1:-1].split(",") if s.strip()
            ]:
                if ident in modules:
                    target = ident
                elif ident in names:
                    target = names[ident]
                elif ident[:1].isupper() and glob_mods:
                    # `pub use x::*` at the root: the name may come from any of them
                    hits = [g for g in glob_mods if re.search(r"\b(struct|enum|fn|type|trait|const)\s+" + ident + r"\b",
                                                              "".join(open(p).read() for p in files[g]))]
                    target = hits[0] if hits else None
                else:
                    target = None
                if target and target != mod:
                    deps[mod].add(target)
    if graph:
        for m in sorted(deps):
            print(f"{m}: {' '.join(sorted(deps[m]))}")
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    sccs = [c for c in sccs if len(c) > 1]
    cycles = set()
    for comp in sccs:
        cs = set(comp)
        for start in comp:
            # elementary cycles through `start` whose other modules sort after it
            path = [start]

            def walk(v):
                for w in sorted(deps[v] & cs):
                    if w == start:
                        cycles.add(tuple(path))
                    elif w > start and w not in path:
                        path.append(w)
                        walk(w)
                        path.pop()

            walk(start)
    if not sccs:
        print("no module cycles")
        return 0
    for comp in sccs:
        print("strongly connected:", " ".join(comp))
    for c in sorted(cycles, key=lambda c: (len(c), c)):
        print("cycle:", " -> ".join(c + (c[0],)))
    print(f"{len(cycles)} cycles in {len(sccs)} components")
    return 1


if __name__ == "__main__":
    sys.exit(main())
