#!/usr/bin/env bash
# Cold reads (issue 23): another neve binary (a previous build, say) and the
# current one serve the same store, alternating, once with the store in
# memory and once from a memory cgroup (v1, as root) far smaller than the
# store, so most records are read from the disk. Beside random full blocks
# at c16 one client asks eth_chainId (no disk at all) at c1: its p99 is
# what cold reads on async workers used to ruin. Also measures the disk's
# random-read rate for records of the store's mean size.
#
#   scripts/bench-cold.sh OTHER_NEVE [BLOCKS [TPS [LIMIT_MIB [ROUNDS]]]]
#   scripts/bench-cold.sh /path/to/old/neve 2000 2100 160 2
set -euo pipefail
other=$(realpath "${1:?usage: $0 OTHER_NEVE [BLOCKS [TPS [LIMIT_MIB [ROUNDS]]]]}")
BLOCKS=${2:-2000}
TPS=${3:-2100}
LIMIT_MIB=${4:-160}
ROUNDS=${5:-2}
SECONDS_EACH=${SECONDS_EACH:-10}
source "$(dirname "$0")/lib.sh"
cgroups=/sys/fs/cgroup/memory
[ -w "$cgroups" ] || { echo "needs the cgroup v1 memory controller, writable ($cgroups)" >&2; exit 1; }

start_geth_dev
grow_chain "$BLOCKS" "$TPS"
chain=$(head_of "$geth_url")
# Each build ingests a store of its own from the same chain: builds of
# different store formats cannot share one.
ingest_with() {
  local bin=$1 dir=$2 port
  port=$(free_port)
  "$bin" serve --upstream "$geth_url" --ws-url none --floor 0 --listen "127.0.0.1:$port" --data-dir "$dir" >"$work/ingest.log" 2>&1 &
  local ingest=$!; pids+=("$ingest")
  until [ "$(stored_height "http://127.0.0.1:$port")" -ge "$chain" ]; do sleep 0.2; done
  store_bytes=$(curl -s "http://127.0.0.1:$port/health" | grep -o '"storage":{"bytes":[0-9]*' | grep -o '[0-9]*$')
  kill "$ingest"; wait "$ingest" 2>/dev/null || true
}
ingest_with "$other" "$work/store-other"
ingest_with "$neve" "$work/store-current"
ln -s "$work/store-current" "$work/store"
echo "store: $chain blocks, $((store_bytes >> 20)) MiB of records; memory limit for cold rounds: $LIMIT_MIB MiB" >&2

cat >"$work/full.lua" <<LUA
math.randomseed(11)
request = function()
  local body = string.format('{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x%x",true]}', math.random(0, $chain))
  return wrk.format("POST", "/", {["Content-Type"] = "application/json"}, body)
end
LUA
cat >"$work/chainid.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}'
LUA

# The disk's rate for random reads of records (O_DIRECT, 16 at once: what
# c16 of cold full blocks asks of it).
record=$((store_bytes / chain))
device_rate=$(python3 - "$work/store" "$record" "$SECONDS_EACH" <<'PY'
import mmap, os, random, sys, threading, time
store, size, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
size = max(4096, (size + 4095) // 4096 * 4096)
files = [os.path.join(store, f) for f in os.listdir(store) if f.endswith(".seg")]
files = [(f, os.path.getsize(f)) for f in files if os.path.getsize(f) > size]
done, stop = [0], time.monotonic() + seconds
def reader(seed):
    rng, buf = random.Random(seed), mmap.mmap(-1, size)
    fds = {f: os.open(f, os.O_RDONLY | os.O_DIRECT) for f, _ in files}
    while time.monotonic() < stop:
        f, length = rng.choice(files)
        os.preadv(fds[f], [buf], rng.randrange(0, (length - size) // 4096) * 4096)
        done[0] += 1
threads = [threading.Thread(target=reader, args=(i,)) for i in range(16)]
[t.start() for t in threads]; [t.join() for t in threads]
print(f"{done[0] / seconds:.0f}")
PY
)
echo "device: $device_rate random reads/s of $((record >> 10)) KiB (O_DIRECT, 16 at once)" >&2

p99_of() { awk '/ 99%/ {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; printf "%.3f", v}'; }
p50_of() { awk '/ 50%/ {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; printf "%.3f", v}'; }
rate_of() { awk '/^Requests\/sec/ {printf "%.1f", $2}'; }
non2xx_of() { awk '/Non-2xx/ {n=$NF} END {print n+0}'; }

# one BINARY MODE: serves the store (in a fresh memory cgroup when MODE is
# cold), then full blocks at c16 beside eth_chainId at c1.
one() {
  local bin=$1 mode=$2 group="" serve_port store
  serve_port=$(free_port)
  store="$work/store-$([ "$bin" = "$neve" ] && echo current || echo other)"
  if [ "$mode" = cold ]; then
    # Nothing maps the store now, so this drops every cached page of it;
    # from here on the pages neve reads are charged to its group.
    python3 -c 'import os,sys
for f in os.listdir(sys.argv[1]):
    p = os.path.join(sys.argv[1], f)
    if os.path.isfile(p):
        fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$store"
  else
    cat "$store"/* >/dev/null
  fi
  if [ "$mode" = cold ]; then
    group="$cgroups/neve-cold-$$"
    mkdir -p "$group"
    echo $((LIMIT_MIB << 20)) >"$group/memory.limit_in_bytes"
    bash -c "echo \$\$ >'$group/cgroup.procs'; exec '$bin' serve --upstream '$geth_url' --ws-url none --listen 127.0.0.1:$serve_port --data-dir '$store'" >"$work/serve.log" 2>&1 &
  else
    "$bin" serve --upstream "$geth_url" --ws-url none --listen "127.0.0.1:$serve_port" --data-dir "$store" >"$work/serve.log" 2>&1 &
  fi
  local pid=$!
  until curl -sf "http://127.0.0.1:$serve_port/health/ready" >/dev/null; do sleep 0.1; done
  wrk -c4 -t1 -d2s -s "$work/full.lua" "http://127.0.0.1:$serve_port/" >/dev/null
  wrk -c16 -t1 -d"${SECONDS_EACH}s" --latency -s "$work/full.lua" "http://127.0.0.1:$serve_port/" >"$work/full.out" &
  local full=$!
  wrk -c1 -t1 -d"${SECONDS_EACH}s" --latency -s "$work/chainid.lua" "http://127.0.0.1:$serve_port/" >"$work/chainid.out"
  wait "$full"
  local cold_reads anon
  cold_reads=$(curl -s "http://127.0.0.1:$serve_port/metrics" | awk '/^neve_store_cold_reads_total / {print $2}')
  # Still there? An OOM kill shows here, not as a slow row.
  if kill -0 "$pid" 2>/dev/null; then anon="$(now_mib "$pid") MiB"; else anon="killed"; fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
  [ -n "$group" ] && rmdir "$group"
  printf '| %s | %s | %s (%s non-2xx) | %s | %s | %s | %s | %s | %s |\n' \
    "$([ "$bin" = "$neve" ] && echo current || echo other)" "$mode" \
    "$(rate_of <"$work/full.out")" "$(non2xx_of <"$work/full.out")" "$(p99_of <"$work/full.out")" \
    "$(rate_of <"$work/chainid.out")" "$(p50_of <"$work/chainid.out")" "$(p99_of <"$work/chainid.out")" \
    "${cold_reads:--}" "$anon"
}

echo "| build | store | full blocks c16 req/s | its p99 ms | eth_chainId c1 req/s | its p50 ms | its p99 ms | cold reads | anonymous memory after |"
echo "|---|---|---|---|---|---|---|---|---|"
for _ in $(seq "$ROUNDS"); do
  for mode in hot cold; do
    for bin in "$other" "$neve"; do
      one "$bin" "$mode"
    done
  done
done
