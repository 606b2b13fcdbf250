#!/usr/bin/env bash
# make compose-check: docker-compose.yml under a real container engine.
#
# Builds the project's three images from deploy/docker/ unchanged, brings the
# demo's stack up with podman-compose (bridge network, service names as
# addresses, ports on the host's loopback), and checks that it works: the RBC
# server receives the app server's statistics, the controller resizes the
# memcached partitions, Prometheus scrapes every component up; then it tears
# everything down, whether the check passed or not.
#
# Needs root (rootful podman) and Debian's podman, runc, debootstrap,
# podman-compose and the DNS plugin of podman's network backend, which it installs. The upstream base images the
# Dockerfiles name are stand-ins built from a Debian root filesystem
# (deploy/docker/standins/) where no registry is reachable: STANDINS=auto
# (the default) builds them when one is missing locally, always rebuilds
# them, never uses what is there (pulled images). The engine's
# settings are this script's own (CONTAINERS_CONF): the runc runtime, the
# cgroupfs cgroup manager and no default ulimits, which a container sandbox
# needs; nothing in /etc is changed.
#
#   make compose-check                 # about 10 minutes the first time; 2 with nothing
#                                      # changed, up to 9 when the code changed (2 busy cores)
#   RUN_SECONDS=60 STANDINS=never make compose-check
set -euo pipefail
cd "$(dirname "$0")/.."

RUN_SECONDS=${RUN_SECONDS:-60}
STANDINS=${STANDINS:-auto}          # auto | always | never
PROJECT=${PROJECT:-robinhood-check}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/robinhood/compose-check
DEADLINE=${DEADLINE:-180}           # seconds for each awaited event

say() { echo "compose-check: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (rootful podman, debootstrap); run it as root"
case $STANDINS in auto|always|never) ;; *) fail "STANDINS=$STANDINS: want auto, always or never" ;; esac
[[ $RUN_SECONDS =~ ^[0-9]+$ ]] || fail "RUN_SECONDS=$RUN_SECONDS is not a number of seconds"
apt_install() { # apt_install PACKAGE...: Debian's packages, refreshing the lists once if needed
  say "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } ||
    fail "apt-get install $* failed"
}
missing=()
for tool in podman runc debootstrap podman-compose; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[[ ${#missing[@]} -eq 0 ]] || apt_install podman runc debootstrap podman-compose uidmap
for port in 7071 8080 9090; do
  if ss -ltnH "sport = :$port" | grep -q .; then
    fail "port $port on the host is taken; docker-compose.yml publishes 127.0.0.1:$port"
  fi
done

mkdir -p "$CACHE"
export CONTAINERS_CONF=$CACHE/containers.conf
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF

# The containers find each other by service name, so the network needs the engine's
# DNS. Debian's podman 4 installed without its recommended packages uses CNI without
# the dnsname plugin, and names do not resolve inside the containers; with netavark the
# DNS server is aardvark-dns.
backend=$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null) || fail "podman info failed: is podman working?"
case $backend in
  cni) [[ -x /usr/lib/cni/dnsname || -x /usr/libexec/cni/dnsname ]] ||
         apt_install golang-github-containernetworking-plugin-dnsname ;;
  netavark) [[ -x /usr/libexec/podman/aardvark-dns || -x /usr/lib/podman/aardvark-dns ]] ||
         apt_install aardvark-dns ;;
  *) fail "podman's network backend is '$backend': want cni or netavark" ;;
esac

# --- stand-ins for the upstream base images -------------------------------
# Every image the Dockerfiles and the compose file name must exist locally.
upstream() {
  { sed -n 's/^FROM \([^ ]*\).*/\1/p' deploy/docker/Dockerfile*
    sed -n 's/^ *image: \([^$][^ ]*\)$/\1/p' docker-compose.yml; } | sort -u
}
qualify() { # docker.io/library/NAME:TAG for a short name, as podman resolves it
  local r=$1
  [[ $r == */*/* || $r == localhost/* ]] && { echo "$r"; return; }
  [[ $r == */* ]] && { echo "docker.io/$r"; return; }
  echo "docker.io/library/$r"
}
need=()
for ref in $(upstream); do
  podman image exists "$(qualify "$ref")" || need+=("$(qualify "$ref")")
done
if [[ $STANDINS == always || ( $STANDINS == auto && ${#need[@]} -gt 0 ) ]]; then
  # shellcheck source=/dev/null
  source deploy/docker/standins/base.conf
  if ! podman image exists "localhost/robinhood-standin-base:$suite"; then
    if [[ ! -s $CACHE/rootfs-$suite.tar ]]; then
      say "building a Debian $suite root filesystem (debootstrap, about a minute)"
      rm -rf "$CACHE/rootfs"
      debootstrap --variant=minbase --include="$packages" "$suite" "$CACHE/rootfs" http://deb.debian.org/debian >"$CACHE/debootstrap.log" 2>&1 ||
        fail "debootstrap failed: see $CACHE/debootstrap.log"
      rm -rf "$CACHE"/rootfs/var/cache/apt/archives/*.deb "$CACHE"/rootfs/var/lib/apt/lists/*
      tar -C "$CACHE/rootfs" -cf "$CACHE/rootfs-$suite.tar" . && rm -rf "$CACHE/rootfs"
    fi
    podman import -q "$CACHE/rootfs-$suite.tar" "localhost/robinhood-standin-base:$suite" >/dev/null
  fi
  ctx=$CACHE/context
  mkdir -p "$ctx"
  if [[ ! -x $ctx/go/bin/go || $(cat "$ctx/go.version" 2>/dev/null) != "$(go version)" ]]; then
    rm -rf "$ctx/go" && cp -a "$(go env GOROOT)" "$ctx/go" && go version >"$ctx/go.version"
  fi
  say "the module cache and the Python wheels for the offline builds"
  GOMODCACHE=$ctx/gomod GOFLAGS=-modcacherw go mod download
  make -s venv
  # The distribution's dependencies, and what pip needs to build it, for
  # Debian's Python 3.11 (whose patch level brings async-timeout into redis).
  deps=$(.venv/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))')
  mapfile -t deps <<<"$deps"
  .venv/bin/pip download -q -d "$ctx/wheels" --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any \
    "setuptools>=64" wheel "async-timeout>=4.0.3" "${deps[@]}"
  for cf in deploy/docker/standins/*.Containerfile; do
    ref=$(sed -n 's/^# stands-in-for: //p' "$cf")
    [[ -n $ref ]] || fail "$cf: no '# stands-in-for:' line"
    podman build -q --pull=never -f "$cf" -t "$ref" "$ctx" >/dev/null || fail "building the stand-in $ref ($cf)"
  done
fi
for ref in $(upstream); do
  podman image exists "$(qualify "$ref")" ||
    fail "no image $ref: pull it (a registry is reachable) or give it a stand-in in deploy/docker/standins/"
done

# --- the project's images, from its Dockerfiles unchanged --------------------
say "building robinhood/go, robinhood/controller, robinhood/prometheus"
for img in go:Dockerfile controller:Dockerfile.controller prometheus:Dockerfile.prometheus; do
  podman build -q --pull=never -f "deploy/docker/${img#*:}" -t "localhost/robinhood/${img%%:*}:latest" . >"$CACHE/build-${img%%:*}.log" 2>&1 ||
    { tail -20 "$CACHE/build-${img%%:*}.log" >&2; fail "building robinhood/${img%%:*}"; }
done

# --- up, check, down ---------------------------------------------------------
compose() { podman-compose -p "$PROJECT" -f docker-compose.yml "$@"; }
down() {
  say "tearing down"
  compose down -v >"$CACHE/down.log" 2>&1 || true
  podman ps -a -q --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman rm -f >/dev/null 2>&1 || true
  podman volume rm -f "${PROJECT}_results" >/dev/null 2>&1 || true
  podman network rm -f "${PROJECT}_robinhood" >/dev/null 2>&1 || true
}
trap down EXIT
down >/dev/null 2>&1
say "up"
compose up -d >"$CACHE/up.log" 2>&1 || { tail -20 "$CACHE/up.log" >&2; fail "podman-compose up"; }
[[ $(podman network inspect --format '{{.DNSEnabled}}' "${PROJECT}_robinhood" 2>/dev/null) == true ]] ||
  fail "the network ${PROJECT}_robinhood has no DNS (podman's $backend backend without its DNS plugin): service names would not resolve"
start=$(date +%s)

await() { # await DESCRIPTION COMMAND...: until COMMAND succeeds, or fail after DEADLINE s
  local what=$1; shift
  local end=$(( $(date +%s) + DEADLINE ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < end )) || fail "$what: not within ${DEADLINE}s (logs: podman logs ${PROJECT}_<service>_1)"
    sleep 1
  done
  say "ok: $what"
}
metric() { curl -sf -m 5 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
rbc_batches() { local n; n=$(metric 7071 rbcserver_batches_total); [[ -n $n ]] && (( ${n%.*} > 0 )); }
resizes() { podman logs "${PROJECT}_controller-app0_1" 2>&1 | grep -cE 'event=tick .*limits_mb=[^ ]*->' || true; }
resized() { (( $(resizes) > 0 )); }
all_up() {
  curl -sf -m 5 http://127.0.0.1:9090/api/v1/targets | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
jobs = {x["labels"]["job"] for x in t}
sys.exit(0 if t and all(x["health"] == "up" for x in t) and {"rbcserver", "appserver", "backend", "controller", "replay"} <= jobs else 1)'
}
await "the app server answers /healthz" curl -sf -m 5 http://127.0.0.1:8080/healthz
await "the RBC server receives the app server's statistics" rbc_batches
await "the controller resizes a memcached partition" resized
await "Prometheus scrapes every component, all up" all_up

left=$(( start + RUN_SECONDS - $(date +%s) ))
(( left > 0 )) && { say "running ${left}s more"; sleep "$left"; }
bad=$(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}} {{.Status}}' |
  grep -v ' Up ' | grep -v '_loadgen_1 Exited (0)' || true)
[[ -z $bad ]] || fail "containers not running: $bad"
all_up || fail "a scrape target went down"
say "PASSED: $(podman ps -q --filter "label=io.podman.compose.project=$PROJECT" | wc -l) containers up for $(( $(date +%s) - start ))s;" \
  "RBC batches $(metric 7071 rbcserver_batches_total); controller: $(resizes) ticks that resized"
