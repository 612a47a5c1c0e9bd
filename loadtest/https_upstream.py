"""CPU per request through the gateway to an https:// upstream: aiohttp's client or the lean one.

`python -m loadtest.https_upstream` makes a private CA (trustme, a test extra) and a
certificate for 127.0.0.1, starts on loopback the counting upstream (`loadtest.upstream`,
plain and TLS ports), a redis-server and three gateway processes trusting that CA
(`upstream_tls.ca`): the claimed call and pass-through GETs over aiohttp's client to the https
port (`loadtest.ablated_gateway --without lean`), over the lean client to the https port, and,
for reference, over the lean client to the plain port. Each gateway is pinned to the last core;
they are driven in turns with the new-key and get-pass scenarios (`--rounds` times, so that a
noisy spell of a shared machine hits all of them alike). It prints CPU per request, min and
median over the rounds, each one's ratio to aiohttp's (medians), and the load average before
and after. It stops by itself and stops its children.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import trustme
import yaml

from testkit.ports import free_port

from .compare import report
from .drive import SCENARIOS, cpu_per_request, ensure_wrk, gateway_config
from .procs import Child, pin, spare_last_core, start_redis

MEASURED = ("new-key", "get-pass")
# name: (the ablated gateway's --without, whether its upstream is the TLS port)
TARGETS = {
    "aiohttp https": ("lean", True),
    "lean https": ("", True),
    "lean http": ("", False),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    wrk = ensure_wrk()
    measured_core = spare_last_core()
    load_before = os.getloadavg()
    cpu: dict[tuple[str, str], list[float]] = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-https-")))
        ca = trustme.CA()
        ca_file, cert_file, key_file = (workdir / n for n in ("ca.pem", "cert.pem", "key.pem"))
        ca.cert_pem.write_to_path(str(ca_file))
        issued = ca.issue_cert("127.0.0.1")
        issued.private_key_pem.write_to_path(str(key_file))
        cert_file.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        redis = start_redis(stack)
        port, tls_port = free_port(), free_port()
        upstream = Child(
            "upstream", "loadtest.upstream", port,
            ["--port", str(port), "--tls-port", str(tls_port),
             "--cert", str(cert_file), "--key", str(key_file)],
            workdir,
        )  # fmt: skip
        stack.callback(upstream.stop)
        gateways: dict[str, Child] = {}
        for i, (name, (without, tls)) in enumerate(TARGETS.items()):
            origin = f"https://127.0.0.1:{tls_port}" if tls else upstream.url
            port = free_port()
            raw = gateway_config(port, origin, redis.url, "uvloop", True, free_port())
            raw["upstream_tls"] = {"ca": str(ca_file)}
            config = workdir / f"gateway-{i}.yaml"
            config.write_text(yaml.safe_dump(raw))
            gateways[name] = Child(
                f"gateway-{i}", "loadtest.ablated_gateway", port,
                ["--without", without, "--", "--config", str(config), "--workers", "1"],
                workdir,
            )  # fmt: skip
            stack.callback(gateways[name].stop)
            pin(gateways[name].process.pid, measured_core)
        for round_ in range(args.rounds):
            for scenario in (s for s in SCENARIOS if s.name in MEASURED):
                for name, gateway in gateways.items():
                    tag = f"tls{round_}-{time.monotonic_ns()}"
                    per = cpu_per_request(wrk, gateway, upstream, scenario, tag, args.seconds)
                    cpu.setdefault((scenario.name, name), []).append(per)
                    print(
                        f"round {round_ + 1} {scenario.name:8} {name:14} {per:6.0f} µs/req",
                        flush=True,
                    )
    print()
    print(report(cpu, list(TARGETS), "client", MEASURED))
    after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {after[0]:.2f} (1 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
