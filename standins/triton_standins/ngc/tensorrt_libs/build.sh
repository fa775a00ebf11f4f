#!/bin/sh
# Builds the TensorRT 10.4.0 stand-in libraries: build.sh SRC OUT CUDART_DIR
# needs: gcc libc6-dev binutils
# OUT gets libnvinfer.so.10.4.0, libnvinfer_plugin.so.10.4.0, libnvonnxparser.so.10.4.0 (sonames
# .so.10) and libnvinfer_builder_resource.so.10.4.0 (soname the file name), code only (pad.sh
# grows them to size). CUDART_DIR holds libcudart.so.12 (the nvidia-cuda-runtime-cu12 wheel's
# lib/): libnvinfer links it by soname, with no RUNPATH, as NGC's min image finds it in the system.
set -eu
src=$1 out=$2 cudart=$3
flags="-O2 -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -Wall -Wextra -Werror"
mkdir -p "$out"
cd "$out"
# The link needs a name ld can open: a private libcudart.so link, removed afterwards.
tmp=$(mktemp -d)
ln -s "$cudart/libcudart.so.12" "$tmp/libcudart.so"
lib() { # lib NAME SONAME SOURCE [LIBS...]
  name=$1 soname=$2 source=$3
  shift 3
  gcc $flags -I"$src" -shared -Wl,-soname,"$soname" -Wl,--no-undefined -o "$name" "$src/$source" "$@" -lc
}
lib libnvinfer.so.10.4.0 libnvinfer.so.10 nvinfer.c -L"$tmp" -lcudart
ln -sf libnvinfer.so.10.4.0 libnvinfer.so.10
lib libnvinfer_plugin.so.10.4.0 libnvinfer_plugin.so.10 nvinfer_plugin.c -L. -l:libnvinfer.so.10
lib libnvonnxparser.so.10.4.0 libnvonnxparser.so.10 nvonnxparser.c
lib libnvinfer_builder_resource.so.10.4.0 libnvinfer_builder_resource.so.10.4.0 builder_resource.c
rm -f libnvinfer.so.10
rm -rf "$tmp"
