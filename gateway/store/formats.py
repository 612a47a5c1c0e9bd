"""The two formats a record is stored in, and the dictionaries format 2 is compressed with.

- Format 1, of every release before `redis.record_format`: a hash under
  `prefix:{route:tenant:key}`, its fields `s` (state), `t` (owner token), `f` (fingerprint,
  hex), `m` (the answer's metadata as JSON, `core.record`), `b` (the inline body), and while
  PENDING `c`, `l`, `u`, `o`, `p` (`lua/claim.lua`).
- Format 2: a PENDING claim is the same hash, a settled record one string (`core.compact`),
  under `prefix:route:{tag}digest`, in the same Cluster slot (`core.keys.record_names`).

Every gateway of this release reads both, under either name; which one it writes is
`redis.record_format` (`store.fleet` holds it at 1 while a gateway of an earlier release,
which reads format 1 only, uses the same Redis).
"""

from __future__ import annotations

import functools
from typing import Final, Literal

from gateway.core.compact import Codec
from gateway.store.dictionaries import shipped

RecordFormat = Literal[1, 2]
FORMAT_1: Final[Literal[1]] = 1
FORMAT_2: Final[Literal[2]] = 2


@functools.cache
def shipped_codec() -> Codec:
    """The format-2 codec with every dictionary this release ships (read once a process)."""
    return Codec(shipped())
