"""README.md's curl walk-through, run against a gateway: its steps read from README's
`console` blocks, each sent as curl would send it, and each answer held to what README shows
(every header it leaves out named on the step's `[elided: ...]` line)."""

from __future__ import annotations

import asyncio
import re
import shlex
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


@dataclass
class Step:
    """One `$ curl ...` of the walk-through and the output the README shows for it."""

    args: list[str]
    background: bool
    output: list[str] = field(default_factory=list)
    elided: set[str] = field(default_factory=set)  # header names README marks as not shown


def walkthrough() -> list[Step]:
    steps: list[Step] = []
    for block in blocks("console"):
        lines = iter(block.splitlines())
        for line in lines:
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\"):
                    command = command[:-1] + next(lines).strip()
                background = command.rstrip().endswith("&")
                args = shlex.split(command.rstrip(" &"))
                assert args[0] == "curl", line
                steps.append(Step(args[1:], background))
            elif line.startswith("[elided: "):
                names = line.removeprefix("[elided: ").removesuffix("]").split(", ")
                steps[-1].elided.update(name.lower() for name in names)
            elif line.strip():
                steps[-1].output.append(line)
    return steps


def as_request(
    args: list[str], port: int, scheme: str = "http"
) -> tuple[str, str, dict[str, str], str | None]:
    method, headers, data, url = "GET", {}, None, ""
    items = iter(args)
    for arg in items:
        if arg == "-X":
            method = next(items)
        elif arg == "-H":
            name, value = next(items).split(":", 1)
            headers[name.strip()] = value.strip()
        elif arg == "-d":
            data = next(items)
            method = "POST" if method == "GET" else method
        elif not arg.startswith("-"):
            url = f"{scheme}://" + arg.replace("localhost:8080", f"127.0.0.1:{port}")
    return method, url, headers, data


async def run_step(
    session: aiohttp.ClientSession, step: Step, port: int, head: bool = False, scheme: str = "http"
) -> list[str]:
    """The answer as curl -si prints it: status line, headers, blank, the body's lines (or
    the body's lines alone, as curl -s prints them, unless `head`)."""
    method, url, headers, data = as_request(step.args, port, scheme)
    if data is not None and "Content-Type" not in headers:
        headers["Content-Type"] = "application/x-www-form-urlencoded"  # as curl -d sends
    async with session.request(method, url, headers=headers, data=data) as r:
        body = (await r.read()).decode().splitlines()
        lines = [f"HTTP/1.1 {r.status} {r.reason}"] + [f"{k}: {v}" for k, v in r.headers.items()]
    return [*lines, "", *body] if head or any(a.startswith("-si") for a in step.args) else body


async def walk_through(port: int, tls: ssl.SSLContext | None = None) -> None:
    """Every `$ curl` of README against a gateway on `port` (fronting a fresh demo upstream),
    asserting the answers README shows; over HTTPS with `tls` (the client's context).
    deploy/smoke.sh runs it against the compose stack."""
    steps = walkthrough()
    assert len(steps) >= 6
    scheme = "http" if tls is None else "https"
    connector = aiohttp.TCPConnector(ssl=tls if tls is not None else True)
    async with aiohttp.ClientSession(connector=connector) as session:
        pending: list[asyncio.Task[list[str]]] = []
        for step in steps:
            if step.background:
                # Its head is kept: in this race it may be the one that gets the 409.
                pending.append(asyncio.ensure_future(run_step(session, step, port, True, scheme)))
                continue
            if pending:
                # The duplicate races the first: whichever arrives second gets the answer
                # shown (a 409, or the first one's answer followed, marked as a replay).
                answers = await asyncio.gather(
                    run_step(session, step, port, scheme=scheme), *pending
                )
                pending.clear()
                got = next((a for a in answers if set(step.output) <= set(a)), answers[0])
            else:
                got = await run_step(session, step, port, scheme=scheme)
            for shown in step.output:
                assert shown in got, f"README shows {shown!r} for curl {step.args}; got {got}"
            assert_only_marked_lines_are_left_out(step, got)


def assert_only_marked_lines_are_left_out(step: Step, got: list[str]) -> None:
    """The answer is shown as it is: its lines in their order, and every header README does
    not show is named on the step's `[elided: ...]` line."""
    shown = [line for line in step.output if line in got]
    assert shown == sorted(shown, key=got.index), f"README shows another order than {got}"
    if not any(a.startswith("-si") for a in step.args):
        return
    for header in got[1 : got.index("")]:
        name = header.split(":", 1)[0].lower()
        assert header in step.output or name in step.elided, (
            f"curl {step.args}: {header!r} is neither shown nor marked as elided"
        )
