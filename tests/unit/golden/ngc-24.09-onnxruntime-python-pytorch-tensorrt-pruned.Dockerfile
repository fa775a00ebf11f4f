# Rendered by triton-composer 0.1.0 from dockerfiles/compose.Dockerfile.j2; edit the composition, not this file.
# Triton 24.09 (server 2.50.0): backends onnxruntime, python, pytorch, tensorrt

# The pruned base, made by pruned-base/Dockerfile (composer build passes its image id).
ARG PRUNED_BASE

FROM nvcr.io/nvidia/tritonserver@sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff AS full

FROM nvcr.io/nvidia/tritonserver@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa AS min

# What the selected parts need at run time and the min image lacks (shared libraries, the
# python the python backend stub was built for) is found from the files themselves by
# collect.py, inside the full image: no package manager, no network.
FROM full AS collect
USER root
COPY --from=min /etc/ld.so.cache /composer/min-ld.so.cache
COPY collect.py probe.py elfdeps.py /composer/
RUN ["python3", "/composer/collect.py", "--root", "/opt/tritonserver", "--min-ld-cache", "/composer/min-ld.so.cache", "--out", "/composer/rootfs", "--python-out", "/composer/python-rootfs", "bin", "lib", "LICENSE", "TRITON_VERSION", "NVIDIA_Deep_Learning_Container_License.pdf", "backends/onnxruntime", "backends/python", "backends/pytorch", "backends/tensorrt"]

# What the image copies of collect's work, marked for composer build to read (the mark names what
# the composition is made of; the steps before it are shared by every build of the same inputs).
FROM collect AS collected
ARG COMPOSER_KEY=render
LABEL org.triton-composer.cached-stage="collected ${COMPOSER_KEY}"

# The pruned base (--base pruned): prune.py decides, from the min image's dpkg database and the
# files of the full image (a superset of the min image's), which packages and files of the min
# image the selection needs (its report: /opt/tritonserver/pruned.json). The base itself, a fresh tree of
# only those, is built by pruned-base/Dockerfile and passed in as PRUNED_BASE (composer build makes
# it once per min image and selection, and reuses it); its decide stage is this one.
FROM collect AS decide
COPY --from=min /var/lib/dpkg /composer/min-dpkg
COPY prune.py pydists.py loaded-at-run-time.json /composer/
RUN ["python3", "/composer/prune.py", "--root", "/opt/tritonserver", "--min-dpkg", "/composer/min-dpkg", "--loaded", "/composer/loaded-at-run-time.json", "--out", "/composer/prune", "bin", "lib", "LICENSE", "TRITON_VERSION", "NVIDIA_Deep_Learning_Container_License.pdf", "backends/onnxruntime", "backends/python", "backends/pytorch", "backends/tensorrt"]
ARG COMPOSER_KEY=render
LABEL org.triton-composer.cached-stage="decide ${COMPOSER_KEY}"

FROM ${PRUNED_BASE} AS composed-files
ENV \
    PATH="/usr/local/cuda/bin:/usr/bin:/bin" \
    NVIDIA_REQUIRE_CUDA="cuda>=9.0"
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]
USER root
COPY --from=decide /composer/prune/pruned.json /opt/tritonserver/pruned.json
COPY --chown=1000:1000 --from=full /opt/tritonserver/bin /opt/tritonserver/bin
COPY --chown=1000:1000 --from=full /opt/tritonserver/lib /opt/tritonserver/lib
COPY --chown=1000:1000 --from=full /opt/tritonserver/LICENSE /opt/tritonserver/LICENSE
COPY --chown=1000:1000 --from=full /opt/tritonserver/TRITON_VERSION /opt/tritonserver/TRITON_VERSION
COPY --chown=1000:1000 --from=full /opt/tritonserver/NVIDIA_Deep_Learning_Container_License.pdf /opt/tritonserver/NVIDIA_Deep_Learning_Container_License.pdf
COPY --from=collected /composer/rootfs/ /
COPY --from=collected /composer/python-rootfs/ /
COPY --chown=1000:1000 --from=full /opt/tritonserver/backends/onnxruntime /opt/tritonserver/backends/onnxruntime
COPY --chown=1000:1000 --from=full /opt/tritonserver/backends/python /opt/tritonserver/backends/python
COPY --chown=1000:1000 --from=full /opt/tritonserver/backends/pytorch /opt/tritonserver/backends/pytorch
COPY --chown=1000:1000 --from=full /opt/tritonserver/backends/tensorrt /opt/tritonserver/backends/tensorrt
COPY --from=full /opt/nvidia/entrypoint.d/ /opt/nvidia/entrypoint.d/

# What the image's own tools write over the copied files: the loader's cache of the copied
# libraries, the server's user as NGC images have it (from 24.11 NGC first removes the user
# `ubuntu`, which holds uid 1000 on Ubuntu 24.04), the CUDA forward-compatibility
# libraries wired as NGC's GPU images do, the backends' python byte-code (NGC's images
# compile it at each start). system.sh also gathers what these steps wrote
# into /composer-system/tree, which the image copies as one layer; times come from SOURCE_DATE_EPOCH.
FROM composed-files AS system
ARG SOURCE_DATE_EPOCH=0
COPY system.sh /composer-system/
RUN ["/bin/sh", "/composer-system/system.sh", "/composer-system/tree", "--cuda-compat", "--byte-code", "/opt/tritonserver/backends"]
ARG COMPOSER_KEY=render
LABEL org.triton-composer.cached-stage="system ${COMPOSER_KEY}"

FROM composed-files AS composed
COPY --from=system /composer-system/tree/ /
COPY --chown=1000:1000 composition.json /opt/tritonserver/composition.json
ENV \
    TRITON_SERVER_VERSION="2.50.0" \
    NVIDIA_TRITON_SERVER_VERSION="24.09" \
    TRITON_SERVER_USER="triton-server" \
    TRITON_SERVER_GPU_ENABLED="1" \
    PATH="/opt/tritonserver/bin:${PATH}" \
    UCX_MEM_EVENTS="no" \
    TCMALLOC_RELEASE_RATE="200" \
    DEBIAN_FRONTEND="noninteractive" \
    TF_ADJUST_HUE_FUSED="1" \
    TF_ADJUST_SATURATION_FUSED="1" \
    TF_ENABLE_WINOGRAD_NONFUSED="1" \
    TF_AUTOTUNE_THRESHOLD="2" \
    LD_LIBRARY_PATH="/opt/hpcx/ucc/lib/:/opt/hpcx/ucx/lib/${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
WORKDIR /opt/tritonserver
LABEL \
    com.nvidia.tritonserver.version="2.50.0" \
    org.opencontainers.image.base.digest="sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/tritonserver:24.09-py3-min" \
    org.opencontainers.image.created="2024-09-01T00:00:00Z" \
    org.opencontainers.image.title="Triton Inference Server (composed)" \
    org.opencontainers.image.version="24.09" \
    org.triton-composer.backends="onnxruntime,python,pytorch,tensorrt" \
    org.triton-composer.full-image="nvcr.io/nvidia/tritonserver:24.09-py3" \
    org.triton-composer.release="24.09" \
    org.triton-composer.version="0.1.0"
ARG COMPOSER_KEY=render
LABEL org.triton-composer.cached-stage="composed ${COMPOSER_KEY}"

# The proof, before the tag moves: the image's own loader resolves every NEEDED entry of every ELF
# file in its library folders and /opt/tritonserver, and every library the selection loads by name at run
# time is there. A miss fails the build, naming the file and the library. The image copies the
# proof's verdict, so every builder (BuildKit and Podman build only what the image needs) runs it.
FROM composed AS proof
COPY prove.sh /composer-proof/
COPY --from=decide /composer/prune/required.txt /composer/prune/unresolved.txt /composer-proof/
RUN ["/bin/sh", "/composer-proof/prove.sh", "/composer-proof/required.txt", "/composer-proof/proved.txt"]
ARG COMPOSER_KEY=render
LABEL org.triton-composer.cached-stage="proof ${COMPOSER_KEY}"

FROM composed
COPY --from=proof /composer-proof/proved.txt /opt/tritonserver/proved.txt
