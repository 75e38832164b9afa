#!/usr/bin/env bash
# Regenerate device/wire_pb2.py and device/wire_pb2_grpc.py from device/wire.proto.
# Use grpcio-tools 1.62.x (pip install -e '.[test]'): its stubs import under protobuf 4.25
# (TensorFlow 2.15's) and newer runtimes alike; newer grpcio-tools stubs do not.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/edge_rl/device"
cp "$root/device/wire.proto" "$tmp/edge_rl/device/"
python -m grpc_tools.protoc -I"$tmp" --python_out="$tmp" --grpc_python_out="$tmp" \
  "$tmp/edge_rl/device/wire.proto"
cp "$tmp/edge_rl/device/wire_pb2.py" "$tmp/edge_rl/device/wire_pb2_grpc.py" "$root/device/"
echo "wrote device/wire_pb2.py and device/wire_pb2_grpc.py"
