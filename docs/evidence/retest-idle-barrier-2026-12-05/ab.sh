# A/B: node at 85% on the quiet fabric, alternating two meshrun binaries, unloaded.
cd /work/main; . scripts/mpi-env
export MR_NETNS_DIR=/tmp/mr-ab
export OMPI_MCA_mpi_yield_when_idle=1
scripts/netns-cluster down >/dev/null 2>&1
scripts/netns-cluster up 6 1 >/dev/null || exit 1
scripts/netns-cluster shape-fabric 200mbit >/dev/null
scripts/netns-cluster shape-node mr-h2 170mbit >/dev/null
N=${N:-3}
for i in $(seq 1 $N); do
  for tag in $TAGS; do
    bin=/tmp/ab-bin-$tag
    scripts/netns-cluster exec mr-h0 $bin launch --hostfile $MR_NETNS_DIR/hostfile --rsh-agent $MR_NETNS_DIR/rsh-agent -- pairwise -s 1M -n 20 --timeout 60 --json - > /tmp/ab.$tag.$i.log 2>&1
    echo "$tag $i rc $? $(grep -o 'retests in [0-9.]* s' /tmp/ab.$tag.$i.log) $(grep -o "own noise, +-[0-9]*%" /tmp/ab.$tag.$i.log) $(grep -o '^# Sensitivity: a pair [0-9]*%' /tmp/ab.$tag.$i.log)" >> /tmp/ab.sum
  done
done
scripts/netns-cluster down >/dev/null 2>&1
echo done >> /tmp/ab.sum
