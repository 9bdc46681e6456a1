#!/usr/bin/env bash
# Install roce-emu from this clone into PREFIX, no root needed for a PREFIX
# you own:
#
#   scripts/install.sh PREFIX        # e.g. ~/.local, /opt/roce-emu
#
# Builds `cargo build --release -p roce-cli -p roce-libibverbs -p roce-preload
# -p roce-rspreload` here, then installs PREFIX/bin/roce and, with `roce
# install --from`, the libraries into PREFIX/lib/roce-emu (libibverbs.so.1,
# librdmacm.so.1 -> it, libroce_preload.so, librspreload.so), where
# PREFIX/bin/roce's `roce run` finds them.
# The same result as `cargo install --path cli --root PREFIX` then
# `PREFIX/bin/roce install`, in one build. See docs/ci.md.
set -euo pipefail
[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: scripts/install.sh PREFIX" >&2; exit 2; }
command -v cargo >/dev/null || { echo "install.sh: cargo is not on PATH (install Rust: https://rustup.rs)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
prefix=$(cd "$1" && pwd)

# in the clone: its .cargo/config.toml (the drop-in's linker wrapper, which
# gives libibverbs.so.1 its symbol versions) is found from the working
# directory, not from --manifest-path
cd "$root"
cargo build --release --locked -p roce-cli -p roce-libibverbs -p roce-preload -p roce-rspreload
# the target directory cargo used (CARGO_TARGET_DIR, a config, or target/)
target=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
rel=${target:-$root/target}/release

mkdir -p "$prefix/bin"
# through a temporary name: a roce that is running keeps its file
cp "$rel/roce" "$prefix/bin/.roce.tmp.$$"
mv -f "$prefix/bin/.roce.tmp.$$" "$prefix/bin/roce"
"$prefix/bin/roce" install --from "$rel" --prefix "$prefix"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "(add $prefix/bin to PATH to type roce: export PATH=\"$prefix/bin:\$PATH\")" ;;
esac
