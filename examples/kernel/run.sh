#!/usr/bin/env bash
# Builds the pageframe example kernel (release) and boots it in QEMU,
# showing its report. Installs what is missing when it can.
#
#   examples/kernel/run.sh [--mem SIZE] [--smp N] [words...]
#
# Words go to the kernel command line: selftest, bench (both by default),
# seed=N. Examples:
#   examples/kernel/run.sh                     # 2 GiB guest, self-test + bench
#   examples/kernel/run.sh --mem 6G selftest   # RAM above 4 GiB
set -eu

here=$(cd "$(dirname "$0")" && pwd)
target=x86_64-unknown-none

while [ $# -gt 0 ]; do
    case $1 in
        --mem) export MEM=$2; shift 2 ;;
        --smp) export SMP=$2; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust from https://rustup.rs, then rerun." >&2
    exit 127
fi
# rust-toolchain.toml lists the target; older rustup versions do not add
# targets to an already-installed toolchain, so check.
if command -v rustup >/dev/null 2>&1 && ! (cd "$here" && rustup target list --installed) | grep -qx "$target"; then
    (cd "$here" && rustup target add "$target")
fi

cd "$here"
# The runner for $target (.cargo/config.toml at the repository root) is
# qemu.sh; call it directly too, so this works from any checkout layout.
cargo build --release --target "$target"
dir=${CARGO_TARGET_DIR:-$here/target}
case $dir in /*) ;; *) dir=$here/$dir ;; esac
exec "$here/qemu.sh" "$dir/$target/release/pageframe-kernel" "$@"
