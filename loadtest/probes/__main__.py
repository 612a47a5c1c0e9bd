"""`python -m loadtest.probes NAME [OPTIONS]`: one probe, its options after its name.

`python -m loadtest.probes` alone lists them; `python -m loadtest.probes NAME --help` gives a
probe's options. What each measures and the figures of record: loadtest/README.md and
loadtest/RESULTS.md.
"""

from __future__ import annotations

import importlib
import sys

PROBES = {
    "script_cost": "Redis's own CPU per new key and per replay, and memory per stored record",
    "replication_wait": "what `redis.claim_replicas: 1` costs a claim (a master and a replica)",
    "claim_bench": "the claim as Lua, as WATCH/MULTI/EXEC and pipelined: claims/s, p50/p99",
    "stored_records": "new keys and replays with a million records stored, against none",
    "workers_scaling": "`--workers 2` against `--workers 1`: RPS, latency, CPU per request",
    "many_connections": "1,000 client connections at once, per listen backlog",
    "big_body": "a large body plain, recorded and replayed; `--curve`: per body size",
    "record_memory": "Redis memory per stored record, through a gateway, per format and body",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in PROBES:
        asked = not argv or argv[0] in ("-h", "--help")
        width = max(map(len, PROBES))
        print(
            "usage: python -m loadtest.probes NAME [OPTIONS]  (NAME --help: its options)\n",
            *(f"  {name:{width}}  {what}" for name, what in PROBES.items()),
            sep="\n",
            file=sys.stdout if asked else sys.stderr,
        )
        return 0 if asked else 2
    name, *options = argv
    sys.argv[0] = f"python -m loadtest.probes {name}"  # argparse's prog in the probe's usage
    probe = importlib.import_module(f"loadtest.probes.{name}")
    return int(probe.main(options) or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
