"""The gateway's own folder (`state_dir`): where it keeps its journal, the embedded Redis's
data and, by default, its blobs. Per user and private, so no other user of the machine can
read a recorded answer or take a lock of ours."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.errors import ConfigError


def default_state_dir() -> str:
    """$IDEM_STATE_DIR, else $XDG_STATE_HOME/idem-gateway, else ~/.local/state/idem-gateway."""
    if os.environ.get("IDEM_STATE_DIR"):
        given = os.environ["IDEM_STATE_DIR"]
        if not Path(given).is_absolute():  # as a relative `state_dir` in the config is
            raise ConfigError(f"IDEM_STATE_DIR {given!r} must be an absolute path")
        return given
    base = os.environ.get("XDG_STATE_HOME", "")
    if not Path(base).is_absolute():  # unset, or relative: ignored, as the XDG spec says
        base = str(Path.home() / ".local" / "state")
    return str(Path(base) / "idem-gateway")


def private_folder(path: Path) -> Path:
    """`path` as a folder only its owner may enter (created with its parents if needed; the
    state folder itself made private too, whatever the umask)."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.chmod(0o700)
    except OSError as exc:  # a file in the way, a read-only disk: the operator's to fix
        raise ConfigError(
            f"state_dir: cannot make the private folder {path}: {exc.strerror}"
        ) from None
    return path
