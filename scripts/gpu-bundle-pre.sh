#!/usr/bin/env bash
# The GPU check's preconditions, run from a bundle made by scripts/gpu-bundle (copied in as
# pre.sh; check.sh runs it, each with a time limit, before anything else):
#
#   pre.sh glibc          this machine's glibc against the bundle's floor (GLIBC_FLOOR, worked out
#                         from every bundled binary's and library's symbol versions when the bundle
#                         was built). Uses only the machine's own tools, never the bundle's libraries:
#                         on an older glibc even `meshrun --version` fails (libevent needs arc4random).
#   pre.sh cuda           the driver's CUDA version (cuDriverGetVersion through bin/cuda-probe, else
#                         nvidia-smi's) against what the shipped PTX needs (CUDA_FLOOR, from the PTX
#                         ISA version of reduce.ptx), and GPU 0's compute capability against its target.
#   pre.sh compute-mode   GPU 0's compute mode: the check runs two ranks on GPU 0, so Exclusive_Process
#                         or Prohibited cannot work.
#   pre.sh nvidia-smi     not a precondition: what nvidia-smi says, in full, for the log.
#
# The last line says the result, and is what check.sh shows: "OK: ...", "FAIL: ..." (exit 1) or
# "NOGPU: ..." (exit 3: no NVIDIA driver or GPU here at all, as in the rehearsal).
set -uo pipefail
export LC_ALL=C
B=$(cd "$(dirname "$0")" && pwd)

ok() { echo "OK: $*"; exit 0; }
bad() { echo "FAIL: $*"; exit 1; }
nogpu() { echo "NOGPU: $*"; exit 3; }
isver() { [[ $1 =~ ^[0-9]+(\.[0-9]+)*$ ]]; }
# vge A B: dotted version A >= B.
vge() {
  local IFS=. i x y
  local -a a b
  read -r -a a <<<"$1"
  read -r -a b <<<"$2"
  for ((i = 0; i < ${#a[@]} || i < ${#b[@]}; i++)); do
    x=${a[i]:-0} y=${b[i]:-0}
    ((10#$x > 10#$y)) && return 0
    ((10#$x < 10#$y)) && return 1
  done
  return 0
}
have() { command -v "$1" >/dev/null 2>&1; }
# smi ARGS...: nvidia-smi with its own limit (it hangs on a GPU that has fallen off the bus).
smi() { timeout -k 2 20 nvidia-smi "$@" 2>&1; }

# What bin/cuda-probe says (sets PROBE_RC and PROBE_OUT), once.
probe() {
  if [ -z "${PROBE_RC:-}" ]; then
    PROBE_OUT=$(timeout -k 2 20 "$B/bin/cuda-probe" 2>&1)
    PROBE_RC=$?
    echo "$ cuda-probe (cuDriverGetVersion, cuInit, cuDeviceGetAttribute; exit $PROBE_RC)"
    echo "$PROBE_OUT"
  fi
}
pkey() { sed -n "s/^$1=//p" <<<"$PROBE_OUT" | head -n 1; }
# GPUs nvidia-smi lists (sets SMI_L, SMI_N).
smi_list() {
  SMI_L="" SMI_N=0
  have nvidia-smi || return 0
  SMI_L=$(smi -L)
  echo "$ nvidia-smi -L"
  echo "$SMI_L"
  SMI_N=$(grep -c '^GPU [0-9]' <<<"$SMI_L" || true)
}

pre_glibc() {
  local floor here="" how="" f need line n=0 names=""
  [ -r "$B/GLIBC_FLOOR" ] || bad "the bundle has no GLIBC_FLOOR file: rebuild it with scripts/gpu-bundle"
  floor=$(head -n 1 "$B/GLIBC_FLOOR")
  isver "$floor" || bad "GLIBC_FLOOR holds '$floor', not a version: rebuild the bundle with scripts/gpu-bundle"
  here=$(getconf GNU_LIBC_VERSION 2>/dev/null) && here=${here#glibc } && how="getconf GNU_LIBC_VERSION"
  if ! isver "$here"; then
    here=$(ldd --version 2>/dev/null | head -n 1 | awk '{print $NF}') && how="ldd --version"
  fi
  if ! isver "$here"; then
    for f in /lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/libc.so.6 /lib64/libc.so.6; do
      [ -x "$f" ] || continue
      here=$("$f" --version 2>/dev/null | head -n 1 | grep -o '[0-9]\+\.[0-9]\+' | tail -n 1) && how="$f --version"
      isver "$here" && break
    done
  fi
  isver "$here" || bad "cannot tell this machine's glibc version (getconf GNU_LIBC_VERSION, ldd --version): not a glibc system? The bundle needs glibc $floor or newer"
  echo "glibc here: $here ($how); the bundle needs: $floor (GLIBC_FLOOR)"
  vge "$here" "$floor" && ok "glibc $here here, the bundle needs $floor or newer"
  # Name what needs more than this machine has (GLIBC_NEEDS: "VERSION FILE" per bundled file).
  if [ -r "$B/GLIBC_NEEDS" ]; then
    while read -r need f; do
      isver "$need" || continue
      vge "$here" "$need" && continue
      n=$((n + 1))
      [ "$n" -le 3 ] && names="$names${names:+, }$f (GLIBC_$need)"
    done <"$B/GLIBC_NEEDS"
    [ "$n" -gt 3 ] && names="$names and $((n - 3)) more"
  fi
  line="glibc $here here, but the bundle needs $floor or newer${names:+: $names}"
  bad "$line; nothing in it can load (not even meshrun --version): build the bundle on a machine with glibc $here or older, or run it in a container with glibc $floor or newer"
}

pre_cuda() {
  local floor ptx_isa ptx_target want_cc v="" from="" smi_v="" drv="" cc="" d0
  { [ -r "$B/CUDA_FLOOR" ] && [ -r "$B/PTX" ]; } || bad "the bundle has no CUDA_FLOOR or PTX file: rebuild it with scripts/gpu-bundle"
  floor=$(head -n 1 "$B/CUDA_FLOOR")
  read -r ptx_isa ptx_target <"$B/PTX"
  isver "$floor" || bad "CUDA_FLOOR holds '$floor', not a version: rebuild the bundle"
  echo "the shipped PTX: ISA $ptx_isa, target $ptx_target: JIT needs a driver for CUDA $floor or newer"
  probe
  smi_list
  if [ "$SMI_N" -gt 0 ]; then
    echo "$ nvidia-smi -q (CUDA and driver version)"
    smi_v=$(smi -q | sed -n 's/^CUDA Version *: *//p' | head -n 1)
    drv=$(smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
    echo "CUDA Version: ${smi_v:-?}; driver: ${drv:-?}"
  fi
  if [ "$PROBE_RC" -eq 3 ] && [ "$SMI_N" -eq 0 ]; then
    if have nvidia-smi; then
      nogpu "no NVIDIA driver here: libcuda.so.1 cannot be loaded and nvidia-smi lists no GPU${SMI_L:+ ($(head -n 1 <<<"$SMI_L"))}"
    fi
    nogpu "no NVIDIA driver here: libcuda.so.1 cannot be loaded and nvidia-smi is not installed"
  fi
  v=$(pkey driver_cuda)
  if [[ $v =~ ^([0-9]+) ]]; then
    v=${BASH_REMATCH[1]}
    v="$((v / 1000)).$(((v % 1000) / 10))" from="cuDriverGetVersion"
  elif isver "$smi_v"; then
    v=$smi_v from="nvidia-smi"
  else
    bad "cannot tell the driver's CUDA version: cuda-probe says: $(pkey error); nvidia-smi says: ${smi_v:-nothing}"
  fi
  vge "$v" "$floor" ||
    bad "the driver supports CUDA $v ($from${drv:+, driver $drv}), but the shipped PTX (ISA $ptx_isa) needs CUDA $floor or newer to JIT (minor version compatibility does not cover PTX): update the NVIDIA driver"
  if [ "$PROBE_RC" -ne 0 ]; then
    bad "the driver reports CUDA $v ($from) but cuda-probe fails: $(pkey error); meshrun -g loads libcuda.so.1 the same way, so every GPU step would fail (in a container: the driver's libcuda must be mounted, e.g. NVIDIA_DRIVER_CAPABILITIES=compute,utility)"
  fi
  d0=$(pkey device0)
  cc=$(sed -n 's/.*;cc=\([0-9.]*\);.*/\1/p' <<<"$d0")
  want_cc=${ptx_target#sm_}
  want_cc="${want_cc:0:${#want_cc}-1}.${want_cc: -1}"
  if isver "$cc" && isver "$want_cc" && ! vge "$cc" "$want_cc"; then
    bad "GPU 0 (${d0%%;*}) has compute capability $cc, below the PTX target $ptx_target"
  fi
  local gpu0
  gpu0=$(sed -E 's/^name=([^;]*);cc=([^;]*);compute_mode=[^;]*;pci=(.*)$/\1, compute capability \2, \3/' <<<"$d0")
  ok "driver supports CUDA $v ($from${drv:+, driver $drv}); PTX ISA $ptx_isa needs $floor; GPU 0: $gpu0"
}

pre_compute_mode() {
  local d0 mode_cuda="" mode_smi="" pci="" rows row sel="" name=""
  probe
  smi_list
  d0=$(pkey device0)
  if [ -n "$d0" ]; then
    mode_cuda=$(sed -n 's/.*;compute_mode=\([A-Za-z_]*\);.*/\1/p' <<<"$d0")
    pci=$(sed -n 's/.*;pci=\([0-9a-fA-F:.]*\).*/\1/p' <<<"$d0")
    name=${d0%%;*} name=${name#name=}
  fi
  if [ "$SMI_N" -gt 0 ]; then
    echo "$ nvidia-smi --query-gpu=index,pci.bus_id,name,compute_mode --format=csv,noheader"
    rows=$(smi --query-gpu=index,pci.bus_id,name,compute_mode --format=csv,noheader)
    echo "$rows"
    # GPU 0 as CUDA numbers it (the probe's PCI address), else nvidia-smi's index 0 or the first
    # of CUDA_VISIBLE_DEVICES.
    while IFS= read -r row; do
      local idx bus
      idx=${row%%,*}
      bus=$(cut -d, -f2 <<<"$row" | tr -d ' ' | tr 'A-F' 'a-f')
      if [ -n "$pci" ]; then
        [ "${bus#*:}" = "$(tr 'A-F' 'a-f' <<<"${pci#*:}")" ] && sel=$row
      elif [ "$idx" = "${CUDA_VISIBLE_DEVICES%%,*}" ] || { [ -z "${CUDA_VISIBLE_DEVICES:-}" ] && [ "$idx" = 0 ]; }; then
        sel=$row
      fi
    done <<<"$rows"
    if [ -n "$sel" ]; then
      mode_smi=$(awk -F', *' '{print $4}' <<<"$sel")
      [ -n "$name" ] || name=$(awk -F', *' '{print $3}' <<<"$sel")
      [ -n "$pci" ] || pci=$(awk -F', *' '{print $2}' <<<"$sel")
    fi
  fi
  if [ -z "$mode_cuda" ] && [ -z "$mode_smi" ]; then
    [ "$SMI_N" -eq 0 ] && [ "$PROBE_RC" -eq 3 ] && nogpu "no NVIDIA driver here: no GPU whose compute mode to read"
    bad "cannot read GPU 0's compute mode (cuda-probe: $(pkey error); nvidia-smi: ${rows:-no rows})"
  fi
  echo "GPU 0 ($name, $pci): compute mode ${mode_cuda:-?} (CUDA), ${mode_smi:-?} (nvidia-smi)"
  local m
  for m in "$mode_cuda" "$mode_smi"; do
    case $m in
      "" | Default) ;;
      Exclusive_Process | Exclusive_Thread)
        bad "GPU 0 ($name, $pci) is in $m compute mode: only one process may use it, and the check runs two ranks on GPU 0; as root: nvidia-smi -i ${sel%%,*} -c DEFAULT (or ask for a machine in Default mode)" ;;
      Prohibited)
        bad "GPU 0 ($name, $pci) is in Prohibited compute mode: no process may use it; as root: nvidia-smi -i ${sel%%,*} -c DEFAULT (or ask for a machine in Default mode)" ;;
      *)
        bad "GPU 0 ($name, $pci) reports compute mode '$m', not Default: two ranks on GPU 0 may not work" ;;
    esac
  done
  ok "GPU 0 ($name, $pci) is in Default compute mode: two ranks may share it"
}

pre_nvidia_smi() {
  have nvidia-smi || nogpu "nvidia-smi is not installed here"
  echo "$ nvidia-smi"
  smi || nogpu "nvidia-smi fails (exit $?): no usable GPU"
  echo "$ nvidia-smi --query-gpu=... (one line per GPU)"
  local q
  q=$(smi --query-gpu=index,name,pci.bus_id,driver_version,compute_mode,memory.total,memory.used,pstate,temperature.gpu,power.draw,clocks.max.sm --format=csv)
  echo "$q"
  # Fields older drivers lack: on their own, so an unknown one loses only itself.
  smi --query-gpu=compute_cap,mig.mode.current,pcie.link.gen.max,pcie.link.width.max --format=csv || true
  echo "$ nvidia-smi topo -m"
  smi topo -m || true
  local row
  row=$(sed -n 2p <<<"$q")
  [ -n "$row" ] || bad "nvidia-smi --query-gpu gave no row: $(tail -n 1 <<<"$q")"
  ok "$(awk -F', *' '{printf "%s, driver %s, compute mode %s, %s", $2, $4, $5, $6}' <<<"$row")$([ "$(wc -l <<<"$q")" -gt 2 ] && echo ", and $(($(wc -l <<<"$q") - 2)) more GPUs")"
}

case ${1:-} in
  glibc) pre_glibc ;;
  cuda) pre_cuda ;;
  compute-mode) pre_compute_mode ;;
  nvidia-smi) pre_nvidia_smi ;;
  *) echo "usage: pre.sh glibc|cuda|compute-mode|nvidia-smi" >&2; exit 2 ;;
esac
