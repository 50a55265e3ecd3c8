#!/usr/bin/env bash
# The GPU check, run from a bundle made by scripts/gpu-bundle (copied in as check.sh): only the
# bundle's files, the NVIDIA driver and, for the reference bandwidth, PyTorch where present.
# Every step runs (with a time limit) and is reported; the last line sums them up:
#   gpu-check: N passed, M failed[, K failed for want of a GPU]
# Exit 0 only when everything passed. QUICK=1: small sizes only (the rehearsal without a GPU).
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
. "$B/env.sh"
QUICK=${QUICK:-0}
pass=0 fail=0 nogpu=0
failures=()
have_gpu=1
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  have_gpu=0
fi

# step NAME GPU(0|1) LIMIT CMD...: run, show the output, count it.
step() {
  local name=$1 gpu=$2 limit=$3; shift 3
  echo
  echo "== $name"
  local log rc
  log=$(mktemp)
  timeout "$limit" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    pass=$((pass + 1))
    echo "-- passed: $name"
  elif [ "$gpu" = 1 ] && [ "$have_gpu" = 0 ]; then
    nogpu=$((nogpu + 1))
    echo "-- failed for want of a GPU (no GPU: nvidia-smi finds none): $name (exit $rc)"
    failures+=("$name: no GPU")
  else
    fail=$((fail + 1))
    [ "$rc" -eq 124 ] && echo "-- timed out after $limit s"
    echo "-- FAILED: $name (exit $rc)"
    failures+=("$name: exit $rc")
  fi
  rm -f "$log"
}

M=$B/bin/meshrun
# Both ranks on this machine: loopback, whether or not the host name resolves (no network there).
MPIRUN=(mpirun --bind-to none -np 2)
step "GPU and driver (nvidia-smi)" 1 60 sh -c 'nvidia-smi -L && nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv'
step "meshrun --version from the bundle" 0 60 "$M" --version
step "Open MPI from the bundle: 2 ranks, host buffers, all_reduce 8 B .. 1 MiB, verified" 0 300 \
  "${MPIRUN[@]}" "$M" all_reduce --transport tcp --tcp-if lo -b 8 -e 1M -f 8 -n 5 -w 1
step "CUDA unit tests: PTX reduction kernels against the CPU, every type and op" 1 600 \
  "$B/bin/collectives-tests" gpu::cuda --ignored --test-threads=1
if [ "$QUICK" = 1 ]; then
  small=(-b 8 -e 64K -f 16 -n 3 -w 1)
  large=()
else
  small=(-b 8 -e 16M -f 4 -n 20 -w 5)
  large=(-b 32M -e 1G -f 4 -n 5 -w 2)
fi
for c in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  step "$c -g --gpu-staging, 2 ranks sharing GPU 0 over TCP, ${small[1]} B .. ${small[3]}, verified" 1 600 \
    "${MPIRUN[@]}" "$M" "$c" -g --gpu-staging --gpu-ids 0 --transport tcp --tcp-if lo "${small[@]}"
  if [ ${#large[@]} -gt 0 ]; then
    step "$c -g --gpu-staging, 2 ranks, ${large[1]} .. ${large[3]}, verified" 1 600 \
      "${MPIRUN[@]}" "$M" "$c" -g --gpu-staging --gpu-ids 0 --transport tcp --tcp-if lo "${large[@]}"
  fi
done
step "all_reduce -g, every type and op at small sizes" 1 600 \
  "${MPIRUN[@]}" "$M" all_reduce -g --gpu-staging --gpu-ids 0 --transport tcp --tcp-if lo -b 8 -e 64K -f 64 -d all -o all -n 2 -w 1
step "reference: device-to-device copy bandwidth with PyTorch (1 GiB, 20 copies)" 1 300 python3 -c '
import sys
try:
    import torch
except ImportError:
    sys.exit("no PyTorch here: no reference figure")
if not torch.cuda.is_available():
    sys.exit("no GPU: torch.cuda.is_available() is False")
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
for _ in range(3):
    b.copy_(a)
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20):
    b.copy_(a)
e.record()
torch.cuda.synchronize()
ms = s.elapsed_time(e) / 20
print(f"{torch.cuda.get_device_name(0)}: device-to-device copy of 1 GiB: {ms:.3f} ms, {n / ms / 1e6:.1f} GB/s (read + write: {2 * n / ms / 1e6:.1f} GB/s)")
'
echo
for f in "${failures[@]}"; do echo "gpu-check: failed: $f"; done
summary="gpu-check: $pass passed, $fail failed"
[ "$nogpu" -gt 0 ] && summary="$summary, $nogpu failed for want of a GPU"
echo "$summary"
[ "$fail" -eq 0 ] && [ "$nogpu" -eq 0 ]
