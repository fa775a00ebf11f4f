#!/bin/sh
# Builds the identity backend folder: build.sh SRC OUT [LIBTRITONSERVER]
# With LIBTRITONSERVER, also proves that the server exports every function the backend calls.
set -eu
src=$1 out=$2 server=${3:-}
flags="-O2 -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-format-truncation"
mkdir -p "$out"
cd "$out"
gcc $flags -shared -Wl,-soname,libidentity_config.so -o libidentity_config.so "$src/identity_config.c"
gcc $flags -shared -Wl,-soname,libidentity_copy.so -o libidentity_copy.so "$src/identity_copy.c"
gcc $flags -fopenmp -I"$src" -c -o identity.o "$src/identity.c"
gcc -shared -fopenmp -Wl,-soname,libtriton_identity.so -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN' \
    -o libtriton_identity.so identity.o -L. -lidentity_config
if [ -n "$server" ]; then
  gcc -shared -fopenmp -Wl,--no-undefined -o /tmp/identity-check.so identity.o -L. -lidentity_config "$server"
  rm -f /tmp/identity-check.so
fi
rm -f identity.o
