#!/bin/sh
# Builds the onnxruntime backend: build.sh SRC OUT LIBTRITONSERVER ORT_CAPI_DIR
# needs: gcc libc6-dev binutils
# SRC is this folder; its parent holds the files the stand-in backends share. ORT_CAPI_DIR is
# the unpacked onnxruntime-gpu 1.19.2 wheel's onnxruntime/capi/ folder. OUT gets
# libtriton_onnxruntime.so only (NEEDED libonnxruntime.so.1, RUNPATH $ORIGIN): the recipe lays
# ONNX Runtime's libraries next to it under NGC's names. With LIBTRITONSERVER (may be empty) it
# also proves that the server exports every function the backend calls.
set -eu
src=$1 out=$2 server=${3:-} ort=$4
flags="-O2 -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -Wall -Wextra -Werror -DBK_NAME=\"onnxruntime\""
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
found=$(ls "$ort"/libonnxruntime.so.1.* "$ort/libonnxruntime.so.1" 2>/dev/null | head -1)
[ -n "$found" ] || { echo "build.sh: no libonnxruntime.so.1 in $ort" >&2; exit 1; }
ln -s "$(cd "$(dirname "$found")" && pwd)/$(basename "$found")" "$tmp/libonnxruntime.so.1"
for c in "$src/onnxruntime.c" "$src/../backend_common.c" "$src/../json.c"; do
  gcc $flags -I"$src/.." -I"$src" -c -o "$tmp/$(basename "$c" .c).o" "$c"
done
gcc -shared -Wl,-soname,libtriton_onnxruntime.so -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN' \
  -o "$out/libtriton_onnxruntime.so" "$tmp"/*.o -L"$tmp" -l:libonnxruntime.so.1
if [ -n "$server" ]; then
  gcc -shared -Wl,--no-undefined -o "$tmp/check.so" "$tmp"/*.o -L"$tmp" -l:libonnxruntime.so.1 "$server"
fi
