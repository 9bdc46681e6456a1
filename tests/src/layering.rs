//! The workspace's structure as data, for the layering tests
//! (`tests/tests/layering.rs`) and the `module-cycles` tool
//! (`cargo run -p roce-tests --bin module-cycles -- [--graph] DIR`).
//!
//! * [`module_graph`]: the modules of one source directory (a crate's
//!   `src/`, or a module directory with `mod.rs`) and which of them each
//!   one uses. A module is a file `x.rs` or a directory `x/` (its files
//!   merged). A use is a `crate::x` path in code (a `use`, a type, a call),
//!   `crate::Name` resolved through the root's `pub use x::{Name, ..}`
//!   re-exports, or, inside a module directory, `super::x` and
//!   `crate::dir::x`. Comments (so doc links, which may point up) and
//!   `#[cfg(test)] mod` blocks are left out unless asked for.
//! * [`cycles`]: the strongly connected components of such a graph with
//!   more than one module, and elementary cycles in them.
//! * [`functions`]: every `fn` with a body in a file and its length in
//!   lines.
//! * [`workspace_crates`]: the members of the workspace, their source
//!   lines and the workspace crates each depends on (`[dependencies]`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Module → the modules it uses.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// What [`module_graph`] counts as a use.
#[derive(Clone, Copy, Debug, Default)]
pub struct GraphOptions {
    /// Count paths in comments (doc links) too.
    pub docs: bool,
    /// Count `#[cfg(test)] mod` blocks too.
    pub tests: bool,
}

/// `text` with comments, string literals and character literals emptied;
/// every newline is kept, so line numbers stay the same.
pub fn strip_comments(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let n = c.len();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // Keep the newlines of c[from..to] (a comment or literal body).
    let newlines = |out: &mut String, from: usize, to: usize| {
        for &ch in &c[from..to.min(n)] {
            if ch == '\n' {
                out.push('\n');
            }
        }
    };
    while i < n {
        let ident_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if c[i] == '/' && i + 1 < n && c[i + 1] == '/' {
            while i < n && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && i + 1 < n && c[i + 1] == '*' {
            // block comments nest in Rust
            let (start, mut depth) = (i, 0usize);
            while i < n {
                if c[i] == '/' && i + 1 < n && c[i + 1] == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && i + 1 < n && c[i + 1] == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            newlines(&mut out, start, i);
        } else if !ident_before && raw_string_start(&c, i).is_some() {
            let (hashes, body) = raw_string_start(&c, i).unwrap_or((0, i));
            let mut j = body;
            while j < n {
                if c[j] == '"' && (0..hashes).all(|k| j + 1 + k < n && c[j + 1 + k] == '#') {
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            newlines(&mut out, body, j);
            i = j + 1 + hashes;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < n && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            newlines(&mut out, i, j);
            i = j + 1;
        } else if c[i] == '\'' && i + 2 < n && c[i + 1] == '\\' {
            // '\n', '\'', '\u{..}'
            let mut j = i + 2;
            while j < n && c[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else if c[i] == '\'' && i + 2 < n && c[i + 2] == '\'' {
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// At `c[i]`, a raw string (`r"`, `r#"`, `br"`...): its `#` count and the
/// index of its first body character.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// `text` without its `#[cfg(test)] mod name { ... }` blocks (brace
/// matched; `text` already has its comments and literals stripped).
pub fn strip_test_mods(text: &str) -> String {
    let mut text = text.to_string();
    loop {
        let Some(at) = text.find("#[cfg(test)]") else { return text };
        let rest = &text[at + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        let after_vis = trimmed
            .strip_prefix("pub(crate)")
            .or_else(|| trimmed.strip_prefix("pub(super)"))
            .or_else(|| trimmed.strip_prefix("pub "))
            .unwrap_or(trimmed)
            .trim_start();
        let is_mod_block = after_vis.strip_prefix("mod ").is_some_and(|m| {
            let m = m.trim_start();
            let name_len =
                m.find(|ch: char| !(ch.is_alphanumeric() || ch == '_')).unwrap_or(m.len());
            m[name_len..].trim_start().starts_with('{')
        });
        if !is_mod_block {
            // an attribute on something else: keep it, look further on
            let keep = at + "#[cfg(test)]".len();
            let (head, tail) = text.split_at(keep);
            return format!("{head}{}", strip_test_mods(tail));
        }
        let open = at + text[at..].find('{').unwrap_or(0);
        let mut depth = 0usize;
        let mut end = text.len();
        for (k, ch) in text[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lines = text[at..end].matches('\n').count();
        text = format!("{}{}{}", &text[..at], "\n".repeat(lines), &text[end..]);
    }
}

/// The `.rs` files of one module of a source directory, by module name.
fn modules_of(dir: &Path) -> io::Result<BTreeMap<String, Vec<PathBuf>>> {
    let mut files = BTreeMap::new();
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        // `x.rs` and `x/` (the 2018 layout) are one module
        if path.is_dir() {
            let mut all = Vec::new();
            rs_files(&path, &mut all)?;
            files.entry(name).or_insert_with(Vec::new).extend(all);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if !matches!(stem, "lib" | "main" | "mod") {
                files.entry(stem.to_string()).or_insert_with(Vec::new).push(path);
            }
        }
    }
    Ok(files)
}

/// Every `.rs` file under `dir`, sorted.
pub fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            rs_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The root file of a source directory: `lib.rs`, `main.rs` or `mod.rs`
/// in it, or `dir.rs` beside it.
fn root_of(dir: &Path) -> Option<PathBuf> {
    ["lib.rs", "main.rs", "mod.rs"]
        .iter()
        .map(|f| dir.join(f))
        .chain(std::iter::once(dir.with_extension("rs")))
        .find(|p| p.exists())
}

/// Name → module for the root's `pub use module::{..}` lines (`*name` for
/// a glob re-export of `name`).
fn reexports(root: &str, modules: &BTreeMap<String, Vec<PathBuf>>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for stmt in root.split(';') {
        let Some(at) = stmt.find("pub use ") else { continue };
        let path = stmt[at + "pub use ".len()..].trim();
        let Some((module, what)) = path.split_once("::") else { continue };
        let module = module.trim().trim_start_matches("self::");
        if !modules.contains_key(module) {
            continue;
        }
        if what.trim() == "*" {
            names.insert(format!("*{module}"), module.to_string());
        }
        for name in idents(what) {
            names.entry(name).or_insert_with(|| module.to_string());
        }
    }
    names
}

/// The identifiers in `s`.
fn idents(s: &str) -> Vec<String> {
    s.split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The first segment of each path after every occurrence of `prefix` in
/// `text` (`prefix{a, b::c}` gives `a` and `b`).
fn heads_after(text: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|ch| ch.is_alphanumeric() || ch == '_') {
            continue;
        }
        let rest = &text[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find('}').unwrap_or(group.len())];
            for item in body.split(',') {
                if let Some(h) = idents(item.split("::").next().unwrap_or("")).into_iter().next() {
                    out.push(h);
                }
            }
        } else {
            let len =
                rest.find(|ch: char| !(ch.is_alphanumeric() || ch == '_')).unwrap_or(rest.len());
            if len > 0 {
                out.push(rest[..len].to_string());
            }
        }
    }
    out
}

/// The module graph of `dir` (see the [module documentation](self)).
/// `crate_src` is the crate's `src/`: inside a module directory below it,
/// `crate::<path>::x` names a sibling too.
pub fn module_graph(dir: &Path, crate_src: &Path, opts: GraphOptions) -> io::Result<Graph> {
    let modules = modules_of(dir)?;
    let clean = |text: &str| {
        let t = if opts.docs { text.to_string() } else { strip_comments(text) };
        if opts.tests {
            t
        } else {
            strip_test_mods(&t)
        }
    };
    let root_text = match root_of(dir) {
        Some(p) => clean(&fs::read_to_string(p)?),
        None => String::new(),
    };
    let names = reexports(&root_text, &modules);
    let globs: Vec<&String> =
        names.iter().filter(|(k, _)| k.starts_with('*')).map(|(_, m)| m).collect();
    let mut prefixes = vec!["crate::".to_string()];
    if dir != crate_src {
        let rel = dir.strip_prefix(crate_src).unwrap_or(dir);
        let path: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        prefixes = vec![format!("crate::{}::", path.join("::")), "super::".to_string()];
    }
    let mut texts = BTreeMap::new();
    for (m, paths) in &modules {
        let mut t = String::new();
        for p in paths {
            t.push_str(&fs::read_to_string(p)?);
            t.push('\n');
        }
        texts.insert(m.clone(), t);
    }
    let mut graph = Graph::new();
    for (m, raw) in &texts {
        let text = clean(raw);
        let mut uses = BTreeSet::new();
        for prefix in &prefixes {
            // `super::` in a nested file of a module directory points into
            // that directory, not at a sibling of it
            let top_level_only = prefix == "super::";
            if top_level_only && modules[m].len() > 1 {
                continue;
            }
            for head in heads_after(&text, prefix) {
                let target = if modules.contains_key(&head) {
                    Some(head.clone())
                } else if let Some(t) = names.get(&head) {
                    Some(t.clone())
                } else if head.starts_with(char::is_uppercase) {
                    globs.iter().find(|g| defines(&texts[g.as_str()], &head)).map(|g| g.to_string())
                } else {
                    None
                };
                if let Some(t) = target.filter(|t| t != m) {
                    uses.insert(t);
                }
            }
        }
        graph.insert(m.clone(), uses);
    }
    Ok(graph)
}

/// Whether `text` defines an item called `name`.
fn defines(text: &str, name: &str) -> bool {
    ["struct", "enum", "fn", "type", "trait", "const"].iter().any(|kw| {
        text.match_indices(&format!("{kw} {name}")).any(|(at, s)| {
            let after = text[at + s.len()..].chars().next();
            !after.is_some_and(|ch| ch.is_alphanumeric() || ch == '_')
        })
    })
}

/// The strongly connected components of `g` with more than one module
/// (Tarjan), each sorted.
pub fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !g.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Up to `max` elementary cycles inside the component `comp` of `g`,
/// shortest first (each starts at its smallest module).
pub fn elementary_cycles(g: &Graph, comp: &[String], max: usize) -> Vec<Vec<String>> {
    fn walk(
        g: &Graph,
        comp: &BTreeSet<&str>,
        start: &str,
        path: &mut Vec<String>,
        out: &mut Vec<Vec<String>>,
        budget: &mut usize,
    ) {
        let v = path.last().cloned().unwrap_or_default();
        for w in g.get(&v).into_iter().flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            if w == start {
                out.push(path.clone());
            } else if comp.contains(w.as_str()) && w.as_str() > start && !path.contains(w) {
                path.push(w.clone());
                walk(g, comp, start, path, out, budget);
                path.pop();
            }
        }
    }
    let set: BTreeSet<&str> = comp.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    let mut budget = 100_000usize;
    for start in comp {
        walk(g, &set, start, &mut vec![start.clone()], &mut out, &mut budget);
    }
    out.sort_by_key(|c| (c.len(), c.clone()));
    out.truncate(max);
    out
}

/// Every source directory of a crate the graph is drawn for: `src/` and
/// each module directory below it that has a `mod.rs` (or a sibling
/// `name.rs`) with modules of its own.
pub fn module_dirs(src: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = vec![src.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let dir = out[i].clone();
        for e in fs::read_dir(&dir)? {
            let path = e?.path();
            if path.is_dir() && fs::read_dir(&path)?.count() > 1 {
                out.push(path);
            }
        }
        i += 1;
    }
    out.sort();
    Ok(out)
}

/// A function with a body: its name, first line (1-based) and length in
/// lines (from the `fn` line to the closing brace's line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The function's name.
    pub name: String,
    /// The line of `fn`.
    pub line: usize,
    /// Lines from `fn` to the closing brace.
    pub lines: usize,
}

/// Every function with a body in `source` (comments and literals cannot
/// confuse it: they are stripped first).
pub fn functions(source: &str) -> Vec<Function> {
    let text = strip_comments(source);
    let b = text.as_bytes();
    let mut out = Vec::new();
    for (at, _) in text.match_indices("fn ") {
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let rest = &text[at + 3..];
        let len = rest.find(|ch: char| !(ch.is_alphanumeric() || ch == '_')).unwrap_or(0);
        if len == 0 {
            continue; // `fn(` types
        }
        let name = rest[..len].to_string();
        // the body starts at the first `{` before any `;` at depth 0 of ()/<>
        let mut depth = 0i32;
        let mut open = None;
        for (k, ch) in text[at..].char_indices() {
            match ch {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    open = Some(at + k);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut d = 0usize;
        let mut close = text.len();
        for (k, ch) in text[open..].char_indices() {
            match ch {
                '{' => d += 1,
                '}' => {
                    d -= 1;
                    if d == 0 {
                        close = open + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let line = text[..at].matches('\n').count() + 1;
        let lines = text[at..close].matches('\n').count() + 1;
        out.push(Function { name, line, lines });
    }
    out
}

/// One member of the workspace.
#[derive(Clone, Debug)]
pub struct Crate {
    /// The member's directory name (`emulator`, `verbs-api`...).
    pub dir: String,
    /// Its package name (`roce-emulator`...).
    pub package: String,
    /// The workspace packages in its `[dependencies]` (not dev- or build-).
    pub deps: Vec<String>,
    /// Lines of its `.rs` files under `src/`.
    pub src_lines: usize,
}

/// The value of `key = "value"` in one line of a TOML file.
fn toml_str<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.trim().strip_prefix(key)?.trim_start().strip_prefix('=')?.trim();
    rest.strip_prefix('"')?.split('"').next()
}

/// The members of the workspace at `root` (its `Cargo.toml`'s `members`).
pub fn workspace_crates(root: &Path) -> io::Result<Vec<Crate>> {
    let top = fs::read_to_string(root.join("Cargo.toml"))?;
    let members = top
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .map(|l| l.split('"').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut packages = BTreeMap::new();
    for m in &members {
        let toml = fs::read_to_string(root.join(m).join("Cargo.toml"))?;
        let name = toml.lines().find_map(|l| toml_str(l, "name")).unwrap_or(m).to_string();
        packages.insert(m.clone(), (name, toml));
    }
    let names: BTreeSet<String> = packages.values().map(|(n, _)| n.clone()).collect();
    let mut out = Vec::new();
    for m in &members {
        let (package, toml) = &packages[m];
        let mut deps = Vec::new();
        let mut section = String::new();
        for l in toml.lines() {
            let t = l.trim();
            if t.starts_with('[') {
                section = t.to_string();
            } else if section == "[dependencies]" {
                let key = t.split(['=', ' ']).next().unwrap_or("");
                if names.contains(key) {
                    deps.push(key.to_string());
                }
            }
        }
        let mut files = Vec::new();
        let src = root.join(m).join("src");
        if src.is_dir() {
            rs_files(&src, &mut files)?;
        }
        let mut src_lines = 0;
        for f in files {
            src_lines += fs::read_to_string(f)?.lines().count();
        }
        out.push(Crate { dir: m.clone(), package: package.clone(), deps, src_lines });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_keeps_lines_and_drops_comments_strings_chars() {
        let src =
            "a // crate::x\n/* crate::y\n */ b \"crate::z\n\" '\"' 'c' r#\"crate::w\"# c::<'a>\n";
        let out = strip_comments(src);
        assert_eq!(out.matches('\n').count(), src.matches('\n').count());
        assert!(!out.contains("crate::"), "{out}");
        assert!(out.contains("c::<'a>"), "{out}");
    }

    #[test]
    fn test_mods_are_dropped_other_cfg_test_items_kept() {
        let src = "#[cfg(test)]\nuse crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b; fn f() { }\n}\nfn g() {}\n";
        let out = strip_test_mods(src);
        assert!(out.contains("crate::a") && !out.contains("crate::b") && out.contains("fn g"));
        assert_eq!(out.matches('\n').count(), src.matches('\n').count());
    }

    #[test]
    fn function_lengths() {
        let src = "fn a() {\n  let s = \"}\";\n}\ntrait T { fn b(&self); }\nimpl X {\n    fn c<F: Fn(u8) -> u8>(f: F)\n    where F: Copy\n    {\n        {}\n    }\n}\n";
        let f = functions(src);
        assert_eq!(
            f,
            vec![
                Function { name: "a".into(), line: 1, lines: 3 },
                Function { name: "c".into(), line: 6, lines: 5 }
            ]
        );
    }

    #[test]
    fn cycles_found_and_listed() {
        let mut g = Graph::new();
        for (m, uses) in [("a", &["b"][..]), ("b", &["c"]), ("c", &["a", "d"]), ("d", &[])] {
            g.insert(m.into(), uses.iter().map(|s| s.to_string()).collect());
        }
        let sccs = cycles(&g);
        assert_eq!(sccs, vec![vec!["a".to_string(), "b".into(), "c".into()]]);
        assert_eq!(
            elementary_cycles(&g, &sccs[0], 10),
            vec![vec!["a".to_string(), "b".into(), "c".into()]]
        );
        g.get_mut("c").map(|u| u.remove("a"));
        assert!(cycles(&g).is_empty());
    }
}
