//! AFL target: `roce_fuzz::verbs` (see fuzz/README.md).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        roce_fuzz::verbs(data);
    });
}
