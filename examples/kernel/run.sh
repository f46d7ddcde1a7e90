#!/usr/bin/env bash
# Builds the pageframe example kernel (release) and boots it in QEMU,
# showing its report. Installs what is missing when it can.
#
#   examples/kernel/run.sh [--mem SIZE] [--smp N] [--numa N] [words...]
#
# Words go to the kernel command line: mode words (every subsystem by
# default: selftest bench migrate unmovable thp-swap smp giant hotplug),
# seed=N. Examples:
#   examples/kernel/run.sh                     # 6 GiB guest, every mode
#   examples/kernel/run.sh --mem 2G selftest   # one mode, a smaller guest
#   examples/kernel/run.sh --smp 4 --numa 2    # 4 CPUs on two NUMA nodes
#   examples/kernel/run.sh --mem 512M debug    # the debugging tools
set -eu

here=$(cd "$(dirname "$0")" && pwd)
target=x86_64-unknown-none

while [ $# -gt 0 ]; do
    case $1 in
        --mem) export MEM=$2; shift 2 ;;
        --smp) export SMP=$2; shift 2 ;;
        --numa) export NUMA=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust from https://rustup.rs, then rerun." >&2
    exit 127
fi
# A first cargo call lets rustup install the pinned toolchain if needed.
# rust-toolchain.toml lists the target, but older rustup versions do not add
# targets to an already-installed toolchain, so check.
(cd "$here" && cargo --version >/dev/null)
if command -v rustup >/dev/null 2>&1 && ! (cd "$here" && rustup target list --installed) | grep -qx "$target"; then
    (cd "$here" && rustup target add "$target")
fi

cd "$here"
# qemu.sh is also the cargo runner for $target (.cargo/config.toml at the
# repository root); calling it directly keeps options like --mem simple.
# The `debug` mode needs the kernel built with its debugging tools: in a
# target directory of its own, so that the default build stays as it is.
features=()
dir=${CARGO_TARGET_DIR:-$here/target}
case $dir in /*) ;; *) dir=$here/$dir ;; esac
for w in "$@"; do
    if [ "$w" = debug ]; then
        features=(--features debug)
        dir=$dir/debug-tools
    fi
done
cargo build --release --target "$target" --target-dir "$dir" "${features[@]}"
# The default run shows every subsystem, 1 GiB pages and hotplug included:
# a 6 GiB guest.
export MEM=${MEM:-6G}
exec "$here/qemu.sh" "$dir/$target/release/pageframe-kernel" "$@"
