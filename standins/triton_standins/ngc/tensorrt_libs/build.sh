#!/bin/sh
# Builds the TensorRT 10 stand-in libraries: build.sh SRC OUT CUDART_DIR VERSION
# needs: gcc libc6-dev binutils
# VERSION is the release's TensorRT (10.MINOR.PATCH). OUT gets libnvinfer.so.VERSION,
# libnvinfer_plugin.so.VERSION, libnvonnxparser.so.VERSION (sonames .so.10) and
# libnvinfer_builder_resource.so.VERSION (soname the file name), code only (pad.sh grows them to
# size). CUDART_DIR holds the release's libcudart.so.<CUDA major> (from NVIDIA's wheel): libnvinfer
# links it by soname, with no RUNPATH, as NGC's min image finds it in the system.
set -eu
src=$1 out=$2 cudart=$3 version=$4
case $version in 10.*.*) ;; *) echo "build.sh: VERSION must be 10.MINOR.PATCH, not '$version'" >&2; exit 2 ;; esac
minor=$(echo "$version" | cut -d. -f2) patch=$(echo "$version" | cut -d. -f3)
flags="-O2 -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -Wall -Wextra -Werror -DTRT_MINOR=$minor -DTRT_PATCH=$patch"
mkdir -p "$out"
cd "$out"
# The link needs a name ld can open: a private libcudart.so link, removed afterwards.
tmp=$(mktemp -d)
found=$(ls "$cudart"/libcudart.so.* | head -1)
[ -n "$found" ] || { echo "build.sh: no libcudart.so.* in $cudart" >&2; exit 1; }
ln -s "$found" "$tmp/libcudart.so"
lib() { # lib NAME SONAME SOURCE [LIBS...]
  name=$1 soname=$2 source=$3
  shift 3
  gcc $flags -I"$src" -shared -Wl,-soname,"$soname" -Wl,--no-undefined -o "$name" "$src/$source" "$@" -lc
}
lib libnvinfer.so.$version libnvinfer.so.10 nvinfer.c -L"$tmp" -lcudart
ln -sf libnvinfer.so.$version libnvinfer.so.10
lib libnvinfer_plugin.so.$version libnvinfer_plugin.so.10 nvinfer_plugin.c -L. -l:libnvinfer.so.10
lib libnvonnxparser.so.$version libnvonnxparser.so.10 nvonnxparser.c
lib libnvinfer_builder_resource.so.$version libnvinfer_builder_resource.so.$version builder_resource.c
rm -f libnvinfer.so.10
rm -rf "$tmp"
