"""Retries: how often a registry is tried again, and how long the composer waits between tries.

Apart from the API client so the push and copy steps, which retry a whole blob, and the command
line, which reads --registry-tries and --registry-backoff, share the one policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from composer.core import interrupts
from composer.core.errors import RegistryError, RegistryUnavailable

# A registry that drops a connection, restarts or says 5xx/429 is tried again.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_DELAY = 30.0  # seconds between two tries at most, however many tries are allowed


@dataclass(frozen=True)
class RetryPolicy:
    """How often the composer tries a registry again, and how long it waits between tries (`backoff`
    seconds, doubled each time, at most MAX_DELAY). A request whose body can be sent again is
    retried as it is; a blob's upload (streamed: sent once) is retried whole by `run`, which first
    asks whether the registry holds the blob already. One try (the default of a bare client) is no
    retry; the command's clients take --registry-tries and --registry-backoff."""

    tries: int = 1
    backoff: float = 1.0
    sleep: Callable[[float], None] = field(default=interrupts.pause, compare=False, repr=False)
    say: Callable[[str], None] = field(default=lambda line: None, compare=False, repr=False)  # each retry, a line
    # Hosts that answered once in this command: only they earn every try after a silence (a host that
    # takes connections and has never said a word is no registry, or a stuck one: two tries, not six).
    answered: set = field(default_factory=set, compare=False, repr=False)

    def delay(self, attempt: int) -> float:
        return min(MAX_DELAY, self.backoff * (2 ** attempt))

    def run(self, host: str, step: Callable[[], object], on_retry: Callable[[str], None] | None = None):
        """`step()` until it does not fail with RegistryUnavailable, `tries` times at most; then the
        one line: "<host>: unreachable after N tries (<the last failure>)"."""
        on_retry = on_retry or self.say
        last: RegistryUnavailable | None = None
        for attempt in range(max(1, self.tries)):
            if attempt:
                if interrupts.STOPPING.is_set():  # the command is being interrupted: no more tries
                    raise last
                delay = self.delay(attempt - 1)
                on_retry(f"{host}: {last.message}; try {attempt + 1} of {self.tries} in {delay:g} s")
                self.sleep(delay)
            try:
                result = step()
            except RegistryUnavailable as failure:
                last = failure
                if attempt and host not in self.answered and "did not answer in" in failure.message:
                    raise RegistryError(f"{host}: {failure.message}, twice, and it has not answered once: it takes "
                                        "connections and says nothing (not a registry, or a stuck one)") from None
                continue
            self.answered.add(host)
            return result
        assert last is not None
        raise self.spent(host, last.message)

    def spent(self, host: str, last: str) -> RegistryError:
        if self.tries <= 1:
            return RegistryUnavailable(last)
        return RegistryError(f"{host}: unreachable after {self.tries} tries ({last})")


def retry_policy(images, say: Callable[[str], None] = lambda line: None) -> RetryPolicy:
    """The policy a spec's images options give (--registry-tries, --registry-backoff); `say` hears
    of each retry."""
    return RetryPolicy(images.registry_tries, images.registry_backoff, say=say)
