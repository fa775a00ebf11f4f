#!/bin/sh
# Runs inside a composed image on a pruned base, before its tag moves (the proof stage): the
# image's own loader must resolve every NEEDED entry of every ELF file in the loader's folders
# (ld.so.conf, LD_LIBRARY_PATH) and in /opt/tritonserver, and every library the catalog says the
# selection loads by name at run time (required.txt, from prune.py) must be there. Driver
# libraries come from the host at run time (the NVIDIA container runtime), never the image.
# The first miss is one line, naming the file and the library, and the build fails.
# A NEEDED entry that a file of the Triton tree could not resolve before pruning either (listed
# beside REQUIRED_TXT in unresolved.txt by prune.py) is counted, not failed.
# Usage: prove.sh REQUIRED_TXT VERDICT (the verdict file is written only when the proof holds; the
# composed image copies it, so no builder can skip this stage)
set -u
required="$1"
verdict="$2"
folders="$(ldconfig -v 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p') $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' ')"
existing=""
for folder in $folders; do
  [ -d "$folder" ] && existing="$existing $folder"
done
checked=0
before_list="$(dirname "$required")/unresolved.txt"
excused=0
# resolves FILE SEARCH BEFORE [LIST]: FILE's NEEDED entries as the loader finds them with
# LD_LIBRARY_PATH=SEARCH; fails the proof at the first one it cannot find, unless it is the
# driver's or was unresolved before pruning too (in BEFORE, a comma list, or looked up in LIST on
# the first miss; those from LIST are counted). Returns 1 when ldd cannot read FILE.
resolves() {
  out=$(LD_LIBRARY_PATH="$2" ldd "$1" 2>/dev/null) || return 1
  before="$3"
  looked=""
  for lib in $(printf '%s\n' "$out" | sed -n 's/^[[:space:]]*\([^[:space:]]*\) => not found.*/\1/p'); do
    case "$lib" in  # the driver's
      libcuda.so*|libcudadebugger.so*|libnvidia-*|libnvcuvid.so*|libnvoptix.so*|lib*_nvidia*) continue ;;
    esac
    if [ -n "${4:-}" ] && [ -z "$looked" ]; then
      looked=1
      [ -f "$4" ] && before=$(awk -F '\t' -v f="$1" '$1 == f { print $2; exit }' "$4")
    fi
    case ",$before," in  # unresolved before pruning too: not pruning's doing
      *",$lib,"*) [ -n "${4:-}" ] && excused=$((excused + 1)); continue ;;
    esac
    echo "proof failed: $1 needs $lib, which the image lacks" >&2; exit 1
  done
  return 0
}
# shellcheck disable=SC2086
{  # the loader's folders as the loader reads them (flat); the Triton tree with all its folders
  find $existing -maxdepth 1 -type f \( -name '*.so' -o -name '*.so.*' \)
  find /opt/tritonserver -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \)
} 2>/dev/null | sort -u > /tmp/proof-files
while IFS= read -r file; do
  search="${LD_LIBRARY_PATH:-}"
  case "$file" in  # Triton's libraries lean on those the server (RUNPATH ../lib) or their folder loaded
    /opt/tritonserver/*) search="$(dirname "$file"):/opt/tritonserver/lib${search:+:$search}" ;;
  esac
  resolves "$file" "$search" "" "$before_list" || continue
  checked=$((checked + 1))
done < /tmp/proof-files
cache=$(ldconfig -p)
while IFS="$(printf '\t')" read -r lib why; do
  [ -n "$lib" ] || continue
  case "$lib" in
    /*) [ -e "$lib" ] && continue ;;
    *) printf '%s\n' "$cache" | grep -q "^[[:space:]]*$lib " && continue
       for folder in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
         [ -e "$folder/$lib" ] && continue 2
       done ;;
  esac
  echo "proof failed: $lib is missing ($why)" >&2
  exit 1
done < "$required"
python_note=""
listing="$(dirname "$required")/python"
if [ -d "$listing" ]; then  # a base with python distributions pruned (prune.py --python)
  dists=0
  while IFS="$(printf '\t')" read -r file before; do
    [ -n "$file" ] || continue
    [ -e "$file" ] || { echo "proof failed: $file (a file of a kept python distribution) is missing" >&2; exit 1; }
    resolves "$file" "$(dirname "$file")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$before" || continue
    dists=$((dists + 1))
  done < "$listing/elf.txt"
  modules=$(paste -sd, "$listing/imports.txt")
  if [ -n "$modules" ]; then
    python3 -c "import $modules" >/dev/null 2>/tmp/proof-import \
      || { echo "proof failed: python3 -c 'import $modules': $(tail -n 1 /tmp/proof-import)" >&2; exit 1; }
  fi
  python_note="; $dists ELF files of kept python distributions resolve; python3 imports ${modules:-nothing}"
fi
excused_note=""
[ "$excused" -gt 0 ] && excused_note=" ($excused entries unresolved in the full image too, left as they were)"
echo "proof: $checked ELF files resolve every NEEDED entry$excused_note; $(grep -c . "$required") run-time loaded libraries present$python_note" | tee "$verdict"
