#!/bin/bash
B=/work/main/target/debug/meshrun
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_pml=ob1 OMPI_MCA_rmaps_base_oversubscribe=1 MESHRUN_FAULT="stop:rank=1:phase=bootstrap"
for i in $(seq 1 ${1:-20}); do
  s=$(date +%s.%N)
  mpirun --bind-to none -np 4 -x MESHRUN_FAULT $B all_reduce -b 64K -e 64K -n 5 -w 1 -T 3 --transport tcp > /tmp/repro-$i.log 2>&1 &
  mp=$!
  for t in $(seq 1 40); do sleep 0.5; kill -0 $mp 2>/dev/null || break; done
  if kill -0 $mp 2>/dev/null; then
    echo "run $i: HUNG"; ps -o pid,stat,wchan:30,cmd --ppid $mp; pstree -p $mp
    gdb -p $mp -batch -ex "thread apply all bt" > /tmp/hang-$i.gdb 2>&1
    kill -9 $mp; pkill -9 -f "meshrun all_reduce -b 64K -e 64K -n 5 -w 1 -T 3"
  else
    wait $mp; echo "run $i: rc=$? $(echo "$(date +%s.%N) - $s" | bc)"
  fi
done
