"""The instructions gate's judgement: a count above its baseline by more than the tolerance
fails and says so; the baseline is the one of the measured build and Python minor."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gateway import build
from loadtest import instructions_gate as gate
from loadtest.instructions import child_env, main

COUNTS = {"new-key": 850_000.0, "replay": 540_000.0, "pass-through": 400_000.0}
PURE = gate.Interpreter(
    "pure", "3.11.7", "0.1.0, pure Python", {"aiohttp": "3.14.5"}, "3.11.7 [GCC 12.2.0]"
)


def recorded(tmp_path: Path) -> Path:
    path = tmp_path / "baselines.json"
    gate.record(PURE, COUNTS, "f4c2183", "the build as it stands", path)
    return path


def test_a_count_within_the_tolerance_passes_and_one_above_it_fails(tmp_path: Path) -> None:
    baseline = gate.baseline_for(PURE, recorded(tmp_path))
    within = {**COUNTS, "replay": COUNTS["replay"] * 1.029}
    assert all(v.passes() for v in gate.judge(within, baseline))
    slowed = {**COUNTS, "replay": COUNTS["replay"] * 1.031}
    verdicts = gate.judge(slowed, baseline)
    assert [v.scenario for v in verdicts if not v.passes()] == ["replay"]


def test_the_report_names_the_scenario_the_figures_and_the_tolerance(tmp_path: Path) -> None:
    baseline = gate.baseline_for(PURE, recorded(tmp_path))
    slowed = {**COUNTS, "replay": 600_000.0}
    lines = gate.report(gate.judge(slowed, baseline), PURE, baseline)
    assert "tolerance +3.0%" in lines[0] and "pure-3.11" in lines[0]
    (replay,) = [line for line in lines if line.startswith("replay")]
    assert "540,000" in replay and "600,000" in replay and "+11.1%" in replay
    assert "FAIL" in replay
    assert not any("FAIL" in line for line in lines if line.startswith("new-key"))


def test_the_report_names_dependencies_and_a_python_build_that_differ_from_the_baseline(
    tmp_path: Path,
) -> None:
    baseline = gate.baseline_for(PURE, recorded(tmp_path))
    newer = gate.Interpreter("pure", "3.11.7", "0.1.0, pure Python", {"aiohttp": "3.15.0"})
    lines = gate.report(gate.judge(COUNTS, baseline), newer, baseline)
    assert any("aiohttp 3.14.5 -> 3.15.0" in line for line in lines)
    rebuilt = gate.Interpreter(
        "pure", "3.11.7", "0.1.0, pure Python", {"aiohttp": "3.14.5"}, "3.11.7 [Clang 16]"
    )
    lines = gate.report(gate.judge(COUNTS, baseline), rebuilt, baseline)
    assert any("another build of Python" in line for line in lines)
    assert not any("dependencies differ" in line for line in lines)


def test_a_baseline_of_other_scenarios_cannot_judge(tmp_path: Path) -> None:
    baseline = gate.baseline_for(PURE, recorded(tmp_path))
    with pytest.raises(gate.GateError, match="pass-through"):
        gate.judge({"new-key": 1.0, "replay": 1.0}, baseline)


def test_each_build_and_python_minor_has_its_own_baseline(tmp_path: Path) -> None:
    path = recorded(tmp_path)
    compiled = gate.Interpreter("compiled", "3.12.1", "0.1.0, compiled (mypyc)", {})
    gate.record(compiled, {name: n * 0.85 for name, n in COUNTS.items()}, "abc", "why", path)
    assert gate.baseline_for(PURE, path)["instructions_per_request"]["replay"] == 540_000
    assert gate.baseline_for(compiled, path)["instructions_per_request"]["replay"] == 459_000
    other = gate.Interpreter("pure", "3.12.1", "0.1.0, pure Python", {})
    with pytest.raises(gate.GateError, match=r"pure-3\.12"):
        gate.baseline_for(other, path)


def test_the_committed_baselines_cover_the_builds_ci_measures() -> None:
    baselines = gate.load()
    assert {"pure-3.11", "compiled-3.12"} <= set(baselines)
    for entry in baselines.values():
        assert set(entry["instructions_per_request"]) == {"new-key", "replay", "pass-through"}
        assert entry["commit"] and entry["why"] and entry["python"]


def test_the_probe_reads_the_build_and_python_of_the_interpreter_measured(
    tmp_path: Path,
) -> None:
    found = gate.probe(sys.executable, child_env(None), tmp_path)
    assert found.build == build.kind()
    assert found.python == ".".join(map(str, sys.version_info[:3]))
    assert found.key == f"{build.kind()}-{sys.version_info[0]}.{sys.version_info[1]}"
    assert found.interpreter == sys.version.replace("\n", " ")


@pytest.mark.skipif(
    sys.prefix == sys.base_prefix, reason="needs a venv: its base interpreter lacks the gateway"
)
def test_an_interpreter_without_the_gateway_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    base = getattr(sys, "_base_executable", sys.executable)
    with pytest.raises(gate.GateError, match="cannot import the gateway") as raised:
        gate.probe(base, {"PATH": os.environ["PATH"], "PYTHONNOUSERSITE": "1"}, tmp_path)
    assert "\n" not in str(raised.value)


def test_the_gate_without_a_baseline_for_this_build_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--gate", "--baselines", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("instructions gate: ")


def test_the_gate_takes_a_python_relative_to_where_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(sys.executable).parent)
    none = str(tmp_path / "none.json")
    assert main(["--gate", "--python", f"./{Path(sys.executable).name}", "--baselines", none]) == 2
    assert "no instructions baseline for" in capsys.readouterr().err
    assert main(["--gate", "--python", "./no-such-python", "--baselines", none]) == 2
    assert "no such interpreter" in capsys.readouterr().err
