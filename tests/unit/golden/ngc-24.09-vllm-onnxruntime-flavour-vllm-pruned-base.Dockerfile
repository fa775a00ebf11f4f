# Rendered by triton-composer 0.1.0 from dockerfiles/pruned-base.Dockerfile.j2; edit the composition, not this file.
# The pruned base of the composition in ../Dockerfile (Triton 24.09: onnxruntime, python, vllm):
# only the packages and files of the min image the selection needs, written FROM scratch as one
# fresh layer (deleting files in a later layer would not make the image smaller). composer build
# makes it once per min image and selection and passes its id to ../Dockerfile as PRUNED_BASE.

FROM localhost/standin-ngc/tritonserver:24.09-py3 AS full

FROM localhost/standin-ngc/tritonserver:24.09-vllm-python-py3 AS min

# What the selected parts need at run time and the min image lacks (shared libraries, the
# python the python backend stub was built for) is found from the files themselves by
# collect.py, inside the full image: no package manager, no network.
FROM full AS collect
USER root
COPY --from=min /etc/ld.so.cache /composer/min-ld.so.cache
COPY collect.py probe.py /composer/
RUN ["python3", "/composer/collect.py", "--root", "/opt/tritonserver", "--min-ld-cache", "/composer/min-ld.so.cache", "--out", "/composer/rootfs", "backends/onnxruntime"]


FROM min AS decide
LABEL org.triton-composer.stage="decide"
USER root
COPY --from=collect /composer/rootfs/ /
COPY --from=collect /opt/tritonserver/backends/onnxruntime /opt/tritonserver/backends/onnxruntime
COPY --from=min /var/lib/dpkg /composer/min-dpkg
COPY collect.py probe.py prune.py pydists.py loaded-at-run-time.json /composer/
RUN ["python3", "/composer/prune.py", "--root", "/opt/tritonserver", "--min-dpkg", "/composer/min-dpkg", "--loaded", "/composer/loaded-at-run-time.json", "--out", "/composer/prune", "--python", "bin", "lib", "backends/python", "backends/vllm", "backends/onnxruntime"]


# The min image less what prune.py dropped: a layer of deletions only; its dpkg database lists
# exactly the packages kept, with their files.
FROM min AS pruned
LABEL org.triton-composer.stage="pruned"
USER root
COPY --from=decide /composer/prune/ /composer/prune/
RUN cd / && xargs --no-run-if-empty --delimiter='\n' rm -f -- < /composer/prune/drop.txt \
 && cp /composer/prune/dpkg/status /var/lib/dpkg/status \
 && cp -R /composer/prune/dpkg/info/. /var/lib/dpkg/info/ \
 && rm -rf /composer

FROM scratch
COPY --from=pruned / /
