#!/usr/bin/env bash
# Backfill and bootstrap through TLS against plain HTTP, on the same chain
# and the same front end: nginx (a CA made here, a key in the query) in
# front of geth and in front of a neve, with one plain and one TLS listener
# each, so the only difference between the two is TLS. Rounds alternate
# which goes first; geth direct is the reference without a proxy hop.
#
#   scripts/bench-tls.sh                   # ~600 blocks, 2 rounds
#   BLOCKS=300 ROUNDS=3 scripts/bench-tls.sh
set -euo pipefail
BLOCKS=${BLOCKS:-600}
TPS=${TPS:-2100}
ROUNDS=${ROUNDS:-2}
source "$(dirname "$0")/lib.sh"
now() { python3 -c 'import time; print(time.time())'; }
KEY=bench-key-$RANDOM$RANDOM

start_geth_dev
grow_chain "$BLOCKS" "$TPS"
chain=$(head_of "$geth_url")

# A CA and a certificate for localhost.
(
  cd "$work"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 1 \
    -subj /CN=bench-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >server.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile server.ext 2>/dev/null
)

# nginx: geth behind a plain and a TLS listener; neve A (started below)
# behind another pair.
AP=$(free_port)
GP=$(free_port); GS=$(free_port); NP=$(free_port); NS=$(free_port)
geth_hostport=${geth_url#http://}
cat >"$work/nginx.conf" <<CONF
daemon on; pid $work/nginx.pid; error_log $work/nginx.err;
worker_processes 1;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/body; proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fcgi; uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
  ssl_certificate $work/server.pem; ssl_certificate_key $work/server.key;
  upstream geth { server $geth_hostport; keepalive 32; }
  upstream neve_a { server 127.0.0.1:$AP; keepalive 32; }
  server {
    listen 127.0.0.1:$GP; listen 127.0.0.1:$GS ssl;
    location / {
      if (\$arg_token != "$KEY") { return 401; }
      proxy_pass http://geth/; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host localhost;
      proxy_buffering off;
    }
  }
  server {
    listen 127.0.0.1:$NP; listen 127.0.0.1:$NS ssl;
    location / {
      proxy_pass http://neve_a; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off; proxy_read_timeout 1h;
    }
  }
}
CONF
/usr/sbin/nginx -c "$work/nginx.conf" -e "$work/nginx.err"

# backfill NAME URL: seconds for an empty neve to store 0..head from URL.
backfill() {
  local port dir t0 t1
  port=$(free_port); dir="$work/backfill-$1"
  rm -rf "$dir"
  "$neve" serve --upstream "$2" --ws-url none --floor 0 --listen "127.0.0.1:$port" --data-dir "$dir" --ca-file "$work/ca.pem" >"$dir.log" 2>&1 &
  local pid=$!
  until curl -s "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.01; done
  t0=$(now)
  until [ "$(stored_height "http://127.0.0.1:$port")" -ge "$chain" ]; do sleep 0.02; done
  t1=$(now)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 -c "print(f'{$t1 - $t0:.3f}')"
}

# bootstrap NAME URL: the mirror's own 'bootstrapped' line, from URL.
bootstrap() {
  local port dir
  port=$(free_port); dir="$work/bootstrap-$1"
  rm -rf "$dir"
  "$neve" serve --mirror-from "$2" --ws-url none --floor 0 --listen "127.0.0.1:$port" --data-dir "$dir" --ca-file "$work/ca.pem" >"$dir.log" 2>&1 &
  local pid=$!
  wait_for_log "$dir.log" 'bootstrapped from /blocks' 300
  kill "$pid"; wait "$pid" 2>/dev/null || true
  grep 'bootstrapped from /blocks' "$dir.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' | grep -oE ' seconds="?[0-9.]+' | grep -oE '[0-9.]+$'
}

# The source of the bootstraps: neve A, caught up, serving.
"$neve" serve --upstream "$geth_url" --ws-url none --floor 0 --listen "127.0.0.1:$AP" --data-dir "$work/a" >"$work/a.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$AP")" -ge "$chain" ]; do sleep 0.1; done
bytes=$(curl -s "http://127.0.0.1:$AP/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["storage"]["bytes"])')

results="$work/results.txt"
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="plain tls"; else order="tls plain"; fi
  for kind in $order; do
    if [ "$kind" = plain ]; then
      b=$(backfill "plain-$round" "http://127.0.0.1:$GP/?token=$KEY")
      s=$(bootstrap "plain-$round" "http://127.0.0.1:$NP")
    else
      b=$(backfill "tls-$round" "https://localhost:$GS/?token=$KEY")
      s=$(bootstrap "tls-$round" "https://localhost:$NS")
    fi
    echo "$round $kind $b $s" >>"$results"
  done
  d=$(backfill "direct-$round" "$geth_url")
  echo "$round direct $d -" >>"$results"
done

python3 - "$chain" "$bytes" "$results" <<'PY'
import sys, statistics
chain, size, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
blocks = chain + 1
rows = [line.split() for line in open(path)]
print(f"chain: {blocks} blocks, {size / 1e6:.1f} MB stored; {max(int(r[0]) for r in rows)} rounds, order alternating")
print("| path | backfill blocks/s (rounds) | backfill MB/s | bootstrap blocks/s (rounds) | bootstrap MB/s |")
print("|---|---|---|---|---|")
for kind, label in [("plain", "nginx, plain HTTP"), ("tls", "nginx, TLS"), ("direct", "geth direct (no proxy)")]:
    b = [blocks / float(r[2]) for r in rows if r[1] == kind]
    s = [blocks / float(r[3]) for r in rows if r[1] == kind and r[3] != "-"]
    fmt = lambda xs: ", ".join(f"{x:.0f}" for x in xs)
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    boot = f"{fmt(s)} | {med(s) * size / blocks / 1e6:.1f}" if s else "- | -"
    print(f"| {label} | {fmt(b)} | {med(b) * size / blocks / 1e6:.1f} | {boot} |")
plain = statistics.median(blocks / float(r[2]) for r in rows if r[1] == "plain")
tls = statistics.median(blocks / float(r[2]) for r in rows if r[1] == "tls")
bp = statistics.median(blocks / float(r[3]) for r in rows if r[1] == "plain")
bt = statistics.median(blocks / float(r[3]) for r in rows if r[1] == "tls")
print(f"TLS/plain, medians: backfill {tls / plain:.2f}x, bootstrap {bt / bp:.2f}x")
PY
