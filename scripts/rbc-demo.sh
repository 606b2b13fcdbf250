#!/usr/bin/env bash
# The RBC server alone: start it on free
# loopback ports, feed it synthetic records from 16 simulated application
# servers for about ten seconds, print the RBC snapshot and the server's
# metrics, and stop everything. `make rbc-demo` runs it.
#
# Environment: DEMO_RATE (records/s, default 200000), DEMO_DURATION
# (default 10s), DEMO_STREAMS (default 16), DEMO_BACKENDS (default 8).
set -euo pipefail
cd "$(dirname "$0")/.."

rate=${DEMO_RATE:-200000}
duration=${DEMO_DURATION:-10s}
streams=${DEMO_STREAMS:-16}
backends=${DEMO_BACKENDS:-8}
py=python3
[[ -x .venv/bin/python ]] && py=.venv/bin/python

go build -o bin/ ./rbcserver/cmd/...

tmp=$(mktemp -d)
log=$tmp/rbcserver.log
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Port 0: the server picks free ports and logs them.
bin/rbcserver --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --window 5s 2>"$log" &
pid=$!
for _ in $(seq 100); do
  grep -q 'msg="rbcserver serving"' "$log" && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "rbc-demo: rbcserver exited:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
grpc=$(sed -n 's/.*msg="rbcserver serving" grpc_addr=\([^ ]*\) http_addr=\([^ ]*\).*/\1/p' "$log")
http=$(sed -n 's/.*msg="rbcserver serving" grpc_addr=\([^ ]*\) http_addr=\([^ ]*\).*/\2/p' "$log")
if [[ -z $grpc || -z $http ]]; then
  echo "rbc-demo: rbcserver did not report its addresses:" >&2
  cat "$log" >&2
  exit 1
fi

fetch() { # fetch URL [json]: print the body, pretty when it is JSON
  "$py" - "$@" <<'EOF'
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    body = r.read().decode()
print(json.dumps(json.loads(body), indent=2) if len(sys.argv) > 2 else body, end="" if len(sys.argv) <= 2 else "\n")
EOF
}

echo "== rbcserver: gRPC $grpc, HTTP http://$http (window 5s, band P98.5-P99.5)"
echo "== rbcload: $streams app servers, $rate records/s, $duration, $backends backends"
echo "   (backend 1 is slow in the median, backend 3 has a heavy tail: it should own the band)"
bin/rbcload --addr "$grpc" --streams "$streams" --rate "$rate" --duration "$duration" \
  --backends "$backends" --query-every 1s
echo
echo "== GET http://$http/v1/rbc"
fetch "http://$http/v1/rbc" json
echo
echo "== GET http://$http/metrics (rbcserver_*)"
fetch "http://$http/metrics" | grep '^rbcserver_' | grep -v '_bucket{'

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
echo
echo "== rbcserver stopped (exit status $status)"
tail -n 2 "$log"
exit "$status"
