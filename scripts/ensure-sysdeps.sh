#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, when they are
# missing. Idempotent. As root it runs apt-get; otherwise it names what is
# missing and how to install it, and fails.
#
#   scripts/ensure-sysdeps.sh memcached protoc redis-server prometheus docker-compose
set -euo pipefail

declare -A pkg=(
  [memcached]=memcached
  [protoc]=protobuf-compiler
  [redis-server]=redis-server
  [prometheus]=prometheus
  [docker-compose]=docker-compose
)

missing=()
for cmd in "$@"; do
  p=${pkg[$cmd]:-}
  if [[ -z $p ]]; then
    echo "ensure-sysdeps: unknown command '$cmd'" >&2
    exit 2
  fi
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "ensure-sysdeps: missing Debian packages: ${missing[*]}" >&2
  echo "  install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "ensure-sysdeps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists once if they have never been fetched.
if ! compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
  apt-get update -qq
fi
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's packages start their services; the project starts its own
# instances on free ports, so stop the system ones where a service manager ran them.
for p in "${missing[@]}"; do
  case $p in
    memcached|redis-server|prometheus) service "$p" stop >/dev/null 2>&1 || true ;;
  esac
done
