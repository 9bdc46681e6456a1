//! AFL target: `roce_fuzz::device` (see fuzz/README.md).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        roce_fuzz::device(data);
    });
}
