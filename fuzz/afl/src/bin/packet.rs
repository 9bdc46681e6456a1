//! AFL target: `roce_fuzz::packet` (see fuzz/README.md).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        roce_fuzz::packet(data);
    });
}
