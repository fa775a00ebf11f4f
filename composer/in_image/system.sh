#!/bin/sh
# Runs in the system stage of a composition (the base with every part copied in): what the image's
# own tools write over the copied files, as NGC's final stage does it. POSIX sh and the base's own
# tools (ldconfig, shadow's useradd, coreutils, findutils, tar; python3 for byte-code only): no network.
#
# Usage: system.sh TREE [--cuda-compat] [--byte-code DIR]
#
#   - ldconfig: the loader's cache of the copied libraries;
#   - --byte-code DIR: python's byte-code of the python files under DIR (the backends'), made by the
#     image's python3 where there is one, checked by the source's hash (valid whatever times the
#     layers carry), so the server's start compiles nothing (NGC's images compile them at start);
#   - the server's user triton-server (uid and gid 1000), after removing the users that would hold
#     that uid (tensorrt-server, and from 24.11 Ubuntu's `ubuntu`);
#   - --cuda-compat: the CUDA forward-compatibility libraries wired where the image has them.
#
# Then every file these steps wrote (found by time, against a marker made first) is copied with its
# folders into TREE, owners, modes and times kept: the one layer the image gets from this stage;
# beside it, /composer-system/owners lists the tree's entries that are not root's.
# Times are SOURCE_DATE_EPOCH's where a step would write the clock into a file (the password
# file's "last changed" day), so the same inputs give the same bytes.
set -eu
tree=$1
shift
compat=0
byte_code=
while [ $# -gt 0 ]; do
  case $1 in
    --cuda-compat) compat=1 ;;
    --byte-code) byte_code=$2; shift ;;
    *) echo "system.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
epoch=${SOURCE_DATE_EPOCH:-0}
work=/composer-system
marker=$work/marker
touch "$marker"
sleep 1  # a file written in the marker's second is still newer than it (times are kept to the second)

ldconfig
if id -u tensorrt-server >/dev/null 2>&1; then userdel tensorrt-server; fi
if [ "$(id -u ubuntu 2>/dev/null)" = 1000 ]; then userdel ubuntu; fi
if [ "$(getent group 1000 | cut -d: -f1)" = ubuntu ]; then groupdel ubuntu; fi
if ! id -u triton-server >/dev/null 2>&1; then
  groupadd --gid 1000 triton-server
  useradd --uid 1000 --gid 1000 --shell /bin/bash --home-dir /home/triton-server --create-home triton-server
  # useradd writes today's day as the password's last change: the epoch's day instead.
  chage --lastday "$(date -u -d "@$epoch" +%Y-%m-%d)" triton-server
fi
if [ "$compat" = 1 ] && [ -n "${_CUDA_COMPAT_PATH:-}" ] && [ -d "${_CUDA_COMPAT_PATH}/lib.real" ]; then
  ln -sf "${_CUDA_COMPAT_PATH}/lib.real" "${_CUDA_COMPAT_PATH}/lib"
  echo "${_CUDA_COMPAT_PATH}/lib" > /etc/ld.so.conf.d/00-cuda-compat.conf
  ldconfig
  rm -f "${_CUDA_COMPAT_PATH}/lib"
fi
if [ -n "$byte_code" ] && [ -d "$byte_code" ] && command -v python3 >/dev/null 2>&1; then
  # A file python cannot compile is one it would not import either: compileall's exit is not the build's.
  # PYTHONHASHSEED=0: a set constant is marshalled in hash order, which would differ run to run.
  PYTHONHASHSEED=0 python3 -m compileall -q -r 64 --invalidation-mode checked-hash "$byte_code" >/dev/null || true
fi

# What the steps wrote, with every folder above it (so the layer restates them as they are, never
# as a copy's defaults). Not the engine's own files of a step, nor ldconfig's auxiliary cache (inode
# numbers and times: another machine's are other ones).
cd /
find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./run -o -path ./tmp \
    -o -path ".$work" -o -path ./var/cache/ldconfig \) -prune \
    -o -newer "$marker" ! -path ./etc/hosts ! -path ./etc/hostname ! -path ./etc/resolv.conf \
    ! -path ./.dockerenv ! -path . -print > "$work/written"
# Each path and its folders up to "." (find names every one "./..."), by the shell's own expansion:
# a dirname process per folder took 20-30 s for the 2,400 byte-code files of a pytorch backend.
while IFS= read -r path; do
  while [ "$path" != "." ]; do
    printf '%s\n' "$path"
    path=${path%/*}
  done
done < "$work/written" > "$work/list"
LC_ALL=C sort -u "$work/list" -o "$work/list"
mkdir -p "$tree"
tar --create --no-recursion --numeric-owner --file - --files-from "$work/list" | tar --extract --same-owner \
  --same-permissions --numeric-owner --directory "$tree" --file -
# The tree's entries that are not root's, "uid:gid path" NUL-separated: an engine whose archive of
# a stage names every file root's (Podman's) loses them; the composer puts them back from this list.
(cd "$tree" && find . \( ! -user 0 -o ! -group 0 \) -printf '%U:%G %P\0') > "$work/owners"
rm -f "$marker" "$work/written" "$work/list"
