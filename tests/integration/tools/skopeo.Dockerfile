# skopeo with sigstore signatures, the independent implementation the supply-chain tests check the
# composer's against. Debian 12's own skopeo and podman are built with sigstore disabled ("Debian-local
# change: sigstore disabled", both to sign and to verify); Debian 13's skopeo (1.18) has it again,
# so the tests run that one, in a container of the stand-ins' Debian root, from Debian's own mirror.
FROM localhost/standin/debian-minbase:bookworm
RUN printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      > /etc/apt/sources.list.d/trixie.sources \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t trixie skopeo ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && skopeo --version
LABEL org.triton-composer.test-tool="skopeo-sigstore"
