"""The corpus: answers as the gateway records them, `Record` and body, drawn from the
styles by one seed."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.core.compact import pack_answer
from gateway.core.record import Record

from .fakes import EPOCH_FROM, EPOCH_TO, Fake
from .house import HOUSES, House, Reply, make_house, reason
from .servers import Head, write_head
from .styles import Style


@dataclass(frozen=True)
class Answer:
    style: str
    house: str
    record: Record
    body: bytes

    def packed(self) -> bytes:
        return pack_answer(self.record, self.body)


def answers(
    styles: Iterable[Style],
    count: int,
    seed: int,
    houses_seed: int | None = None,
    houses: int = HOUSES,
) -> list[Answer]:
    """`count` answers of `styles` (each as often as its weight says), from `seed`. The
    styles' deployments come from `houses_seed` (`seed` unless given), so that answers drawn
    anew can come from the same APIs."""
    chosen = list(styles)
    weights = [style.weight for style in chosen]
    rng = random.Random(seed)
    made: dict[tuple[str, int], House] = {}
    out = []
    for _ in range(count):
        style = rng.choices(chosen, weights)[0]
        index = rng.randrange(houses)
        key = (style.name, index)
        if key not in made:
            house_seed = seed if houses_seed is None else houses_seed
            made[key] = make_house(house_seed, style.name, index, style.ecosystems)
        when = rng.uniform(EPOCH_FROM, EPOCH_TO)
        f = Fake(random.Random(rng.getrandbits(64)), when)
        out.append(answer(f, style.name, made[key], style.make(f, made[key])))
    return out


def answer(f: Fake, style: str, house: House, reply: Reply) -> Answer:
    """The record the gateway keeps of `reply`, served by `house`'s servers."""
    media = reply.media if reply.status != 204 else None
    head = Head(reply.status, media, len(reply.body), reply.headers, f.when)
    headers = write_head(f, house.stack, head, reply.front, reply.server)
    record = Record(
        status=reply.status,
        headers=headers,
        size=len(reply.body),
        sha256=hashlib.sha256(reply.body).hexdigest(),
        completed_at=f.when + f.rng.uniform(0.002, 0.8),
        reason=reason(reply.status) if reply.reason is None else reply.reason,
    )
    return Answer(style, house.name, record, reply.body)
