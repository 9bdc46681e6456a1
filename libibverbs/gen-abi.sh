#!/bin/sh
# Regenerate src/abi.rs from the host's <infiniband/verbs.h> (Debian:
# apt-get install libibverbs-dev bindgen clang). The committed abi.rs was made
# from rdma-core 44's header; tests/layout.rs checks it against the header.
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
echo '#include <infiniband/verbs.h>' > "$tmp/w.h"
{
  echo '//! The libibverbs ABI: every struct, union, enum and constant of'
  echo '//! `<infiniband/verbs.h>` (rdma-core 44) as `#[repr(C)]` Rust, generated'
  echo '//! by bindgen with `gen-abi.sh`. Do not edit by hand; `tests/layout.rs`'
  echo '//! compares sizes and offsets with the C header.'
  echo '#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code, missing_docs, clippy::all)]'
  bindgen "$tmp/w.h" --allowlist-type 'ibv_.*|verbs_context|_compat_ibv_port_attr' \
    --allowlist-var 'IBV_.*' --no-layout-tests --no-doc-comments --size_t-is-usize --use-core \
    --no-prepend-enum-name --default-enum-style consts -- 2>/dev/null \
    | grep -v '^/\* automatically generated'
} > src/abi.rs
rm -rf "$tmp"
