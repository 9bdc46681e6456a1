//! AFL target: `roce_fuzz::misuse` (see fuzz/README.md).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        roce_fuzz::misuse(data);
    });
}
