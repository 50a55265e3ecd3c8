#!/usr/bin/env bash
# The leaf-spine bed (3 leaves x 2 hosts x 2 spines, host links 100 Mbit/s, cables 200) judged
# with default options: `pairwise -s 1M -n 8` (the ranks find the fabric routed and take 4
# traced connections a test), 10 times clean, 10 times with the cable leaf0 <-> spine1 at 60
# Mbit/s, 5 times with host mrls-h3's link at 60 Mbit/s; then the same with tracing off and the
# topology given (`--no-trace --topology`): 5 clean, 5 cable, 5 node. Each run's verdict lines go
# to OUT/RUN.txt, its --json to OUT/RUN.json.
# Run from the workspace root, as root, holding the machine lock:
#   flock -o /run/lock/meshrun-netns.lock docs/evidence/leafspine-defaults-2026-12-06/run.sh OUT_DIR
set -euo pipefail
out=$(realpath -m "${1:?output folder}")
mkdir -p "$out"
S=scripts/leafspine
D=${MR_LS_DIR:-/tmp/meshrun-leafspine}
printf 'leaf0: mrls-h[0-1]\nleaf1: mrls-h[2-3]\nleaf2: mrls-h[4-5]\n' >"$out/topology.txt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_rmaps_base_oversubscribe=1
pairwise() {
  local name=$1 code=0
  shift
  rm -f "/tmp/leafspine-defaults-$name.json"
  $S exec mrls-h0 "$PWD/target/debug/meshrun" launch --hostfile "$D/hostfile" --rsh-agent "$D/rsh-agent" \
    -- pairwise -s 1M -n 8 "$@" --json "/tmp/leafspine-defaults-$name.json" >"$out/$name.full" 2>&1 || code=$?
  cp "/tmp/leafspine-defaults-$name.json" "$out/$name.json" 2>/dev/null || true
  { grep -E '^ NIC choice|^# (SLOW|UNSTABLE|FAIL|PASS)|slow through|one of the paths' "$out/$name.full" || true
    echo "exit status $code"; } >"$out/$name.txt"
  rm -f "$out/$name.full"
}
block() {
  local tag=$1 clean=$2 cable=$3 node=$4
  shift 4
  for i in $(seq 1 "$clean"); do pairwise "$tag-clean-$i" "$@"; done
  $S shape-cable leaf0 spine1 60mbit
  for i in $(seq 1 "$cable"); do pairwise "$tag-cable-$i" "$@"; done
  $S shape-cable leaf0 spine1 200mbit
  $S shape-host mrls-h3 60mbit
  for i in $(seq 1 "$node"); do pairwise "$tag-node-$i" "$@"; done
  $S shape-host mrls-h3 100mbit
}
$S up >/dev/null
block default "${MR_LD_CLEAN:-10}" "${MR_LD_CABLE:-10}" "${MR_LD_NODE:-5}"
block untraced 5 5 5 --no-trace --topology "$out/topology.txt"
$S down >/dev/null
