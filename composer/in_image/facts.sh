#!/bin/sh
# Runs inside a built image (no network; no python needed: a min-based image may have none).
# Prints what the image holds, for its SBOM, in sections the host parses (composer/sbom.py):
# the dpkg database, the OS release, the metadata head of every installed Python distribution,
# and the composer's own records. Reads only; writes nothing.
mark='@@triton-composer-facts@@'
section() { printf '%s %s\n' "$mark" "$1"; }
section os-release
cat /etc/os-release 2>/dev/null
section dpkg-status
cat /var/lib/dpkg/status 2>/dev/null
find / -xdev \( -path '*.dist-info/METADATA' -o -path '*.egg-info/PKG-INFO' \) -type f 2>/dev/null | LC_ALL=C sort |
while IFS= read -r metadata; do
    section "python $metadata"
    sed '/^[[:space:]]*$/q' "$metadata"
done
for record in collected composition; do
    if [ -f "/opt/tritonserver/$record.json" ]; then
        section "$record"
        cat "/opt/tritonserver/$record.json"
    fi
done
section end
