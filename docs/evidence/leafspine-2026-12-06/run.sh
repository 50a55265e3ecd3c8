#!/usr/bin/env bash
# The manual run kept in this folder: the bed up, a pairwise run on the clean fabric, traces of
# connections from mrls-h0 to mrls-h4 (leaf0 -> leaf2) beside the leaf's own choice of spine,
# then the cable leaf0 <-> spine1 at 60 Mbit/s and pairwise again. Run from the workspace root,
# as root, holding the machine lock:
#   flock /run/lock/meshrun-netns.lock docs/evidence/leafspine-2026-12-06/run.sh OUT_DIR
set -euo pipefail
out=${1:?output folder}
mkdir -p "$out"
S=scripts/leafspine
T=$PWD/target/debug/examples/trace
D=${MR_LS_DIR:-/tmp/meshrun-leafspine}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_rmaps_base_oversubscribe=1
pairwise() {
  rm -f "/tmp/leafspine-$1.json"
  $S exec mrls-h0 "$PWD/target/debug/meshrun" launch --hostfile "$D/hostfile" --rsh-agent "$D/rsh-agent" \
    -- pairwise -s 1M -n 20 --json "/tmp/leafspine-$1.json" || echo "exit status $?"
  cp "/tmp/leafspine-$1.json" "$out/pairwise-$1.json"
}
{
  $S up
  for ns in mrls-leaf0 mrls-spine0; do echo "== $ns"; ip -n "$ns" route; done
  echo "== sysctls of mrls-leaf0"
  ip netns exec mrls-leaf0 sysctl net.ipv4.fib_multipath_hash_policy net.ipv4.fib_multipath_hash_fields net.ipv4.ip_forward \
    net.ipv4.conf.all.rp_filter net.ipv4.icmp_ratelimit net.ipv4.icmp_errors_use_inbound_ifaddr
} >"$out/bed.txt" 2>&1
pairwise clean >"$out/pairwise-clean.txt" 2>&1
{
  $S exec mrls-h4 "$T" --listen 5000 --for 30 &
  sleep 0.5
  for p in $(seq 40000 40007); do
    echo "== source port $p: leaf0's kernel sends it over $($S spine-of mrls-h0 mrls-h4 "$p" 5000)"
    $S exec mrls-h0 "$T" 10.80.2.10:5000 --sport "$p" --connect
  done
  echo "== no connection behind the 5-tuple (the far end answers with a reset)"
  $S exec mrls-h0 "$T" 10.80.2.10:5999 --sport 40100
  kill %1 2>/dev/null || true
  wait || true
} >"$out/traces.txt" 2>&1
$S shape-cable leaf0 spine1 60mbit
pairwise cable-leaf0-spine1-60mbit >"$out/pairwise-cable-leaf0-spine1-60mbit.txt" 2>&1
{
  echo "== which spine leaf0 and leaf1 send each measured 5-tuple over is not known to this run (pairwise"
  echo "   does not trace yet); the cable's egress counters say how much went over it:"
  ip netns exec mrls-leaf0 tc -s class show dev s1
  ip netns exec mrls-leaf0 tc -s class show dev s0
} >"$out/cable-counters.txt" 2>&1
$S down
