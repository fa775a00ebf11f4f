"""PodmanEngine: Podman's service, which serves the Docker API but builds its own way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import BinaryIO, Iterator, Mapping

import docker.utils

from composer.core.errors import BuildFailed
from composer.engine import locks
from composer.engine.docker import DockerEngine
from composer.engine.errors import _response_message

NAMES_LOCK = "image-names"  # Podman 4.3 rewrites an image's whole name list on each tag and untag


class PodmanEngine(DockerEngine):
    """Podman's service: the Docker API, except for builds (its libpod endpoint keeps a build
    off the network and keeps stage images); chosen by connect() from the endpoint's version."""

    is_podman = True
    loads_partial_archives = False  # containers/image's docker-archive reader wants every layer
    archives_keep_owners = False  # a container's archive names every file root's (and holds its hostname files)
    builds_on_files = False  # buildah builds only the stages its target needs; it loads whole archives only
    takes_cache_from = False  # its cache-from names a registry repository: a --no-cache run takes no cache

    def export_tree(self, image: str, *, labels: Mapping[str, str] | None = None) -> Iterator[bytes]:
        """The container's export, not its archive: Podman's archive of a path names every file
        root's, its export keeps the owners (and adds the device nodes it makes in /dev)."""
        return self._through_container(image, f"cannot read / of {image[:19]}", labels,
                                       lambda cid: self._api.export(cid, chunk_size=1 << 20))

    def _identity_in(self, info: dict) -> str:
        """Podman's storage root: its `info` ID is new on every request, so two runs on one service
        would never share a lock (both made the same pruned base at once)."""
        root = str(info.get("DockerRootDir") or "")
        return f"podman:{root}" if root else ""

    # Podman 4.3 (containers/common 0.50) tags and untags by reading an image's names and writing the
    # whole list back: two runs naming one image at once (reproducible builds make the same image)
    # lose one's change, and a removed hold came back after its run ended. The composer's own name
    # changes on one Podman storage go one at a time, across every process of this host.

    def _naming(self):
        return locks.making_host(self.identity(), NAMES_LOCK)

    def tag(self, image_id: str, ref: str) -> None:
        with self._naming():
            super().tag(image_id, ref)

    def remove_image(self, ref: str, *, force: bool = False, prune: bool = True) -> None:
        with self._naming():
            super().remove_image(ref, force=force, prune=prune)

    def load(self, archive: Path) -> None:
        with self._naming():
            super().load(archive)

    def load_stream(self, archive: BinaryIO, what: str) -> None:
        with self._naming():
            super().load_stream(archive, what)

    def _build_events(self, context, dockerfile, tag, labels, network_mode, buildargs, nocache,
                      target=None, cache_from=()) -> Iterator[dict]:
        """A build through Podman's own endpoint: its Docker-compatible one ignores network_mode
        "none" (RUN steps would share the host's network), the libpod one takes networkmode=1.
        layers=1 keeps stage images as Docker's builder does: without it, Podman 4.3 deletes a
        stage that is only a FROM, and that is the base image itself."""
        if network_mode not in (None, "none"):
            raise BuildFailed(f"image build failed: Podman builds take no network mode {network_mode!r}")
        api = self._api
        params = {"dockerfile": dockerfile, "labels": json.dumps(dict(labels or {})),
                  "buildargs": json.dumps(dict(buildargs or {})), "rm": "1", "forcerm": "1", "layers": "1"}
        if tag:
            params["t"] = tag
        if nocache:
            params["nocache"] = "1"
        if target:
            params["target"] = target
        if network_mode == "none":
            params["networkmode"] = "1"  # buildah's NetworkDisabled
        archive = docker.utils.tar(str(context))
        response = None
        try:
            response = api.post(f"{api.base_url}/v4.0.0/libpod/build", params=params, data=archive, stream=True,
                                headers={"Content-Type": "application/x-tar"}, timeout=api.timeout)
            if response.status_code != 200:
                raise BuildFailed(f"image build failed: {_response_message(response)}")
            for line in response.iter_lines():
                if line.strip():
                    event = json.loads(line)
                    if "error" in event:
                        event["error"] = str(event["error"])
                    yield event
        finally:
            if response is not None:  # closed: the service stops the build
                response.close()
            archive.close()
