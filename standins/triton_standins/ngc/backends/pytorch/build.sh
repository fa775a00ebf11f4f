#!/bin/sh
# Builds the pytorch backend: build.sh SRC OUT LIBTRITONSERVER TORCH_DIR
# needs: gcc g++ libc6-dev libstdc++-12-dev binutils
# SRC is this folder; its parent holds the files the stand-in backends share. TORCH_DIR is the
# unpacked torch 2.5.1 wheel's torch/ folder (include/, lib/). OUT gets libtriton_pytorch.so
# only (NEEDED libtorch.so, libtorch_cpu.so, libc10.so; RUNPATH $ORIGIN): the recipe lays
# libtorch's libraries next to it. Compiling against torch's headers takes 2-3 GB of memory and
# a few minutes. With LIBTRITONSERVER (may be empty) it also proves that the server exports every
# function the backend calls.
set -eu
src=$1 out=$2 server=${3:-} torch=$4
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The pip wheels of torch 2.5 use the pre-C++11 std::string ABI: match what libc10 exports.
if nm -DC --defined-only "$torch/lib/libc10.so" | grep -q 'c10::Error::Error(c10::SourceLocation, std::string)'; then
  abi=0
elif nm -DC --defined-only "$torch/lib/libc10.so" | grep -q 'c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string'; then
  abi=1
else
  echo "build.sh: cannot tell the C++ ABI of $torch/lib/libc10.so" >&2
  exit 1
fi
common="-O2 -fPIC -fvisibility=hidden -Wall -Wextra -Werror -DBK_NAME=\"pytorch\""
for c in "$src/../backend_common.c" "$src/../json.c"; do
  gcc $common -std=c11 -D_GNU_SOURCE -I"$src/.." -c -o "$tmp/$(basename "$c" .c).o" "$c"
done
# torch's headers are -isystem: their own warnings are not this backend's to fix.
# libtorch 2.5 builds as C++17; newer libtorch's headers require C++20 (ATen.h says so).
std=c++17
if grep -q 'C++20 or later' "$torch/include/ATen/ATen.h" 2>/dev/null; then std=c++20; fi
g++ $common -std=$std -D_GLIBCXX_USE_CXX11_ABI=$abi -I"$src/.." \
  -isystem "$torch/include" -isystem "$torch/include/torch/csrc/api/include" -c -o "$tmp/pytorch.o" "$src/pytorch.cc"
# --no-as-needed: libtorch.so is NEEDED as in NGC's backend (it brings libtorch_cuda and its CUDA libraries).
link="-L$torch/lib -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed"
g++ -shared -Wl,-soname,libtriton_pytorch.so -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN' \
  -o "$out/libtriton_pytorch.so" "$tmp"/*.o $link
if [ -n "$server" ]; then
  g++ -shared -Wl,--no-undefined -Wl,--allow-shlib-undefined -o "$tmp/check.so" "$tmp"/*.o $link "$server"
fi
