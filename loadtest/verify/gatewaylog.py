"""What the gateways said of what they did, read from their JSON logs by structured fields.

A line that names an `event` (`gateway.telemetry.events`: failed open or closed, held
through a stall, a lost owner's key settled and how, not sent past half its lease) is one
`Said`, with its route and the request id it befell: the clients send each attempt's id as
`X-Request-Id`, so that an event is matched to its attempt by name, never by times. The
gateway of the earlier release (a mixed fleet) names no event: of its lines only the
fail-open one is read, by the words that release wrote (released, they do not change), and
is matched to attempts by its time. Each gateway's log is also searched for tracebacks and
for a 500 in its access log (rule 6), its access log's answers that followed a call in
flight (`outcome: followed`) are counted, and its exit code kept.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

from gateway.telemetry.events import EVENT, Event

# The earlier release's fail-open line (29f1835 `http.flow.handler`), its only event read.
EARLIER_FAILS_OPEN = re.compile(r"redis unavailable, route (\S+) fails open: ")
LOG_PRECISION = 0.001  # seconds: a log's times are cut to the millisecond
EVENTS = frozenset(event.value for event in Event)
ACCESS_LOGGER = "gateway.http.server.access"
FOLLOWED = "followed"  # the access log's outcome of an answer that followed a call in flight


class Said(NamedTuple):
    """One event a gateway (by index) logged: when (wall clock, as the histories), what, on
    which route, to which request (None: the earlier release names none), and how a lost
    owner's key was settled (`owner-lost` only)."""

    gateway: int
    time: float
    event: Event
    route: str
    request: str | None = None
    settled: str | None = None


class Gateways:
    """The gateways' side of a run: the events they logged, which run the earlier release,
    the tracebacks and 500s in their logs, and their exit codes at the final SIGTERM."""

    def __init__(
        self,
        said: Iterable[Said] = (),
        earlier: Collection[int] = (),
        tracebacks: int = 0,
        logged_500: int = 0,
        exit_codes: Sequence[int] = (),
        followed: int = 0,
    ) -> None:
        self.earlier = frozenset(earlier)
        self.tracebacks = tracebacks
        self.logged_500 = logged_500
        self.followed = followed  # access-log lines of answers that followed one in flight
        self.exit_codes = list(exit_codes)
        self.by_request: dict[str, list[Said]] = defaultdict(list)
        self.unnamed: dict[tuple[int, str, Event], list[float]] = defaultdict(list)
        self.counts: Counter[Event] = Counter()
        self.settled: Counter[str] = Counter()
        for each in said:
            self.counts[each.event] += 1
            if each.settled is not None:
                self.settled[each.settled] += 1
            if each.request is not None:
                self.by_request[each.request].append(each)
            else:
                self.unnamed[(each.gateway, each.route, each.event)].append(each.time)
        for times in self.unnamed.values():
            times.sort()

    def of(self, request: str, event: Event) -> Said | None:
        """The event the gateways logged for the request (an attempt's id), if any."""
        return next((s for s in self.by_request.get(request, ()) if s.event is event), None)

    def unnamed_between(
        self, gateway: int, route: str, event: Event, start: float, end: float
    ) -> bool:
        """Whether the gateway logged the event on the route, naming no request, between
        start and end (the earlier release's lines, by their times)."""
        times = self.unnamed.get((gateway, route, event), [])
        first = bisect_left(times, start - LOG_PRECISION)
        return first < len(times) and times[first] <= end + LOG_PRECISION


def read_gateways(
    logs: Mapping[int, str], earlier: Collection[int] = (), exit_codes: Sequence[int] = ()
) -> Gateways:
    """`logs`: each gateway's log text, by index (a log of unknown gateway under -1: searched
    for tracebacks and 500s only)."""
    said: list[Said] = []
    tracebacks = logged_500 = followed = 0
    for gateway, text in logs.items():
        tracebacks += text.count("Traceback")
        for when, entry in json_lines(text):
            if entry.get("logger") == ACCESS_LOGGER:
                logged_500 += entry.get("status") == 500
                followed += entry.get("outcome") == FOLLOWED
            if gateway < 0:
                continue
            if gateway in earlier:
                found = EARLIER_FAILS_OPEN.match(str(entry.get("msg", "")))
                if found is not None:
                    said.append(Said(gateway, when, Event.FAILED_OPEN, found.group(1)))
                continue
            event = entry.get(EVENT)
            if isinstance(event, str) and event in EVENTS:
                said.append(
                    Said(
                        gateway, when, Event(event), str(entry.get("route")),
                        _text(entry.get("request_id")), _text(entry.get("settled")),
                    )
                )  # fmt: skip
    return Gateways(said, earlier, tracebacks, logged_500, exit_codes, followed)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def json_lines(text: str) -> list[tuple[float, dict[str, object]]]:
    """A gateway's JSON log lines with their times (`{"ts": "...T23:14:20.363Z", ...}`, either
    release); other lines (a traceback, a child's stderr) are left out."""
    found = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
            whole, _, millis = entry["ts"].rstrip("Z").partition(".")
            when = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
            found.append((when + int(millis or 0) / 1000, entry))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return found
