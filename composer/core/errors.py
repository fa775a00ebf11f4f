"""Errors that carry a message meant for the user.

Code below the CLI raises these; only the CLI turns them into output and an exit code,
so a helper never decides to end the process.
"""


class ComposerError(Exception):
    """A failure the user can act on; `message` is one line, printed as is."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Invalid(Exception):
    """A value that is not valid for its option; the message says what would be (the caller
    names the option: a flag on the command line, file:line: key: in a set). For a list,
    `item` is the index of the item at fault, so a set can name that item's line."""

    def __init__(self, message: str, item: int | None = None):
        super().__init__(message)
        self.item = item


class UsageError(ComposerError):
    """Bad input: an unknown backend, release, option value or file."""

    exit_code = 2


class EngineUnavailable(ComposerError):
    """No Docker engine answers."""


class EngineError(ComposerError):
    """The engine refused an operation on a container or an image."""


class ImageNotFound(ComposerError):
    """An image is neither local nor pullable."""


class RegistryError(ComposerError):
    """A registry refused or could not be reached."""


class BuildFailed(ComposerError):
    """The engine failed a build step."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class SmokeTestFailed(ComposerError):
    """The composed image did not serve its samples."""

    def __init__(self, message: str, report=None, log_tail: str = ""):
        super().__init__(message)
        self.report = report
        self.log_tail = log_tail


class NoSpace(ComposerError):
    """A build that does not fit (or did not) on the disk it writes to: the line names the disk."""


class RegistryUnavailable(RegistryError):
    """One try at a registry failed in a way a later try may not: the connection refused or lost,
    no answer in time, HTTP 5xx or 429. composer.registry.retries.RetryPolicy tries again; once its
    tries are spent the failure is a plain RegistryError ("unreachable after N tries")."""
