#!/usr/bin/env bash
# Measures what the simulator's calibration holds (docs/simulator.md,
# "Calibration"): each backend type's data path per query and the RPC's
# round trip, from real bin/backend processes on loopback under a light
# open-loop load (bin/backendload), without injected latency. Prints one
# JSON line per (type, batch, size): the call latency percentiles and the
# backend's own mean service time per query.
#
#   scripts/sim-calibrate.sh > calibration-runs.jsonl
#
# Run it on a quiet machine; the numbers are only as good as the quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=bin
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

for typ in kv sql compute; do
  g=$(free_port); h=$(free_port)
  extra=()
  [ "$typ" = compute ] && extra=(--matrix-size "${MATRIX_SIZE:-32}")
  [ "$typ" = sql ] && extra=(--db "$tmp/sql.db" --rows 20000)
  "$BIN/backend" --type "$typ" --name "cal-$typ" --grpc-addr "127.0.0.1:$g" --http-addr "127.0.0.1:$h" \
    --workers 8 --log-level error "${extra[@]}" >"$tmp/$typ.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$h/healthz" >/dev/null 2>&1 && break
    sleep 0.2
  done
  for batch in 1 12; do
    for size in 1024 16384; do
      out=$("$BIN/backendload" --addr "127.0.0.1:$g" --rate "$((batch * 50))" --batch "$batch" --size "$size" \
        --keys 5000 --duration 10s --warmup 2s --json)
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"type": sys.argv[2], "batch": int(sys.argv[3]), "size": int(sys.argv[4]), "latency_ms": d["latency_ms"], "service_us_per_query": d["service_us_per_query"], "queue_us_per_query": d["queue_us_per_query"]}))' "$out" "$typ" "$batch" "$size"
    done
  done
done
