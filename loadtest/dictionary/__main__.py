"""`python -m loadtest.dictionary`: build the format-2 dictionary, or measure dictionaries.

    python -m loadtest.dictionary --out gateway/store/dictionaries/N.zdict
                                  [--size 8000] [--seed 1] [--kib 64]
    python -m loadtest.dictionary --evaluate [--kib 8,16,32,64] [--dictionary PATH ...]
                                  [--size 8000] [--seed 1] [--answers 4000]

`--out` generates the corpus, trains and writes the dictionary, and prints its SHA-256.
`--evaluate` trains a dictionary of each `--kib` size in memory (and reads each
`--dictionary`), then prints, per style, the mean packed answer and, with no dictionary
(zstd) and with each one, the mean format-2 value and the mean compressed answer alone;
then the means over the held-in styles and over the held-out ones.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import zstandard

from . import training
from .styles import HELD_OUT, TRAINED


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.dictionary",
        description="Build the dictionary format-2 records are compressed with, or measure one.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", type=Path, help="write the dictionary here")
    mode.add_argument("--evaluate", action="store_true", help="measure dictionaries")
    parser.add_argument("--size", type=int, default=training.CORPUS, help="answers trained on")
    parser.add_argument("--seed", type=int, default=training.SEED)
    parser.add_argument(
        "--kib",
        type=_sizes,
        default=None,
        help=f"dictionary size in KiB (default {training.KIB}); for --evaluate, a list",
    )
    parser.add_argument(
        "--dictionary",
        type=Path,
        action="append",
        default=[],
        help="--evaluate: also measure this dictionary file (repeatable)",
    )
    parser.add_argument(
        "--answers", type=int, default=4000, help="--evaluate: answers measured (all styles)"
    )
    return parser


def _write(out: Path, size: int, seed: int, kib: int) -> None:
    started = time.perf_counter()
    corpus = training.samples(size, seed)
    generated = time.perf_counter()
    dictionary = training.train(corpus, kib)
    trained = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(dictionary)
    print(
        f"{out}: {len(dictionary)} bytes, sha256 {hashlib.sha256(dictionary).hexdigest()}\n"
        f"  {size} answers of {len(TRAINED)} styles ({sum(map(len, corpus)) / 1e6:.1f} MB "
        f"packed, seed {seed}), generated in {generated - started:.1f} s, trained in "
        f"{trained - generated:.1f} s (zstd {'.'.join(map(str, zstandard.ZSTD_VERSION))})"
    )


def _evaluate(args: argparse.Namespace) -> None:
    dictionaries = {}
    if args.kib or not args.dictionary:
        started = time.perf_counter()
        corpus = training.samples(args.size, args.seed)
        print(
            f"trained on {args.size} answers of {len(TRAINED)} styles (seed {args.seed}, "
            f"{time.perf_counter() - started:.1f} s to generate); held out: "
            + ", ".join(sorted(HELD_OUT))
        )
        for kib in args.kib or [training.KIB]:
            started = time.perf_counter()
            dictionaries[f"{kib}K"] = training.train(corpus, kib)
            print(f"  {kib} KiB trained in {time.perf_counter() - started:.1f} s")
    for path in args.dictionary:
        dictionaries[path.name] = path.read_bytes()
    measured = training.measured_answers(args.answers, args.seed)
    sizes = training.measure(dictionaries, measured)
    names = ["zstd", *dictionaries]
    print(
        f"\n{len(measured)} answers drawn anew (seed {args.seed + 1}); mean bytes per answer: "
        f"packed, then per dictionary the format-2 value / its compressed answer alone "
        f"(the value is {training.AROUND} bytes more)\n"
    )
    width = max(12, *(len(name) for name in names))
    head = f"{'style':22} {'set':4} {'n':>4} {'packed':>7}"
    print(head + "".join(f" {name:>{width}}" for name in names))
    for each in sizes:
        print(
            f"{each.style:22} {'out' if each.held_out else 'in':4} {each.count:4} "
            f"{each.packed:7.0f}"
            + "".join(
                f" {_cell(each.value[name], each.compressed[name]):>{width}}" for name in names
            )
        )
    print()
    for held_out in (False, True):
        mean = training.summary(sizes, held_out)
        label = "held-out" if held_out else "held-in"
        print(
            f"{label + ' (style mean)':27} {mean['packed']:12.0f}"
            + "".join(
                f" {_cell(mean[f'{name} value'], mean[f'{name} compressed']):>{width}}"
                for name in names
            )
        )


def _cell(value: float, compressed: float) -> str:
    return f"{value:.0f} / {compressed:.0f}"


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.out is not None:
        kib = args.kib[0] if args.kib else training.KIB
        _write(args.out, args.size, args.seed, kib)
    else:
        _evaluate(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
