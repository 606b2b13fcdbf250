#!/usr/bin/env bash
# Generates the Go and Python code for proto/robinhood/v1/*.proto.
#   scripts/genproto.sh .        regenerate in place
#   scripts/genproto.sh --check  generate into a temporary tree and fail if the
#                                committed code differs (stale)
# Generator versions are pinned: protoc-gen-go and protoc-gen-go-grpc by go.mod
# (tool directives), the Python generator by grpcio-tools in requirements.txt,
# protoc itself by Debian's protobuf-compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=${1:-.}
tools=$root/.tools/bin
mkdir -p "$tools"
go build -o "$tools/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$tools/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc

out=$root
if [[ $mode == --check ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  mkdir -p "$out/proto/python"
fi
protos=(proto/robinhood/v1/*.proto)
protoc -I proto \
  --plugin=protoc-gen-go="$tools/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$tools/protoc-gen-go-grpc" \
  --go_out="$out/proto" --go_opt=paths=source_relative \
  --go-grpc_out="$out/proto" --go-grpc_opt=paths=source_relative \
  "${protos[@]}"
"$root/.venv/bin/python" -m grpc_tools.protoc -I proto \
  --python_out="$out/proto/python" --pyi_out="$out/proto/python" \
  --grpc_python_out="$out/proto/python" \
  "${protos[@]}"

# The Python reporter (reporter/python) ships its own copy of rbc.proto's code, so that
# it installs alone into an application's environment: the same generated files, the
# service module importing its message module relatively.
vend=$out/reporter/python/robinhood_report/_proto
mkdir -p "$vend"
cp "$out/proto/python/robinhood/v1/rbc_pb2.py" "$out/proto/python/robinhood/v1/rbc_pb2.pyi" "$vend/"
sed 's/^from robinhood\.v1 import rbc_pb2 as /from . import rbc_pb2 as /' \
  "$out/proto/python/robinhood/v1/rbc_pb2_grpc.py" > "$vend/rbc_pb2_grpc.py"
printf '"""Generated from proto/robinhood/v1/rbc.proto by scripts/genproto.sh (make proto); do not edit."""\n' \
  > "$vend/__init__.py"

if [[ $mode == --check ]]; then
  stale=0
  for f in $(cd "$out" && find proto reporter -type f \( -name '*.go' -o -name '*.py' -o -name '*.pyi' \) | sort); do
    if ! cmp -s "$out/$f" "$root/$f"; then
      echo "stale generated code: $f (run 'make proto' and commit the result)" >&2
      stale=1
    fi
  done
  exit $stale
fi
