"""Child processes that do not outlive the gateway, even when it is SIGKILLed."""

from __future__ import annotations

import ctypes
import signal
from typing import Final

_PR_SET_PDEATHSIG: Final = 1


def die_with_parent(sig: signal.Signals) -> None:
    """In a child, before exec (a Popen preexec_fn): Linux sends it `sig` when its parent
    dies. Elsewhere this does nothing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass
