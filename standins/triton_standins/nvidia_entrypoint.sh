#!/bin/bash
# Stand-in for NGC's entrypoint: a short banner on stderr, then the command.
{
  echo
  echo "============================="
  echo "== Triton Inference Server =="
  echo "============================="
  echo
  echo "NVIDIA Release ${NVIDIA_TRITON_SERVER_VERSION:-?} (build ${NVIDIA_BUILD_ID:-?})"
  echo "Triton Server Version ${TRITON_SERVER_VERSION:-?}"
  echo
  echo "triton-composer stand-in image: a CPU-only Triton server from the nvidia-pytriton wheel."
  echo
} >&2
if [ $# -eq 0 ]; then
  exec /bin/bash
fi
exec "$@"
