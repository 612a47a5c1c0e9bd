"""The instructions gate: instructions per request, counted by `loadtest.instructions`, held
against the baseline committed in `instructions_baseline.json` for the same build (compiled or
pure) and Python minor version.

A count more than TOLERANCE above its baseline fails. Why 3%: two counts of one tree, each the
lower of two rounds, agree within 0.5% on a quiet machine (0.9% between single rounds of a new
key), but a pass-through through the installed compiled wheel counted 447.4k once and 455.2k
right after the suite had run (1.8%: its latency histograms' work follows wall time); the
smallest change worth catching on the hot path, a second Redis call or a per-request task,
costs 5% and more, and a loop of 20 `str(i)` in the replay path (+3.8%) still fails.

Moving a baseline is a deliberate commit of its own: `--record WHY` writes the entry
with the commit, Python, dependencies and reason it was taken with.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BASELINES = Path(__file__).with_name("instructions_baseline.json")
TOLERANCE = 0.03
# The packages whose code runs on the measured path: a new release moves the counts.
DEPENDENCIES = ("aiohttp", "multidict", "yarl", "propcache", "redis", "hiredis", "uvloop")

# Run by the measured interpreter, where the gateway it imports is the one measured.
PROBE = """
import importlib.metadata as m, json, platform, sys
from gateway import build
deps = {}
for name in sys.argv[1:]:
    try:
        deps[name] = m.version(name)
    except m.PackageNotFoundError:
        deps[name] = "absent"
print(json.dumps({"build": build.kind(), "python": platform.python_version(),
                  "gateway": build.describe(), "dependencies": deps,
                  "interpreter": sys.version.replace(chr(10), " ")}))
"""


@dataclass(frozen=True)
class Interpreter:
    """What the measured interpreter runs: the build of its gateway and its Python."""

    build: str  # "compiled" or "pure"
    python: str  # "3.12.1"
    gateway: str  # build.describe(): the version and the build, in words
    dependencies: dict[str, str]
    # sys.version: the build of Python (date, compiler), whose own instructions are counted
    interpreter: str = ""

    @property
    def key(self) -> str:
        """The baseline this interpreter is held to: build and Python minor, `pure-3.11`."""
        return f"{self.build}-{'.'.join(self.python.split('.')[:2])}"


class GateError(Exception):
    """A gate that cannot judge (no baseline, no valgrind): one line for the operator."""


def probe(python: str, env: dict[str, str], cwd: Path) -> Interpreter:
    """Ask `python` (run as the gateway will be: same environment, same folder) what it runs."""
    if shutil.which(python) is None:
        raise GateError(f"{python}: no such interpreter")
    done = subprocess.run(
        [python, "-c", PROBE, *DEPENDENCIES],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GateError(f"{python} cannot import the gateway: {last}")
    return Interpreter(**json.loads(done.stdout))


def commit() -> str:
    """The checkout's commit, `+changes` when the gateway's code differs from it."""
    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", "gateway", "lua"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return head + ("+changes" if changed else "")


def load(path: Path = BASELINES) -> dict[str, Any]:
    try:
        baselines: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return baselines


def baseline_for(interpreter: Interpreter, path: Path = BASELINES) -> dict[str, Any]:
    entry = load(path).get(interpreter.key)
    if entry is None:
        raise GateError(
            f"no instructions baseline for {interpreter.key} in {path.name}: take one with"
            f" `python -m loadtest.instructions --record WHY --python PYTHON`"
        )
    return dict(entry)


def record(
    interpreter: Interpreter,
    counts: dict[str, float],
    commit: str,
    why: str,
    path: Path = BASELINES,
) -> None:
    """Write (or move) the baseline of `interpreter`'s build and Python minor."""
    baselines = load(path)
    baselines[interpreter.key] = {
        "instructions_per_request": {name: round(count) for name, count in counts.items()},
        "commit": commit,
        "python": interpreter.python,
        "gateway": interpreter.gateway,
        "dependencies": interpreter.dependencies,
        "interpreter": interpreter.interpreter,
        "why": why,
    }
    path.write_text(json.dumps(baselines, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Verdict:
    scenario: str
    baseline: float
    measured: float

    @property
    def change(self) -> float:
        return self.measured / self.baseline - 1

    def passes(self, tolerance: float = TOLERANCE) -> bool:
        return self.change <= tolerance


def judge(counts: dict[str, float], baseline: dict[str, Any]) -> list[Verdict]:
    """One verdict per scenario, in the order measured; each must have its baseline."""
    held: dict[str, float] = baseline["instructions_per_request"]
    if set(held) != set(counts):
        raise GateError(f"the baseline holds {sorted(held)}, the gate measured {sorted(counts)}")
    return [Verdict(name, held[name], count) for name, count in counts.items()]


def report(
    verdicts: list[Verdict],
    interpreter: Interpreter,
    baseline: dict[str, Any],
    tolerance: float = TOLERANCE,
) -> list[str]:
    """The gate's output: what was measured against what, and the verdict per scenario."""
    lines = [
        f"instructions gate: {interpreter.gateway} on Python {interpreter.python}, baseline"
        f" {interpreter.key} taken at {baseline['commit'][:12]} on Python {baseline['python']},"
        f" tolerance +{tolerance:.1%}",
        f"{'scenario':13} {'baseline':>12} {'measured':>12} {'change':>8}  verdict",
    ]
    for v in verdicts:
        verdict = "ok" if v.passes(tolerance) else f"FAIL (over +{tolerance:.1%})"
        if v.passes(tolerance) and v.change < -tolerance:
            verdict = "ok, faster: a new baseline would keep the gain"
        lines.append(
            f"{v.scenario:13} {v.baseline:12,.0f} {v.measured:12,.0f} {v.change:+8.1%}  {verdict}"
        )
    moved = {
        name: (version, interpreter.dependencies.get(name, "absent"))
        for name, version in baseline["dependencies"].items()
        if interpreter.dependencies.get(name, "absent") != version
    }
    if moved:
        lines.append(
            "dependencies differ from the baseline's (their code is counted too): "
            + ", ".join(f"{name} {was} -> {now}" for name, (was, now) in sorted(moved.items()))
        )
    if baseline.get("interpreter", interpreter.interpreter) != interpreter.interpreter:
        lines.append(
            f"another build of Python than the baseline's ({baseline['interpreter']}):"
            " its own instructions are counted too"
        )
    if not all(v.passes(tolerance) for v in verdicts):
        lines.append(
            "instructions per request above the baseline: find the cost (`--tree before=PATH"
            " --tree after=.`), or, for a feature worth it, move the baseline in a commit of"
            " its own that says why (`--record WHY`)"
        )
    return lines
