"""An image whose left-out layer went from the engine while it loaded is loaded whole (pipeline)."""

from __future__ import annotations

import pytest

from composer.core.errors import BuildFailed
from composer.pipeline import loaded_whole_if_need_be

GONE = ("cannot load the composed image (t:1): open /var/lib/docker/tmp/docker-import-1/e94c/layer.tar: "
        "no such file or directory")


def test_a_layer_gone_meanwhile_loads_the_image_again_with_every_layer():
    asked, lines = [], []

    def assemble_with(reuse: bool):
        asked.append(reuse)
        if reuse:
            raise BuildFailed(GONE)
        return "image"

    assert loaded_whole_if_need_be(assemble_with, True, lines.append) == "image"
    assert asked == [True, False] and "loading it whole" in lines[0]


@pytest.mark.parametrize("reuse, message", [(False, GONE), (True, "cannot load the composed image: disk full")])
def test_any_other_failure_stands_and_is_not_tried_again(reuse, message):
    asked = []

    def assemble_with(reusing: bool):
        asked.append(reusing)
        raise BuildFailed(message)

    with pytest.raises(BuildFailed) as raised:
        loaded_whole_if_need_be(assemble_with, reuse, lambda line: None)
    assert raised.value.message == message and asked == [reuse]
