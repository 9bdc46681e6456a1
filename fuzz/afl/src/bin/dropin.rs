//! AFL target: `roce_fuzz::dropin` (see fuzz/README.md).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        roce_fuzz::dropin(data);
    });
}
