"""The dictionaries format-2 records are compressed with (`gateway.core.compact.Codec`),
numbered by the codec byte that names one in a stored value: `N.zdict` is dictionary N.

A number once shipped is never reused or changed: a stored record is read only with the exact
dictionary it was compressed with, so each one ships for as long as records may hold it. A
dictionary is rebuilt only as a new number, with `python -m loadtest.dictionary --out
gateway/store/dictionaries/N.zdict` (loadtest/dictionary says how it is trained and
measured); the codec compresses with the newest and reads with all.
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
