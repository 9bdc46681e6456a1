//! Link the cdylib as `libibverbs.so.1` with rdma-core's symbol versions,
//! and leave `libibverbs.so.1` and `librdmacm.so.1` links beside the built
//! `libibverbs.so` so `LD_LIBRARY_PATH=target/release` finds both.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out: the profile
    // directory is three levels up.
    if let Ok(out) = std::env::var("OUT_DIR") {
        let out = std::path::PathBuf::from(out);
        if let Some(profile) = out.ancestors().nth(3) {
            // librdmacm.so.1 is the same file: the dynamic linker maps it
            // once (same device and inode), so a program linked with both
            // libraries gets one copy with one global state.
            for name in ["libibverbs.so.1", "librdmacm.so.1"] {
                let link = profile.join(name);
                if std::fs::symlink_metadata(&link).is_err() {
                    // A dangling link until the library is linked; harmless.
                    let _ = std::os::unix::fs::symlink("libibverbs.so", &link);
                }
            }
        }
    }
}
