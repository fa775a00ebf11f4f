# Rendered by triton-composer from dockerfiles/sbom.Dockerfile.j2: the composed image's last layer,
# its SBOM (made on the host from what the built image holds) and labels stating the versions inside.
FROM sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
COPY sbom.cdx.json /opt/tritonserver/sbom.cdx.json
LABEL \
    org.triton-composer.numpy.version="1.26.4" \
    org.triton-composer.os="debian 12" \
    org.triton-composer.python.version="3.11" \
    org.triton-composer.sbom="/opt/tritonserver/sbom.cdx.json"
