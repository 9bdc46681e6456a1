//! Link the cdylib as `libibverbs.so.1` with rdma-core's symbol versions,
//! and leave a `libibverbs.so.1` link beside the built `libibverbs.so` so
//! `LD_LIBRARY_PATH=target/release` finds it.

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
            let link = profile.join("libibverbs.so.1");
            if std::fs::symlink_metadata(&link).is_err() {
                // A dangling link until the library is linked; harmless.
                let _ = std::os::unix::fs::symlink("libibverbs.so", &link);
            }
        }
    }
}
