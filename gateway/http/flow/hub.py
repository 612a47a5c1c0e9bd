"""The owner's side of `on_in_flight: follow`: what a call in flight tells the duplicates that
follow it, on this gateway or, through `store.relay`, on another.

A call on a following route opens a `Hub` for its record; nothing else is done while nobody
follows but keeping a reference to each body piece, up to the route's `inline_max`, for one
who joins late. The owner never waits for a follower: each is told what happens without
waiting (`Follower.tell`), and one that cannot take it any more is let go, to take the rest
from the record.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.core.following import Ask, Bytes, Follower, Head, News, Told
from gateway.store.relay import Relay


class Hub:
    """One call's news, for its followers: the head, the body so far, how it ended."""

    def __init__(self, fingerprint: str, most: int, keep: int) -> None:
        self.fingerprint = fingerprint
        self._most = most  # followers at most
        self._keep = keep  # body bytes kept for a follower who joins late
        self._head: Head | None = None
        self._kept: list[bytes] = []
        self._size = 0  # body bytes told so far
        self._whole = True  # `_kept` holds the body from its first byte
        self._ended: Told | None = None
        self.followers: list[Follower] = []

    def join(self, follower: Follower, fingerprint: str) -> bool:
        """Let `follower` follow, told everything so far; False (and told REFUSED) when the
        call has as many followers as it may, or is held under another fingerprint."""
        if fingerprint != self.fingerprint or len(self.followers) >= self._most:
            follower.tell(Told.REFUSED)
            return False
        if not follower.tell(Told.JOINED):
            return False
        if self._ended is not None:
            follower.tell(self._ended)
            return True
        if self._head is not None and not follower.tell(self._head):
            return True
        if not self._whole:  # the start is gone: the body comes from the record
            follower.tell(Told.BEHIND)
            return True
        offset = 0
        for piece in self._kept:
            if not follower.tell(Bytes(offset, piece)):
                return True
            offset += len(piece)
        self.followers.append(follower)
        return True

    def leave(self, follower: Follower) -> None:
        if follower in self.followers:
            self.followers.remove(follower)

    def begin(self, head: Head) -> None:
        """The answer's head, which will be recorded with it."""
        self._head = head
        self._tell(head)

    def add(self, piece: bytes) -> None:
        """Body bytes as the owner's client gets them (all but the held-back last ones)."""
        offset = self._size
        self._size = offset + len(piece)
        if self._whole:
            if self._size <= self._keep:
                self._kept.append(piece)
            else:
                self._whole = False
                self._kept.clear()
        if self.followers:
            self._tell(Bytes(offset, piece))

    def end(self, how: Told) -> None:
        """STORED or UNRECORDED: told to every follower, and to any who joins after."""
        if self._ended is None:
            self._ended = how
            self._kept.clear()
            self._tell(how)
            self.followers.clear()

    def _tell(self, news: News) -> None:
        still = [follower for follower in self.followers if follower.tell(news)]
        if len(still) != len(self.followers):
            self.followers = still


class Hubs:
    """The hubs of this process's calls in flight, by record."""

    def __init__(self) -> None:
        self._hubs: dict[str, Hub] = {}

    def open(self, record: str, fingerprint: str, most: int, keep: int) -> Hub:
        hub = self._hubs[record] = Hub(fingerprint, most, keep)
        return hub

    def get(self, record: str) -> Hub | None:
        return self._hubs.get(record)

    def close(self, record: str, hub: Hub) -> None:
        """The call is over: its hub ends as UNRECORDED unless it ended already."""
        hub.end(Told.UNRECORDED)
        if self._hubs.get(record) is hub:
            del self._hubs[record]


def answer_ask(hubs: Hubs, relay: Relay, bound: Callable[[], int], ask: Ask) -> None:
    """A follower on another gateway asked for a record: joined if this process owns its
    call (an ask for a call of another process is not this one's to answer), or let go."""
    hub = hubs.get(ask.record)
    if hub is None:
        return
    if not ask.fingerprint:  # it has gone: its place is free
        for follower in hub.followers:
            if getattr(follower, "address", None) == (ask.reply, ask.follower):
                hub.leave(follower)
                return
        return
    hub.join(relay.follower(ask, bound()), ask.fingerprint)
