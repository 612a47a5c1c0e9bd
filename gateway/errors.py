"""The gateway's own exceptions, shared by its layers."""

from __future__ import annotations

from typing import Final


class ConfigError(Exception):
    """The configuration is invalid; the message names the field and what was expected."""


class StoreUnavailable(Exception):
    """Redis could not be asked or did not answer: the claim's state is unknown.
    `unanswered`: the call was sent and may have run there, its reply lost."""

    def __init__(self, message: str, unanswered: bool = False) -> None:
        super().__init__(message)
        self.unanswered = unanswered


class RecordCorrupt(Exception):
    """A stored record cannot be read: never a reason to forward (not even fail-open).
    `transient`: it can be, once Redis answers again (what it needs could not be asked)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class BlobError(Exception):
    """The blob store failed: a body is missing, does not match its record, or cannot be
    written. `reason` is one of the names below (also the metrics label)."""

    MISSING: Final = "missing"
    CORRUPT: Final = "corrupt"  # size or digest differ from the record
    UNAVAILABLE: Final = "unavailable"  # the store did not answer
    WRITE: Final = "write"

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
