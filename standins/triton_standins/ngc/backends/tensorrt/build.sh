#!/bin/sh
# Builds the tensorrt backend: build.sh SRC OUT LIBTRITONSERVER TRT_LIB_DIR
# needs: gcc libc6-dev binutils
# SRC is this folder; its parent holds the files the stand-in backends share. OUT gets
# libtriton_tensorrt.so, NEEDED libnvinfer.so.10 and libnvinfer_plugin.so.10 and no RUNPATH:
# at run time they come from the system library path, as in NGC's min image. TRT_LIB_DIR holds
# the TensorRT (stand-in) libraries, *.so.10.MINOR.PATCH or their .so.10 links; the backend is
# built for that TensorRT (it refuses another minor at load time, as NGC's does). With LIBTRITONSERVER
# (may be empty) it also proves that the server exports every function the backend calls.
set -eu
src=$1 out=$2 server=${3:-} trt=$4
version=$(ls "$trt"/libnvinfer.so.10.*.* 2>/dev/null | head -1 | sed 's/.*libnvinfer\.so\.//')
[ -n "$version" ] || { echo "build.sh: no libnvinfer.so.10.MINOR.PATCH in $trt" >&2; exit 1; }
flags="-O2 -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -Wall -Wextra -Werror -DBK_NAME=\"tensorrt\""
flags="$flags -DTRT_MINOR=$(echo "$version" | cut -d. -f2) -DTRT_PATCH=$(echo "$version" | cut -d. -f3)"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# ld resolves -l:NAME by file name: give it the sonames in a private folder.
for lib in libnvinfer libnvinfer_plugin; do
  found=$(ls "$trt/$lib.so.10" "$trt"/$lib.so.10.*.* 2>/dev/null | head -1)
  [ -n "$found" ] || { echo "build.sh: no $lib.so.10 in $trt" >&2; exit 1; }
  ln -s "$(cd "$(dirname "$found")" && pwd)/$(basename "$found")" "$tmp/$lib.so.10"
done
for c in "$src/tensorrt.c" "$src/../backend_common.c" "$src/../json.c"; do
  gcc $flags -I"$src/.." -c -o "$tmp/$(basename "$c" .c).o" "$c"
done
# --no-as-needed: the plugin library is NEEDED as in NGC's backend even if few calls reach it.
gcc -shared -Wl,-soname,libtriton_tensorrt.so -Wl,--no-as-needed -o "$out/libtriton_tensorrt.so" "$tmp"/*.o \
  -L"$tmp" -l:libnvinfer.so.10 -l:libnvinfer_plugin.so.10
if [ -n "$server" ]; then
  gcc -shared -Wl,--no-undefined -Wl,-rpath-link,"$tmp" -o "$tmp/check.so" "$tmp"/*.o \
    -L"$tmp" -l:libnvinfer.so.10 -l:libnvinfer_plugin.so.10 "$server"
fi
