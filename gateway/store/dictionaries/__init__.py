"""The dictionaries format-2 records are compressed with (`gateway.core.compact.Codec`),
numbered by the codec byte that names one in a stored value: `N.zdict` is dictionary N.

A number once shipped is never reused or changed: a stored record is read only with the exact
dictionary it was compressed with, so each one ships for as long as records may hold it. A
new dictionary is a new number; the codec compresses with the newest and reads with all.
tests/test_dictionary.py holds each one's SHA-256, and dictionary 1 to what a committed
corpus of answers (tests/dictionary) compresses to with it; how dictionary 1 was trained,
and what it measured: loadtest/RESULTS.md, "Retired probes".
"""

from __future__ import annotations

from importlib.resources import files


def shipped() -> dict[int, bytes]:
    """Every dictionary of the installed package, by its number."""
    return {
        int(entry.name.removesuffix(".zdict")): entry.read_bytes()
        for entry in sorted(files(__name__).iterdir(), key=lambda entry: entry.name)
        if entry.name.endswith(".zdict")
    }
