#!/usr/bin/env bash
# The leaf-spine bed's verdict, repeated: the default bed (3 leaves x 2 hosts x 2 spines, host
# links 100 Mbit/s, cables 200), `pairwise --transport tcp -q 4 -s 1M -n 8` 10 times clean, 5
# times with the cable leaf0 <-> spine1 at 60 Mbit/s, 5 times with host mrls-h3's link at 60
# Mbit/s (a slow node on the same fabric). Each run's verdict lines go to OUT/RUN.txt, its
# --json to OUT/RUN.json. MR_LV_ONLY=cable runs the cable block alone.
# Run from the workspace root, as root, holding the machine lock:
#   flock -o /run/lock/meshrun-netns.lock docs/evidence/leafspine-verdict-2026-12-06/run.sh OUT_DIR
set -euo pipefail
out=${1:?output folder}
mkdir -p "$out"
S=scripts/leafspine
D=${MR_LS_DIR:-/tmp/meshrun-leafspine}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_rmaps_base_oversubscribe=1
pairwise() {
  local code=0
  rm -f "/tmp/leafspine-verdict-$1.json"
  $S exec mrls-h0 "$PWD/target/debug/meshrun" launch --hostfile "$D/hostfile" --rsh-agent "$D/rsh-agent" \
    -- pairwise --transport tcp -q 4 -s 1M -n 8 --json "/tmp/leafspine-verdict-$1.json" >"$out/$1.full" 2>&1 || code=$?
  cp "/tmp/leafspine-verdict-$1.json" "$out/$1.json" 2>/dev/null || true
  { grep -E '^# (SLOW|UNSTABLE|FAIL|PASS)|slow through' "$out/$1.full" || true; echo "exit status $code"; } >"$out/$1.txt"
  rm -f "$out/$1.full"
}
$S up >/dev/null
only=${MR_LV_ONLY:-}
if [ -z "$only" ]; then
  for i in $(seq 1 10); do pairwise "clean-$i"; done
fi
$S shape-cable leaf0 spine1 60mbit
for i in $(seq 1 "${MR_LV_CABLE_RUNS:-5}"); do pairwise "cable-$i"; done
if [ -z "$only" ]; then
  $S shape-cable leaf0 spine1 200mbit
  $S shape-host mrls-h3 60mbit
  for i in $(seq 1 5); do pairwise "node-$i"; done
fi
$S down >/dev/null
