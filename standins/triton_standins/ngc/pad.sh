#!/bin/sh
# Grows a shared library to about a given size: pad.sh LIB BYTES SEED
# needs: binutils openssl
# Stand-in libraries (TensorRT's) are small code; NGC's files weigh hundreds of MB. The bulk
# goes into one non-allocated section (.triton_composer_pad: never mapped when the library
# loads) of pseudo-random bytes, so layers compress as the real ones do. The bytes come from
# AES-256-CTR over zeros keyed by SHA-256(SEED): the same SEED gives the same file, so image
# layers stay reproducible. The script then proves the library loads as before: the same
# dynamic symbols and the same program headers (what the loader maps).
set -eu
lib=$1 want=$2 seed=$3
case $want in '' | *[!0-9]*) echo "pad.sh: BYTES must be a whole number, not '$want'" >&2; exit 2 ;; esac
[ -f "$lib" ] || { echo "pad.sh: $lib is not a file" >&2; exit 2; }
have=$(wc -c <"$lib")
# objcopy adds the section's header and aligns: a few hundred bytes over the payload.
grow=$((want - have - 512))
if [ "$grow" -le 0 ]; then
  echo "pad.sh: $lib is already $have bytes (asked for about $want)" >&2
  exit 0
fi
# Work next to the library: the padded file then replaces it by a rename, not a second copy.
tmp=$(mktemp -d "$(dirname "$lib")/.pad.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
key=$(printf '%s' "$seed" | sha256sum | cut -c1-64)
iv=$(printf '%s' "$seed" | md5sum | cut -c1-32)
openssl enc -aes-256-ctr -nosalt -K "$key" -iv "$iv" -in /dev/zero 2>/dev/null | head -c "$grow" >"$tmp/pad" || true
[ "$(wc -c <"$tmp/pad")" -eq "$grow" ] || { echo "pad.sh: could not make $grow bytes of padding" >&2; exit 1; }
nm -D "$lib" >"$tmp/symbols.before"
readelf -lW "$lib" | grep -v '^Elf file type' >"$tmp/segments.before"
objcopy --add-section .triton_composer_pad="$tmp/pad" --set-section-flags .triton_composer_pad=contents,readonly \
  "$lib" "$tmp/padded"
nm -D "$tmp/padded" >"$tmp/symbols.after"
readelf -lW "$tmp/padded" | grep -v '^Elf file type' >"$tmp/segments.after"
cmp -s "$tmp/symbols.before" "$tmp/symbols.after" || { echo "pad.sh: padding changed the dynamic symbols of $lib" >&2; exit 1; }
cmp -s "$tmp/segments.before" "$tmp/segments.after" || { echo "pad.sh: padding changed what $lib maps" >&2; exit 1; }
readelf -SW "$tmp/padded" | grep -F .triton_composer_pad | grep -q ' A ' && { echo "pad.sh: the padding section would be loaded" >&2; exit 1; }
# Keep the file's mode; replace the library only once every check passed.
chmod --reference="$lib" "$tmp/padded"
mv "$tmp/padded" "$lib"
echo "pad.sh: $lib $have -> $(wc -c <"$lib") bytes (asked for about $want)"
