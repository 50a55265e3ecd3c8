#!/usr/bin/env bash
# The manual run kept in this folder: the default leaf-spine bed (3 leaves x 2 hosts x 2 spines),
# `pairwise -q 4` over TCP on the clean fabric, then with the cable leaf0 <-> spine1 at 60 Mbit/s.
# Run from the workspace root, as root, holding the machine lock:
#   flock -o /run/lock/meshrun-netns.lock docs/evidence/leafspine-paths-2026-12-06/run.sh OUT_DIR
set -euo pipefail
out=${1:?output folder}
mkdir -p "$out"
S=scripts/leafspine
D=${MR_LS_DIR:-/tmp/meshrun-leafspine}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_rmaps_base_oversubscribe=1
pairwise() {
  rm -f "/tmp/leafspine-$1.json"
  $S exec mrls-h0 "$PWD/target/debug/meshrun" launch --hostfile "$D/hostfile" --rsh-agent "$D/rsh-agent" \
    -- pairwise --transport tcp -q 4 -s 1M -n 8 --json "/tmp/leafspine-$1.json" || echo "exit status $?"
  cp "/tmp/leafspine-$1.json" "$out/pairwise-q4-$1.json"
}
$S up >/dev/null
pairwise clean >"$out/pairwise-q4-clean.txt" 2>&1
$S shape-cable leaf0 spine1 60mbit
pairwise cable-leaf0-spine1-60mbit >"$out/pairwise-q4-cable-leaf0-spine1-60mbit.txt" 2>&1
$S down >/dev/null
