"""What a benchmark's builds leave untagged on the engine, found and removed at its end.

A build leaves untagged images the composer's own run labels do not reach: the stages of a
compose.py-style build (plain `docker build`), and a pruned base whose tag a later build of the
same inputs took. A benchmark notes the untagged images there before it starts and removes the new
ones when it ends.
"""

from __future__ import annotations

import docker


def untagged(client) -> set[str]:
    """Untagged images on the stand-ins or on a pruned base (the stages and old bases builds leave)."""
    found = set()
    for label in ("org.triton-composer.standin", "org.triton-composer.pruned-base"):
        found |= {image["Id"] for image in client.api.images(filters={"dangling": True, "label": label})}
    return found


def remove_new_untagged(client, before: set[str]) -> None:
    """What the run's builds left untagged (a compose.py-style stage, a base whose tag a later build
    of the same inputs took), newest first; not a stage of a build still at work on this host."""
    from composer.assembly.pruning import run_of
    from composer.engine.locks import live_runs

    live = live_runs()
    for _ in range(8):  # a parent goes once its child did
        left = []
        for image in untagged(client) - before:
            info = client.api.inspect_image(image)
            if run_of((info.get("Config") or {}).get("Labels") or {}) not in live:
                left.append((info.get("Created", ""), image))
        if not left:
            return
        for _created, image in sorted(left, reverse=True):
            try:
                client.api.remove_image(image, noprune=False)
            except docker.errors.APIError:
                pass
