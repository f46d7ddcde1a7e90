#!/usr/bin/env bash
# Builds the bootloader_api example kernel, wraps it into a UEFI disk image
# (the bootloader crate, 0.11) and boots it in QEMU with OVMF. Installs what
# is missing when it can (root + apt for QEMU and OVMF; rustup for the
# toolchains).
#
#   examples/kernel-bootloader/run.sh [--mem SIZE]
#
# Environment: TIMEOUT (seconds, default 300).
# Exit: 0 pass, 1 fail, 124 time-out, 127 QEMU or OVMF missing.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
target=x86_64-unknown-none
# The nightly bootloader 0.11.10's build script needs: image/rust-toolchain.toml's.
loader_toolchain=$(sed -n 's/^channel = "\(.*\)"/\1/p' "$here/image/rust-toolchain.toml")
mem=2G
while [ $# -gt 0 ]; do
    case $1 in
        --mem) mem=$2; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

packages=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || packages+=(qemu-system-x86)
ovmf=/usr/share/ovmf/OVMF.fd
[ -f "$ovmf" ] || packages+=(ovmf)
if [ ${#packages[@]} -gt 0 ]; then
    install_cmd="apt-get install -y --no-install-recommends ${packages[*]}"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing: $install_cmd" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive $install_cmd >&2 || exit 127
    else
        echo "missing ${packages[*]}; install with: sudo apt-get update && sudo $install_cmd" >&2
        exit 127
    fi
fi

(cd "$here" && cargo --version >/dev/null)
if ! (cd "$here" && rustup target list --installed) | grep -qx "$target"; then
    (cd "$here" && rustup target add "$target")
fi
rustup run "$loader_toolchain" rustc --version >/dev/null 2>&1 ||
    rustup toolchain install "$loader_toolchain" --profile minimal --component rust-src

# The kernel builds on stable; the image tool on the loader's nightly.
(cd "$here" && cargo build --release --target "$target")
dir=${CARGO_TARGET_DIR:-$here/target}
case $dir in /*) ;; *) dir=$here/$dir ;; esac
elf=$dir/$target/release/pageframe-bootloader-kernel
img=$dir/pageframe-bootloader-kernel-uefi.img
(cd "$here/image" && cargo "+$loader_toolchain" run --release -q -- "$elf" "$img")

limit=${TIMEOUT:-300}
echo "booting $img with OVMF: -m $mem" >&2
set +e
# OVMF draws its boot menu with ANSI escapes on the serial port: strip them.
timeout "$limit" qemu-system-x86_64 -accel tcg -machine q35 -cpu qemu64 -m "$mem" \
    -bios "$ovmf" -drive "format=raw,file=$img" \
    -serial stdio -display none -monitor none -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null |
    sed -u -e 's/\x1b\[[0-9;?=]*[A-Za-z]//g' -e 's/\r//g' | grep -v '^BdsDxe: \|^$'
status=${PIPESTATUS[0]}
case $status in
    33) echo "kernel passed (QEMU status 33)" >&2; exit 0 ;;
    35) echo "kernel FAILED (QEMU status 35)" >&2; exit 1 ;;
    124) echo "kernel timed out after ${limit} s" >&2; exit 124 ;;
    0) echo "QEMU exited 0: the guest reset, counted as failure" >&2; exit 1 ;;
    *) echo "QEMU failed with status $status" >&2; exit "$status" ;;
esac
