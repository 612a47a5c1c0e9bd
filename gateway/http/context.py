"""What the request path shares: the one live settings object and the gateway's clients."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.blobs.base import BlobStore
from gateway.config.settings import Settings
from gateway.http.tasks import TaskSet
from gateway.store.store import Store
from gateway.telemetry.metrics import Metrics
from gateway.upstream.upstreams import Upstreams


@dataclass(slots=True)
class Live:
    """The settings in force. A reload swaps `settings` here, and only here: every reader
    holds this object, never a settings object of its own."""

    settings: Settings


@dataclass(frozen=True, slots=True)
class Services:
    live: Live
    store: Store
    upstreams: Upstreams
    metrics: Metrics
    tasks: TaskSet
    blobs: BlobStore

    @property
    def settings(self) -> Settings:
        return self.live.settings
