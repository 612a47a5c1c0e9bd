"""The load harness in a tiny run: it works, and its exactly-once check can fail."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.run import find_duplicates

ROOT = Path(__file__).resolve().parent.parent


def test_find_duplicates_names_every_key_not_run_exactly_once() -> None:
    assert find_duplicates({"a": 1, "b": 1}) == {}
    assert find_duplicates({"a": 1, "b": 2, "c": 3}) == {"b": 2, "c": 3}


@pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)"
)
def test_tiny_run_holds_exactly_once_through_the_gateway_only(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable, "-m", "loadtest.run", "--quick", "--scenarios", "new-key,seed",
            "--no-claim-bench", "--out", str(tmp_path),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {
        (r["scenario"], r["target"]): r
        for r in json.loads((tmp_path / "results.json").read_text())["rows"]
    }
    for target in ("bare", "gateway", "gateway-nopipe"):
        assert rows[("new-key", target)]["requests"] > 0
    seed_gateway = rows[("seed", "gateway")]
    assert seed_gateway["upstream_keys"] > 0
    assert seed_gateway["duplicates"] == 0
    # The same counters, behind the bare proxy, catch keys that ran more than once.
    assert rows[("seed", "bare")]["duplicates"] > 0
    assert "scenario" in out.stdout and "RPS" in out.stdout
