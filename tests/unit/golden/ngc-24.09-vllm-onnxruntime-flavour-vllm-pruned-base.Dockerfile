# Rendered by triton-composer 0.1.0 from dockerfiles/pruned-base.Dockerfile.j2; edit the composition, not this file.
# The pruned base of the composition in ../Dockerfile (Triton 24.09: onnxruntime, python, vllm):
# only the packages and files of the min image the selection needs, one stage per family of files
# (the distribution's core first, the dpkg database last), each holding only its files, so
# compositions keeping the same family share its layer; none over 2 GB. composer build builds the
# stage split and writes each family as one layer itself from that one tree, by the families'
# lists (the same files, the same bytes, whichever builder ran these steps), once per min image and
# selection, and passes the base's id to ../Dockerfile as PRUNED_BASE; built by hand, each
# family's stage keeps only its files and the last stage copies them.

FROM localhost/standin-ngc/tritonserver:24.09-py3 AS full

FROM localhost/standin-ngc/tritonserver:24.09-vllm-python-py3 AS min

# What the selected parts need at run time and the min image lacks (shared libraries, the
# python the python backend stub was built for) is found from the files themselves by
# collect.py, inside the full image: no package manager, no network.
FROM full AS collect
USER root
COPY --from=min /etc/ld.so.cache /composer/min-ld.so.cache
COPY collect.py probe.py elfdeps.py /composer/
RUN ["python3", "/composer/collect.py", "--root", "/opt/tritonserver", "--min-ld-cache", "/composer/min-ld.so.cache", "--out", "/composer/rootfs", "backends/onnxruntime"]


FROM min AS decide
USER root
COPY --from=collect /composer/rootfs/ /
COPY --from=collect /opt/tritonserver/backends/onnxruntime /opt/tritonserver/backends/onnxruntime
COPY --from=min /var/lib/dpkg /composer/min-dpkg
COPY collect.py probe.py elfdeps.py prune.py pydists.py loaded-at-run-time.json /composer/
RUN ["python3", "/composer/prune.py", "--root", "/opt/tritonserver", "--min-dpkg", "/composer/min-dpkg", "--loaded", "/composer/loaded-at-run-time.json", "--out", "/composer/prune", "--python", "bin", "lib", "backends/python", "backends/vllm", "backends/onnxruntime"]
LABEL org.triton-composer.build-cache="pruned-base decide"

# The min image less what prune.py dropped: a layer of deletions only; its dpkg database lists
# exactly the packages kept, with their files (written at a fixed time). The files left are listed
# for the layers stage, less what the engine adds to a step where the image lacks it (Docker's
# /etc/mtab link, the files it mounts over): the list is the same under every builder.
FROM min AS pruned
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="pruned ${COMPOSER_RUN}"
USER root
COPY --from=decide /composer/prune/ /composer/prune/
RUN cd / && xargs --no-run-if-empty --delimiter='\n' rm -f -- < /composer/prune/drop.txt \
 && cp /composer/prune/dpkg/status /var/lib/dpkg/status \
 && cp -R /composer/prune/dpkg/info/. /var/lib/dpkg/info/ \
 && find /var/lib/dpkg -exec touch -h -d @0 {} + \
 && rm -rf /composer \
 && find / -xdev ! -type d ! -path /etc/hosts ! -path /etc/hostname ! -path /etc/resolv.conf ! -path /.dockerenv \
      ! \( -path /etc/mtab -lname /proc/mounts \) ! -path /composer-files.tsv -printf '%y\t%s\t%P\n' > /composer-files.tsv

# Which layer each file goes to (layers.py, by the families of layers.json), each family split
# under 2 GB where it is bigger.
FROM decide AS layers
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layers ${COMPOSER_RUN}"
COPY --from=pruned /composer-files.tsv /composer/files.tsv
COPY layers.py layers.json /composer/
RUN ["python3", "/composer/layers.py", "--files", "/composer/files.tsv", "--min-dpkg", "/composer/min-dpkg", "--kept", "/composer/prune/dpkg/status", "--table", "/composer/layers.json", "--out", "/composer/layers"]

# The pruned tree with each family's list beside it (/composer-layers): what composer build reads.
FROM pruned AS split
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="split ${COMPOSER_RUN}"
COPY --from=layers /composer/layers/ /composer-layers/
COPY keep_layer.sh /composer-layers/
LABEL org.triton-composer.cached-stage="split ${COMPOSER_RUN}"

# By hand: one stage per family, holding only its files (keep_layer.sh), copied by the last stage.

FROM split AS layer-00-core
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "--all-folders", "00-core"]
LABEL org.triton-composer.cached-stage="layer-00-core ${COMPOSER_RUN}"

FROM split AS layer-01-py-nvidia-1
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "01-py-nvidia-1"]
LABEL org.triton-composer.cached-stage="layer-01-py-nvidia-1 ${COMPOSER_RUN}"

FROM split AS layer-02-py-nvidia-2
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "02-py-nvidia-2"]
LABEL org.triton-composer.cached-stage="layer-02-py-nvidia-2 ${COMPOSER_RUN}"

FROM split AS layer-03-py-torch-1
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "03-py-torch-1"]
LABEL org.triton-composer.cached-stage="layer-03-py-torch-1 ${COMPOSER_RUN}"

FROM split AS layer-04-py-torch-2
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "04-py-torch-2"]
LABEL org.triton-composer.cached-stage="layer-04-py-torch-2 ${COMPOSER_RUN}"

FROM split AS layer-05-py-dists-1
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "05-py-dists-1"]
LABEL org.triton-composer.cached-stage="layer-05-py-dists-1 ${COMPOSER_RUN}"

FROM split AS layer-06-py-dists-2
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "06-py-dists-2"]
LABEL org.triton-composer.cached-stage="layer-06-py-dists-2 ${COMPOSER_RUN}"

FROM split AS layer-07-python
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "07-python"]
LABEL org.triton-composer.cached-stage="layer-07-python ${COMPOSER_RUN}"

FROM split AS layer-08-cuda-runtime
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "08-cuda-runtime"]
LABEL org.triton-composer.cached-stage="layer-08-cuda-runtime ${COMPOSER_RUN}"

FROM split AS layer-09-cublas
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "09-cublas"]
LABEL org.triton-composer.cached-stage="layer-09-cublas ${COMPOSER_RUN}"

FROM split AS layer-10-cudnn
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "10-cudnn"]
LABEL org.triton-composer.cached-stage="layer-10-cudnn ${COMPOSER_RUN}"

FROM split AS layer-11-cuda-fft-rand
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "11-cuda-fft-rand"]
LABEL org.triton-composer.cached-stage="layer-11-cuda-fft-rand ${COMPOSER_RUN}"

FROM split AS layer-12-cuda-sparse-solver
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "12-cuda-sparse-solver"]
LABEL org.triton-composer.cached-stage="layer-12-cuda-sparse-solver ${COMPOSER_RUN}"

FROM split AS layer-13-nccl
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "13-nccl"]
LABEL org.triton-composer.cached-stage="layer-13-nccl ${COMPOSER_RUN}"

FROM split AS layer-14-hpcx
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "14-hpcx"]
LABEL org.triton-composer.cached-stage="layer-14-hpcx ${COMPOSER_RUN}"

FROM split AS layer-15-cuda-profiling
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "15-cuda-profiling"]
LABEL org.triton-composer.cached-stage="layer-15-cuda-profiling ${COMPOSER_RUN}"

FROM split AS layer-16-tensorrt-1
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "16-tensorrt-1"]
LABEL org.triton-composer.cached-stage="layer-16-tensorrt-1 ${COMPOSER_RUN}"

FROM split AS layer-17-tensorrt-2
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "17-tensorrt-2"]
LABEL org.triton-composer.cached-stage="layer-17-tensorrt-2 ${COMPOSER_RUN}"

FROM split AS layer-18-rest
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "18-rest"]
LABEL org.triton-composer.cached-stage="layer-18-rest ${COMPOSER_RUN}"

FROM split AS layer-19-dpkg
ARG COMPOSER_RUN=render
LABEL org.triton-composer.stage="layer ${COMPOSER_RUN}"
RUN ["/bin/sh", "/composer-layers/keep_layer.sh", "19-dpkg", "layers.json"]
LABEL org.triton-composer.cached-stage="layer-19-dpkg ${COMPOSER_RUN}"

# The base, built by hand (docker build pruned-base/): the same files, as this builder writes a copy.
FROM scratch
COPY --from=layer-00-core / /
COPY --from=layer-01-py-nvidia-1 / /
COPY --from=layer-02-py-nvidia-2 / /
COPY --from=layer-03-py-torch-1 / /
COPY --from=layer-04-py-torch-2 / /
COPY --from=layer-05-py-dists-1 / /
COPY --from=layer-06-py-dists-2 / /
COPY --from=layer-07-python / /
COPY --from=layer-08-cuda-runtime / /
COPY --from=layer-09-cublas / /
COPY --from=layer-10-cudnn / /
COPY --from=layer-11-cuda-fft-rand / /
COPY --from=layer-12-cuda-sparse-solver / /
COPY --from=layer-13-nccl / /
COPY --from=layer-14-hpcx / /
COPY --from=layer-15-cuda-profiling / /
COPY --from=layer-16-tensorrt-1 / /
COPY --from=layer-17-tensorrt-2 / /
COPY --from=layer-18-rest / /
COPY --from=layer-19-dpkg / /
