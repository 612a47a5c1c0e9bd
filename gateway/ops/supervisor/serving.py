"""What a `--workers N` gateway serves with, kept for the workers that replace those that die.

A worker that replaces one must serve what its siblings serve: the config and the listener
certificate they loaded, not the files on disk now, which a reload may have refused since (a
half-written certificate, a config with a typo) or which changed without a reload. The
supervisor keeps copies in a private folder: the config the gateway started with (the
settings bound at start come from it) and, per generation, the config the last reload took
and the `listen.tls` files last loaded. On SIGHUP it judges the files as every worker does,
with the same functions, and starts a new generation; a worker is started with the newest
one (`--serving`), whose files never change once written.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Final

from gateway.config.loading import load_settings
from gateway.config.server_tls import ServerTls, server_context
from gateway.config.settings import Settings
from gateway.config.state import private_folder
from gateway.errors import ConfigError
from gateway.http.server.certificates import file_states
from gateway.ops.reload import next_settings

log = logging.getLogger("gateway.ops.supervisor.serving")

START: Final = "start.yaml"  # the config the gateway started with
CONFIG: Final = "config.yaml"  # the config the last reload took, in each generation
LISTEN: Final = "listen"  # the listen.tls files last loaded, in each generation
# Generations kept: a worker started a moment ago may still be reading the one before.
KEPT: Final = 3


class Serving:
    """The supervisor's copies; `reload` runs in its main thread, as do the spawns."""

    def __init__(self, state_dir: str, config: str | None, settings: Settings) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="serving-", dir=private_folder(Path(state_dir))))
        self.config = os.path.abspath(config) if config else None
        self.settings = settings  # what the workers serve with
        self.generation = 0
        staged = self._stage()
        try:  # the files the settings were loaded from a moment ago
            if self.config is not None:
                shutil.copyfile(self.config, self.folder / START)
                shutil.copyfile(self.config, staged / CONFIG)
            tls = settings.listen.tls
            if tls is not None:
                _copy_tls(tls, staged / LISTEN)
        except OSError as exc:
            self.close()
            raise ConfigError(f"cannot keep a copy of {exc.filename}: {exc.strerror}") from None
        self._publish(staged)
        self._seen = self._files()
        self._look_at = time.monotonic()

    @property
    def current(self) -> Path:
        """The newest generation: what a worker starting now is given."""
        return self.folder / f"gen-{self.generation}"

    def look(self) -> None:
        """With `listen.tls.watch_interval` the workers load changed files by themselves:
        so does this, at the same pace (called on every turn of the supervisor's loop)."""
        tls = self.settings.listen.tls
        if tls is None or tls.watch_interval is None or time.monotonic() < self._look_at:
            return
        self._look_at = time.monotonic() + tls.watch_interval
        now = self._files()
        if now != self._seen:
            self._seen = now
            self.reload(config=False)

    def _files(self) -> tuple[tuple[int, int, int], ...]:
        tls = self.settings.listen.tls
        return () if tls is None else file_states((tls.cert, tls.key, tls.client_ca))

    def reload(self, config: bool = True) -> None:
        """SIGHUP: the config and the listener's files that load become the next generation;
        those that do not are replaced by the ones in use, as every worker keeps them.
        `config`: False when only the certificate files are looked at (`look`)."""
        staged = self._stage()
        kept = []
        if self.config is not None and not config:
            shutil.copyfile(self.current / CONFIG, staged / CONFIG)
        elif self.config is not None:
            try:
                shutil.copyfile(self.config, staged / CONFIG)
                self.settings = next_settings(self.settings, staged / CONFIG)[0]
            except (ConfigError, OSError):
                shutil.copyfile(self.current / CONFIG, staged / CONFIG)
                kept.append("the config")
        tls = self.settings.listen.tls
        if tls is not None:
            try:
                server_context(_copy_tls(tls, staged / LISTEN))
            except (ValueError, OSError):
                shutil.rmtree(staged / LISTEN)
                shutil.copytree(self.current / LISTEN, staged / LISTEN)
                kept.append("the listen.tls certificate")
        self._publish(staged)
        if kept:
            log.warning(
                "workers started from now on (to replace one that exits) get %s in use, "
                "not the files the reload refused",
                " and ".join(kept),
            )

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _stage(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="staged-", dir=self.folder))

    def _publish(self, staged: Path) -> None:
        staged.rename(self.folder / f"gen-{self.generation + 1}")
        self.generation += 1
        shutil.rmtree(self.folder / f"gen-{self.generation - KEPT}", ignore_errors=True)


def worker_settings(generation: str) -> tuple[Settings, ServerTls | None]:
    """A worker's settings from a generation of the supervisor's copies, as its siblings hold
    them: the start's config with the last reload taken over it; and the listen.tls files to
    load first (the copies), while its reloads read the configured paths."""
    folder = Path(generation)
    start = folder.parent / START
    settings = load_settings(start, tls_files=False) if start.exists() else Settings()
    if (folder / CONFIG).exists():
        settings = next_settings(settings, folder / CONFIG)[0]
    tls = settings.listen.tls
    return settings, None if tls is None else _copied(tls, folder / LISTEN)


def _copied(tls: ServerTls, folder: Path) -> ServerTls:
    """`tls` with its files' paths in `folder` (the names `_copy_tls` gives them)."""
    return tls.model_copy(
        update={
            name: str(folder / name) if getattr(tls, name) else None
            for name in ("cert", "key", "client_ca", "key_password_file")
        }
    )


def _copy_tls(tls: ServerTls, folder: Path) -> ServerTls:
    """Copy the files `tls` names into `folder`; `tls` naming the copies."""
    folder.mkdir(mode=0o700)
    copied = _copied(tls, folder)
    for name in ("cert", "key", "client_ca", "key_password_file"):
        source = getattr(tls, name)
        if source:
            shutil.copyfile(source, getattr(copied, name))
    return copied
