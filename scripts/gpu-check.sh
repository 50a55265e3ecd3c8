#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and driver (no network needed if Rust, the
# crates (cargo fetch) and Open MPI are already there). Prints every step; exits non-zero on the
# first failure.
#  1. the GPU and driver as nvidia-smi sees them;
#  2. the CUDA unit tests: the PTX reduction kernels against the CPU reduction, bit for bit, for
#     every type and op, plus error and staging checks (cargo test ... --ignored);
#  3. all_reduce with -g at 2 ranks sharing one GPU over TCP with --gpu-staging, printing the
#     nccl-tests table: float sum 8 B .. 32 MiB, then every type and op, 1 KiB .. 1 MiB;
#  4. where the machine has an RDMA device, all_reduce -g over GPUDirect RDMA (no staging).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
step() { echo; echo "== $*"; }
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

step "GPU and driver"
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: this machine has no NVIDIA driver"
nvidia-smi -L || fail "nvidia-smi -L"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv || true

step "toolchain and MPI"
command -v cargo >/dev/null || fail "cargo not found: install Rust (rustup) or carry a built tree"
if ! command -v mpirun >/dev/null; then
  if [ -x scripts/install-deps ]; then scripts/install-deps || true; fi
fi
command -v mpirun >/dev/null || fail "mpirun not found: apt-get install openmpi-bin libopenmpi-dev"
# shellcheck source=scripts/mpi-env
. scripts/mpi-env

step "build"
cargo build --release -p launcher || fail "cargo build"
M=target/release/meshrun

step "CUDA unit tests: reduction kernels vs the CPU, every type and op"
cargo test --release -p collectives --lib gpu::cuda -- --ignored --nocapture --test-threads=1 \
  || fail "CUDA unit tests"

# -b 8 times 4 while <= -e: 8 B, 32 B, ..., 32 MiB (the last size is hit).
step "all_reduce -g, 2 ranks sharing GPU 0, TCP, --gpu-staging: float sum 8 B .. 32 MiB"
timeout 600 mpirun --bind-to none --oversubscribe -np 2 "$M" all_reduce -g --gpu-staging --gpu-ids 0 \
  --transport tcp -b 8 -e 32M -f 4 -n 20 -w 5 || fail "all_reduce float sum"

step "all_reduce -g: every type and op, 1 KiB .. 1 MiB"
timeout 600 mpirun --bind-to none --oversubscribe -np 2 "$M" all_reduce -g --gpu-staging --gpu-ids 0 \
  --transport tcp -b 1K -e 1M -f 32 -d all -o all -n 2 || fail "all_reduce every type and op"

step "all_reduce -g over GPUDirect RDMA (verbs, no staging), if this machine has an RDMA device"
rdma_dev=$(find /sys/class/infiniband -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | head -n 1)
if [ -n "$rdma_dev" ]; then
  timeout 600 mpirun --bind-to none --oversubscribe -np 2 "$M" all_reduce -g --gpu-ids 0 \
    --transport verbs --ib-dev "$rdma_dev" -b 8 -e 32M -f 4 -n 20 -w 5 || fail "all_reduce over GPUDirect RDMA"
else
  echo "skipped: no RDMA device under /sys/class/infiniband, so GPUDirect RDMA cannot be checked here"
fi

echo
echo "gpu-check: all steps passed"
