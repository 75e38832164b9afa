#!/usr/bin/env bash
# Regenerate device/wire_pb2.py and device/wire_pb2_grpc.py from device/wire.proto.
#
#   tools/gen_proto.sh           write them into device/
#   tools/gen_proto.sh --check   write nothing; exit 1 if the committed ones differ (CI)
#
# Use grpcio-tools 1.62.x (pip install -e '.[test]'): its stubs import under protobuf 4.25
# (TensorFlow 2.15's) and newer runtimes alike; newer grpcio-tools stubs do not. $PYTHON picks
# the interpreter (default: python).
set -euo pipefail
check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/edge_rl/device"
cp "$root/device/wire.proto" "$tmp/edge_rl/device/"
"${PYTHON:-python}" -m grpc_tools.protoc -I"$tmp" --python_out="$tmp" --grpc_python_out="$tmp" \
  "$tmp/edge_rl/device/wire.proto"
if [ "$check" = 1 ]; then
  status=0
  for name in wire_pb2.py wire_pb2_grpc.py; do
    if ! diff -u "$root/device/$name" "$tmp/edge_rl/device/$name"; then
      echo "device/$name differs from what device/wire.proto generates: run tools/gen_proto.sh" >&2
      status=1
    fi
  done
  [ "$status" = 0 ] && echo "device/wire_pb2.py and device/wire_pb2_grpc.py match device/wire.proto"
  exit "$status"
fi
cp "$tmp/edge_rl/device/wire_pb2.py" "$tmp/edge_rl/device/wire_pb2_grpc.py" "$root/device/"
echo "wrote device/wire_pb2.py and device/wire_pb2_grpc.py"
