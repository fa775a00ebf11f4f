"""Progress reporting: long steps take an `on_line` callable and say what they do through it.

Nothing below the CLI prints; the CLI decides where lines go (stderr, or nowhere).
"""

from typing import Callable

LineSink = Callable[[str], None]


def quiet(_line: str) -> None:
    """The default sink: say nothing."""
