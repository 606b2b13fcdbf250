#!/usr/bin/env bash
# Load benchmark of the RBC server (docs/benchmarks.md, "RBC server"): starts
# bin/rbcserver on free ports, runs bin/rbcload against it with the given
# rbcload flags, then prints the server's resident memory (now and peak,
# from /proc), its CPU time and its GetRBC compute-time histogram summary.
#
#   rbcserver/loadbench.sh --streams 16 --rate 0 --duration 10s --query-every 1s
#   rbcserver/loadbench.sh --streams 16 --rate 1000000 --duration 20s --query-every 1s
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/ ./rbcserver/cmd/...

tmp=$(mktemp -d)
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

bin/rbcserver --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 2>"$tmp/log" &
pid=$!
for _ in $(seq 100); do
  grep -q 'msg="rbcserver serving"' "$tmp/log" && break
  sleep 0.1
done
addrs=$(sed -n 's/.*msg="rbcserver serving" grpc_addr=\([^ ]*\) http_addr=\([^ ]*\).*/\1 \2/p' "$tmp/log")
read -r grpc http <<<"$addrs"
[[ -n ${http:-} ]] || { cat "$tmp/log" >&2; exit 1; }

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
cpu0=$(cpu)
start=$(date +%s.%N)
bin/rbcload --addr "$grpc" "$@"
end=$(date +%s.%N)
cpu1=$(cpu)

metrics=$(curl -s "http://$http/metrics" 2>/dev/null || python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())" "http://$http/metrics")
awk -v c0="$cpu0" -v c1="$cpu1" -v t="$ticks" -v s="$start" -v e="$end" \
  'BEGIN { printf "rbcserver CPU: %.2f s in %.1f s wall (%.0f%% of one core)\n", (c1-c0)/t, e-s, 100*(c1-c0)/t/(e-s) }'
grep -E '^Vm(RSS|HWM)' "/proc/$pid/status" | sed 's/^/rbcserver /'
echo "$metrics" | awk '/^rbcserver_ring_records /{print "rbcserver ring records: " $2}
  /^rbcserver_getrbc_compute_seconds_sum /{s=$2} /^rbcserver_getrbc_compute_seconds_count /{n=$2}
  END { if (n > 0) printf "rbcserver GetRBC compute: %d calls, mean %.2f ms\n", n, 1000*s/n }'
