#!/usr/bin/env bash
# Boots a built pageframe kernel ELF in QEMU and turns its verdict into an
# exit status. Also the cargo runner for x86_64-unknown-none
# (.cargo/config.toml), so `cargo run --target x86_64-unknown-none` boots.
#
#   qemu.sh KERNEL.elf [kernel command-line words...]
#
# Environment: MEM (guest RAM, default 2G), SMP (CPUs, default 2),
# NUMA (NUMA nodes, default none: RAM and CPUs split evenly, in order),
# TIMEOUT (seconds, default 300), CPU (-cpu, default qemu64,+pdpe1gb),
# MACHINE (-machine, default q35), QEMU_EXTRA (more QEMU arguments).
# Exit: 0 pass, 1 fail (kernel verdict, panic, exception or triple fault),
# 124 time-out, 127 QEMU missing and not installable here.
set -u

if [ $# -lt 1 ]; then
    echo "usage: $0 KERNEL.elf [kernel command-line words...]" >&2
    exit 2
fi
elf=$1
shift

install_cmd="apt-get install -y --no-install-recommends qemu-system-x86"
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "qemu-system-x86_64 not found: installing it ($install_cmd)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive $install_cmd >&2 || exit 127
    else
        echo "qemu-system-x86_64 not found. Install it with:" >&2
        echo "    sudo apt-get update && sudo $install_cmd" >&2
        exit 127
    fi
fi

mem=${MEM:-2G}
smp=${SMP:-2}
limit=${TIMEOUT:-300}
numa_args=()
nodes=${NUMA:-0}
if [ "$nodes" -gt 0 ]; then
    case $mem in
        *G|*g) mib=$(( ${mem%?} * 1024 )) ;;
        *M|*m) mib=${mem%?} ;;
        *) mib=$mem ;;
    esac
    if [ $(( mib % nodes )) -ne 0 ] || [ $(( smp % nodes )) -ne 0 ]; then
        echo "NUMA=$nodes: -m $mem and -smp $smp must split evenly" >&2
        exit 2
    fi
    for ((i = 0; i < nodes; i++)); do
        first=$(( i * smp / nodes ))
        numa_args+=(-object "memory-backend-ram,id=m$i,size=$(( mib / nodes ))M"
            -numa "node,nodeid=$i,cpus=$first-$(( first + smp / nodes - 1 )),memdev=m$i")
    done
fi
echo "booting $elf: -m $mem -smp $smp, $nodes NUMA nodes, cmdline \"$*\"" >&2
start=$(date +%s.%N)
# stdin from /dev/null: `-serial stdio` fails when stdin is closed (CI).
# shellcheck disable=SC2086
timeout "$limit" qemu-system-x86_64 -accel tcg -machine "${MACHINE:-q35}" -cpu "${CPU:-qemu64,+pdpe1gb}" \
    -m "$mem" -smp "$smp" "${numa_args[@]}" -kernel "$elf" -append "$*" \
    -serial stdio -display none -monitor none -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 ${QEMU_EXTRA:-} </dev/null
status=$?
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')

case $status in
    33) echo "kernel passed (QEMU status 33) in ${secs} s" >&2; exit 0 ;;
    35) echo "kernel FAILED (QEMU status 35) in ${secs} s" >&2; exit 1 ;;
    124) echo "kernel timed out after ${limit} s" >&2; exit 124 ;;
    0) echo "QEMU exited 0: the guest reset (triple fault?), counted as failure" >&2; exit 1 ;;
    *) echo "QEMU failed with status $status" >&2; exit "$status" ;;
esac
