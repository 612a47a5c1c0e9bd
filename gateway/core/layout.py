"""The byte layout of a settled record's value in format 2, defined once for the Python and the
Redis scripts: what the scripts read of a value, for the Python that writes and reads values
(`core.compact`) and for the scripts, whose reader is written from this definition
(`lua_reader`).

A value of this release starts with its kind, the request's fingerprint and when the answer
was stored:

    kind (COMPLETED or UNKNOWN) | fingerprint (FINGERPRINT bytes) | stored at (ms, TIME bytes)
    | [lost owner's token] | codec | answer | checksum (CHECKSUM bytes)

Its first IDENTITY bytes tell one outcome from another: a completion repeated by its owner
(the same outcome, however it was compressed) from another claim's (`lua/complete.lua`). Only
an UNKNOWN outcome carries the lost owner's token (its length in one byte, then the token):
the gateway that took a lost owner's key over writes it, so that the answer that really came
may still replace the unknown outcome. The checksum, a CRC-32 over every byte before it and
over the answer as decoded (`core.compact`), is the gateway's alone.

Values of release 0007fac (layout V2) are read too, never written:

    2 | state (C or U) | fingerprint's length, fingerprint | owner token's length, token |
    lost owner's token's length, token | codec | answer | CRC-32 of codec and answer
"""

from __future__ import annotations

from typing import Final, NamedTuple

V2: Final = 2  # the first byte of a value of release 0007fac
COMPLETED: Final = 3  # the first byte of a completed outcome
UNKNOWN: Final = 4  # the first byte of an unknown outcome
FINGERPRINT: Final = 8  # bytes of the request's fingerprint (its SHA-256's first), after the kind
TIME: Final = 6  # bytes of the time the answer was stored (unix ms), after the fingerprint
IDENTITY: Final = 1 + FINGERPRINT + TIME  # the bytes that tell one outcome from another
# The fingerprint of an outcome that answers any payload under its key: one an operator
# settled in place of a record that could not be read, whose own fingerprint is lost with
# it (no request's fingerprint is this: `core.compact.fingerprint_field`).
ANY: Final = b"\xff" * FINGERPRINT
CHECKSUM: Final = 4  # bytes of the checksum, last
# The shortest value of this release: its identity, a codec byte, the checksum.
SHORTEST: Final = IDENTITY + 1 + CHECKSUM
_STATES: Final = {COMPLETED: "C", UNKNOWN: "U"}


class Fields(NamedTuple):
    """What the scripts read of a settled value: its state ("C" or "U"), the fingerprint as
    stored, the lost owner's token (b"": none), where the codec byte is, and its identity
    (b"" for a V2 value, which has none: its owner's token told its completions apart)."""

    state: str
    fingerprint: bytes
    lost: bytes
    codec_at: int
    identity: bytes


def fields(value: bytes) -> Fields | None:
    """The fields of a settled value, as `lua_reader`'s `settled` reads them; None when the
    value cannot be read as one (a kind unknown, or cut short before its codec byte)."""
    if not value:
        return None
    kind = value[0]
    if kind in _STATES:
        at, lost = IDENTITY, b""
        if kind == UNKNOWN:
            if len(value) <= at:
                return None
            lost = value[at + 1 : at + 1 + value[at]]
            at += 1 + value[at]
        if len(value) < at + 1 + CHECKSUM:
            return None
        return Fields(_STATES[kind], value[1 : 1 + FINGERPRINT], lost, at, value[:IDENTITY])
    if kind == V2 and len(value) >= 3:
        at = 3 + value[2]
        fingerprint = value[3:at]
        for _ in range(2):  # the owner's token, then the lost owner's
            if at >= len(value):
                return None
            lost, at = value[at + 1 : at + 1 + value[at]], at + 1 + value[at]
        if at >= len(value):
            return None
        return Fields(chr(value[1]), fingerprint, lost, at, b"")
    return None


def lua_reader() -> str:
    """The scripts' reader of a settled value, written from this definition: `settled(value)`
    returns its state, fingerprint, the lost owner's token (false: none) and identity ('' for
    a V2 value), as `fields` reads them; nil when the value cannot be read as one."""
    return _LUA.format(
        ANY="".join(f"\\{byte}" for byte in ANY),
        V2=V2,
        COMPLETED=COMPLETED,
        UNKNOWN=UNKNOWN,
        FP_END=1 + FINGERPRINT,
        IDENTITY=IDENTITY,
        LOST_AT=IDENTITY + 1,
        CHECKSUM=CHECKSUM,
    )


# Lua strings count from 1: the fingerprint is bytes 2 to FP_END, the identity bytes 1 to
# IDENTITY, an UNKNOWN outcome's lost token's length byte LOST_AT.
_LUA: Final = """\
-- settled(value): a settled record's state ('C' or 'U'), fingerprint, lost owner's token
-- (false: none) and identity ('' for a V2 value); nil when it cannot be read as one.
-- Written from gateway/core/layout.py, its one definition; ANY the fingerprint that any
-- request's matches.
local ANY = '{ANY}'
local function settled(value)
  local kind = string.byte(value, 1)
  if kind == {COMPLETED} or kind == {UNKNOWN} then
    local codec, lost = {LOST_AT}, false
    if kind == {UNKNOWN} then
      local size = string.byte(value, {LOST_AT})
      if not size then
        return nil
      end
      lost = size > 0 and string.sub(value, {LOST_AT} + 1, {LOST_AT} + size)
      codec = {LOST_AT} + 1 + size
    end
    if #value < codec + {CHECKSUM} then
      return nil
    end
    local state = kind == {COMPLETED} and 'C' or 'U'
    return state, string.sub(value, 2, {FP_END}), lost, string.sub(value, 1, {IDENTITY})
  end
  local size = string.byte(value, 3)
  if kind ~= {V2} or not size then
    return nil
  end
  local at = 4 + size  -- the owner token's length
  local owner = string.byte(value, at)
  local lost = owner and string.byte(value, at + owner + 1)
  if not lost or #value < at + owner + lost + 2 then
    return nil
  end
  local token = lost > 0 and string.sub(value, at + owner + 2, at + owner + 1 + lost)
  return string.sub(value, 2, 2), string.sub(value, 4, 3 + size), token, ''
end
"""
