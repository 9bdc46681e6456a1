//! Every Rust block of docs/verbs.md is a whole program: the dependency
//! line, the `use`, and a `fn main`. The crate includes the page as its
//! documentation, so `cargo test --doc` compiles and runs each block exactly
//! as written (rustdoc adds no `main` when the block has one).

#[test]
fn every_code_block_in_verbs_md_is_a_program() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/verbs.md"))
        .expect("docs/verbs.md");
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs"))
        .expect("src/lib.rs");
    assert!(lib.contains("include_str!(\"../../docs/verbs.md\")"), "the page is the crate's doc");
    let blocks: Vec<&str> =
        page.split("```rust\n").skip(1).map(|b| b.split("```").next().unwrap_or("")).collect();
    assert!(blocks.len() >= 2, "{} blocks", blocks.len());
    for (i, b) in blocks.iter().enumerate() {
        let first = b.lines().next().unwrap_or("");
        assert!(
            first.starts_with("// [dependencies] roce-verbs-api = "),
            "block {i} starts without the dependency line: {first:?}"
        );
        assert!(b.contains("\nuse roce_verbs_api::*;\n"), "block {i}: no use line");
        if b.contains("SimNet::") {
            assert!(first.contains("roce-sim = "), "block {i} uses SimNet without roce-sim");
            assert!(b.contains("\nuse roce_sim::SimNet;\n"), "block {i}: SimNet not imported");
        }
        assert!(b.contains("\nfn main() {\n"), "block {i}: no fn main");
        assert!(b.trim_end().ends_with('}'), "block {i} does not end with main's brace");
    }
}
