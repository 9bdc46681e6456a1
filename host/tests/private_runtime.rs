//! `cargo test` keeps the devices' published counters out of the user's
//! runtime directory (`.cargo/config.toml` sets ROCE_EMU_RUNTIME_DIR under
//! target/), so a later `roce stats` does not list the suite's devices.

use roce_host::publish::runtime_dir;

#[test]
fn tests_publish_under_target_not_the_users_runtime_dir() {
    let d = runtime_dir();
    let target = std::path::Path::new(crate::CRATE_DIR).join("../target");
    let target = target.canonicalize().unwrap_or(target);
    assert!(
        d.starts_with(&target)
            || std::env::var_os("ROCE_EMU_RUNTIME_DIR").is_some_and(|v| {
                // someone set their own on purpose: then it is theirs
                !v.to_string_lossy().ends_with("target/roce-emu-runtime")
            }),
        "runtime dir {} is not under {}",
        d.display(),
        target.display()
    );
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        assert!(!d.starts_with(x), "{}", d.display());
    }
}
