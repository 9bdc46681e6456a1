//! AFL target: `roce_fuzz::cm` (see fuzz/README.md).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        roce_fuzz::cm(data);
    });
}
