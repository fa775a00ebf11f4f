# A Docker engine that runs inside a container, as CI services (docker:dind) run it.
# Built by scripts/engine-in-container from the local Debian base; docker.io from Debian's mirror.
FROM localhost/standin/debian-minbase:bookworm
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io iptables ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/*
# The engine's storage must not be overlayfs on overlayfs: a volume is mounted here.
VOLUME /var/lib/docker
EXPOSE 2375
# The inner engine makes cgroups for its containers: the container's cgroup mounts become writable.
ENTRYPOINT ["sh", "-c", "for d in /sys/fs/cgroup /sys/fs/cgroup/*; do mount -o remount,bind,rw \"$d\" 2>/dev/null; done; exec dockerd --host=tcp://0.0.0.0:2375 --host=unix:///var/run/docker.sock --tls=false --storage-driver=overlay2 \"$@\"", "dockerd"]
