#!/usr/bin/env bash
# The machine's floor for "serving while something else computes": wrk
# randblock c16 p99 on an idle, caught-up neve, against the same while two
# pure CPU loops run beside it in the scheduling classes neve's background
# threads could use. No neve ingest runs during the measurement, so what
# the loops cost is what the machine charges for any background CPU at
# all; read bench-hardening.sh's serving-while-ingesting ratios against it.
#
#   scripts/bench-interference.sh
#   ROUNDS=5 scripts/bench-interference.sh
#
# Each round measures, 3 s each, saturated (c16) and paced (each
# connection waits 2 ms between answer and request, ~6,000 req/s):
#   idle              nothing else running
#   batch-nice10      SCHED_BATCH at nice 10 (neve's background threads)
#   batch-nice10-0.1  the same with a 0.1 ms scheduler slice (Linux 6.12+)
#   idle-class        SCHED_IDLE: the kernel runs it only on an idle CPU
set -euo pipefail
ROUNDS=${ROUNDS:-3}
export DEV_PERIOD=1
source "$(dirname "$0")/lib.sh"

start_geth_dev
"$neve" load --rpc "$geth_url" --seconds 30 --tps 1250 --accounts 64 2>/dev/null | sed -n 2p >&2
chain=$(head_of "$geth_url")
port=$(free_port)
"$neve" serve --upstream "$geth_url" --ws-url none --floor 0 --listen "127.0.0.1:$port" --data-dir "$work/neve" >"$work/neve.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$port")" -ge "$chain" ]; do sleep 0.05; done

randblock_lua

# A CPU loop in scheduling POLICY at NICE with a SLICE_NS slice (0: the
# kernel's default), set with sched_setattr(2): no privilege needed.
cat >"$work/spin.py" <<'PY'
import ctypes, sys
class Attr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32),
                ("flags", ctypes.c_uint64), ("nice", ctypes.c_int32),
                ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]
policy, nice, slice_ns = map(int, sys.argv[1:4])
attr = Attr(48, policy, 0, nice, 0, slice_ns, 0, 0)
SYS_sched_setattr = 314  # x86_64
if ctypes.CDLL(None, use_errno=True).syscall(SYS_sched_setattr, 0, ctypes.byref(attr), 0) != 0:
    sys.exit(f"sched_setattr: errno {ctypes.get_errno()}")
while True:
    pass
PY
SCHED_BATCH=3; SCHED_IDLE=5

measure() { # LUA: "p99 req/s"
  local out
  out=$(wrk -c16 -t2 -d3s --latency -s "$1" "http://127.0.0.1:$port/")
  echo "$(wrk_p99_ms <<<"$out") $(awk '/^Requests\/sec/ {printf "%.0f", $2}' <<<"$out")"
}
with_spinners() { # NAME POLICY NICE SLICE
  local name=$1 spinners=()
  if [ "$name" != idle ]; then
    for _ in 1 2; do python3 "$work/spin.py" "$2" "$3" "$4" & spinners+=($!); done
    sleep 0.5
  fi
  read -r sp sr <<<"$(measure "$work/rand.lua")"
  read -r pp pr <<<"$(measure "$work/paced.lua")"
  if [ "${#spinners[@]}" -gt 0 ]; then
    kill "${spinners[@]}"
    wait "${spinners[@]}" 2>/dev/null || true
  fi
  printf '%-17s saturated p99 %6.2f ms (%6s req/s)   paced p99 %6.2f ms (%5s req/s)\n' "$name" "$sp" "$sr" "$pp" "$pr"
}

echo "neve caught up on $((chain + 1)) blocks; two spinning loops beside it in each class:"
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  with_spinners idle
  with_spinners batch-nice10 "$SCHED_BATCH" 10 0
  with_spinners batch-nice10-0.1 "$SCHED_BATCH" 10 100000
  with_spinners idle-class "$SCHED_IDLE" 0 0
done
