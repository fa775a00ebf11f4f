#!/bin/sh
# Build a TensorRT plan from an ONNX model on this container's GPU, with what the image holds:
# trtexec (PATH, or /usr/src/tensorrt/bin as NGC's TensorRT images lay it out), else TensorRT's
# python builder. Usage: build_plan.sh MODEL.onnx. Prints the plan in base64 between
# "composer-plan-begin" and "composer-plan-end", or "composer-plan-none: WHY" and exits 3.
# Run by composer/verify/plans.py, a plan being specific to the GPU and the TensorRT version.
onnx="$1"
plan=/tmp/composer-plan.$$
how=""
trtexec=$(command -v trtexec 2>/dev/null || true)
[ -z "$trtexec" ] && [ -x /usr/src/tensorrt/bin/trtexec ] && trtexec=/usr/src/tensorrt/bin/trtexec
if [ -n "$trtexec" ]; then
  if "$trtexec" --onnx="$onnx" --saveEngine="$plan" >/tmp/composer-plan.log 2>&1; then
    how=trtexec
  else
    echo "composer-plan-none: trtexec failed: $(tail -n 3 /tmp/composer-plan.log | tr '\n' ' ')"
    exit 3
  fi
else
  for python in python3 python; do
    command -v "$python" >/dev/null 2>&1 || continue
    "$python" - "$onnx" "$plan" <<'PY' && how="$python tensorrt" && break
import sys
try:
    import tensorrt as trt
except ImportError:
    sys.exit(4)
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
parser = trt.OnnxParser(network, logger)
with open(sys.argv[1], "rb") as handle:
    if not parser.parse(handle.read()):
        print("composer-plan-none: TensorRT cannot parse the ONNX model: "
              + "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
        sys.exit(3)
plan = builder.build_serialized_network(network, builder.create_builder_config())
if plan is None:
    print("composer-plan-none: TensorRT's builder made no plan on this GPU")
    sys.exit(3)
with open(sys.argv[2], "wb") as handle:
    handle.write(plan)
PY
    status=$?
    [ "$status" = 3 ] && exit 3
  done
fi
if [ -z "$how" ] || [ ! -s "$plan" ]; then
  echo "composer-plan-none: the image holds neither trtexec nor TensorRT's python builder"
  exit 3
fi
echo "composer-plan-by: $how"
echo composer-plan-begin
base64 "$plan"
echo composer-plan-end
