"""The operators' console in a real browser: Debian's Chromium, driven by Playwright for
Python (never `playwright install`: no browser is downloaded). A gateway process runs in front
of an upstream on loopback; every request the page is tested on went through it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import redis

from .consolekit import (
    TOKEN,
    WAIT_MS,
    XSS_BODY,
    XSS_HEADER,
    Console,
    StartGateway,
    console,
    expect,
    send,
    shots,
    start_gateway,
)

__all__ = ["console", "shots", "start_gateway"]  # the fixtures, used by name

# Where the multi-worker test leaves its screenshot: the test's tmp_path, or docs/console.png
# when `make console-png` asks for it (the picture README shows).
SCREENSHOT = "IDEM_CONSOLE_SCREENSHOT"
XSS_KEY = "<img src=x onerror=window.__xss=3>"
SECRET = "SECRET-MARKER-7f3a"


async def test_the_overview_loads_without_errors_and_its_counts_move(
    start_gateway: StartGateway, console: Console
) -> None:
    gateway, admin, _ = await start_gateway(1)
    await console.open(admin)
    await expect(console.page.locator("#workers-up")).to_have_text("1 / 1")
    for key in ("o-1", "o-2", "o-3", "o-1"):
        await send(gateway, "/pay", key)
    await send(gateway, "/pay", "o-1", '{"other": 1}')  # mismatch
    forwarded = console.cell("payments", "forwarded")
    await expect(forwarded).to_have_attribute("data-total", "3", timeout=WAIT_MS)
    await expect(console.cell("payments", "replayed")).to_have_attribute("data-total", "1")
    await expect(console.cell("payments", "mismatch")).to_have_attribute("data-total", "1")
    await expect(console.page.locator("#redis")).to_have_text("reachable")
    assert console.errors == []


async def test_a_follower_is_shown_while_it_follows_and_counted_once_it_ended(
    start_gateway: StartGateway, console: Console, shots: Path
) -> None:
    gateway, admin, upstream = await start_gateway(1)
    await console.open(admin)
    following = console.cell("reports", "followed")
    await expect(following).to_have_attribute("data-followers", "0", timeout=WAIT_MS)
    headers = {"Idempotency-Key": "report-1"}
    async with aiohttp.ClientSession() as session:
        owner = await session.post(f"{gateway.url}/events", headers=headers)
        await owner.content.readuntil(b"data: one\n\n")
        follower = await session.post(f"{gateway.url}/events", headers=headers)
        await follower.content.readuntil(b"data: one\n\n")
        await expect(following).to_have_attribute("data-followers", "1", timeout=WAIT_MS)
        await expect(following).to_contain_text("1 following")
        await console.page.screenshot(path=str(shots / "console-following.png"), full_page=True)
        upstream.go_on.set()
        assert await follower.read() == b"id: 2\ndata: two\n\nid: 3\ndata: three\n\n"
        await owner.read()
        owner.close()
        follower.close()
    await expect(following).to_have_attribute("data-followers", "0", timeout=WAIT_MS)
    followed = console.cell("reports", "followed")
    await expect(followed).to_have_attribute("data-total", "1", timeout=WAIT_MS)
    assert upstream.calls["/events"] == 1
    assert console.errors == []


async def test_a_key_made_through_the_gateway_is_found_by_the_lookup(
    start_gateway: StartGateway, console: Console
) -> None:
    gateway, admin, _ = await start_gateway(1)
    status, _, body = await send(gateway, "/pay", "find-me", '{"amount": 7}')
    assert status == 201
    await console.open(admin, TOKEN)
    await console.look_up("payments", "find-me")
    record = console.page.locator("#record")
    await expect(record).to_be_visible(timeout=WAIT_MS)
    await expect(console.page.locator("#record-facts")).to_contain_text("completed")
    await expect(console.page.locator("#record-facts")).to_contain_text("201 Created")
    await expect(console.page.locator("#record-body")).to_have_text(body.decode())
    await expect(console.page.locator("#record-headers")).to_contain_text("application/json")
    await console.look_up("payments", "never-sent")
    await expect(console.page.locator("#lookup-error")).to_have_text("No record for this key.")
    assert console.errors == []


async def test_an_unknown_outcome_resolved_in_the_page_is_replayed_to_the_next_retry(
    start_gateway: StartGateway, console: Console
) -> None:
    gateway, admin, upstream = await start_gateway(1)
    status, headers, _ = await send(gateway, "/reset", "lost-1")
    assert (status, headers.get("Idempotency-Outcome")) == (502, "unknown")
    await console.open(admin, TOKEN)
    attention = console.page.locator("#attention tbody")
    await expect(attention).to_contain_text("unknown outcome", timeout=WAIT_MS)
    await console.look_up("risky", "lost-1")
    await expect(console.page.locator("#record-facts")).to_contain_text("unknown")
    await console.page.click("#resolve-open")
    await console.page.fill("#resolve-status", "201")
    await console.page.fill("#resolve-type", "application/json")
    await console.page.fill("#resolve-body", '{"id":"settled-by-hand"}')
    await console.page.click("#resolve-go")
    await console.confirm()
    await expect(console.page.locator("#action-result")).to_contain_text("Resolved")
    await expect(attention).not_to_contain_text("unknown outcome", timeout=WAIT_MS)

    status, headers, body = await send(gateway, "/reset", "lost-1")
    assert (status, body) == (201, b'{"id":"settled-by-hand"}')
    assert headers["Idempotent-Replayed"] == "true"
    assert upstream.calls["/reset"] == 1
    (audit,) = [line for line in gateway.log().splitlines() if '"gateway.audit"' in line]
    assert '"action":"resolve"' in audit and '"remote":"127.0.0.1"' in audit
    assert console.errors == []


async def test_a_key_purged_in_the_page_runs_again(
    start_gateway: StartGateway, console: Console
) -> None:
    gateway, admin, upstream = await start_gateway(1)
    assert (await send(gateway, "/pay", "purge-me"))[0] == 201
    assert upstream.calls["/pay"] == 1
    await console.open(admin, TOKEN)
    await console.look_up("payments", "purge-me")
    await expect(console.page.locator("#record")).to_be_visible(timeout=WAIT_MS)
    await console.page.click("#purge")
    await console.page.click("#confirm-no")  # a change of mind changes nothing
    status, headers, _ = await send(gateway, "/pay", "purge-me")
    assert headers.get("Idempotent-Replayed") == "true" and upstream.calls["/pay"] == 1
    await console.page.click("#purge")
    await expect(console.page.locator("#confirm-text")).to_contain_text("“purge-me”")
    await expect(console.page.locator("#confirm-text")).to_contain_text(
        "Its request ran upstream: a retry after the purge runs it again."
    )
    await console.confirm()
    result = console.page.locator("#action-result")
    await expect(result).to_be_visible()
    await expect(result).to_contain_text("Purged key “purge-me” (route payments)")
    await expect(console.page.locator("#lookup-error")).to_be_hidden()
    status, headers, _ = await send(gateway, "/pay", "purge-me")
    assert status == 201 and "Idempotent-Replayed" not in headers
    assert upstream.calls["/pay"] == 2
    assert console.errors == []


def damage_the_record(redis_url: str, route: str) -> str:
    """Damage by hand the one record of `route`, in whichever format it was written (a
    format-1 hash's metadata, a format-2 value's answer bytes): the name that holds it."""
    plain = redis.Redis.from_url(redis_url)
    try:
        [name] = [n for n in plain.keys(f"idem:*{route}*") if b"attention" not in n]
        if plain.type(name) == b"hash":
            plain.hset(name, "m", b"\x00garbage")
        else:
            value = bytearray(plain.get(name) or b"")
            value[-10] ^= 1  # past the fingerprint: the CRC over the answer fails
            plain.set(name, bytes(value), px=60_000)
        return name.decode()
    finally:
        plain.close()


async def test_a_corrupt_record_settled_in_the_page_never_runs_again(
    start_gateway: StartGateway, console: Console, redis_url: str, shots: Path
) -> None:
    gateway, admin, upstream = await start_gateway(1)
    assert (await send(gateway, "/pay", "damaged"))[0] == 201
    record = damage_the_record(redis_url, "payments")
    status, _, body = await send(gateway, "/pay", "damaged")
    assert status == 502 and b"record-corrupt" in body
    await console.open(admin, TOKEN)
    await console.look_up("payments", "damaged")
    facts = console.page.locator("#record-facts")
    await expect(facts).to_contain_text("corrupt", timeout=WAIT_MS)
    await expect(facts).to_contain_text(record)  # the name that holds it
    await expect(console.page.locator("#resolve-open")).to_be_hidden()
    settle = console.page.locator("#settle")
    await expect(settle).to_be_visible()
    await settle.click()
    confirm = console.page.locator("#confirm-text")
    await expect(confirm).to_contain_text("as an unknown outcome? It is not run again")
    await expect(confirm).to_contain_text("retries get 502 outcome-unknown")
    await console.page.screenshot(path=str(shots / "settle-confirm.png"), full_page=True)
    await console.confirm()
    result = console.page.locator("#action-result")
    await expect(result).to_contain_text(
        "Settled key “damaged” (route payments) as an unknown outcome: retries get 502 "
        "outcome-unknown (Idempotency-Outcome: unknown) until its retention ends or it is "
        "resolved; the upstream is not called again.",
        timeout=WAIT_MS,
    )
    await expect(facts).to_contain_text("unknown")
    await expect(settle).to_be_hidden()  # settled: it reads now
    await expect(console.page.locator("#resolve-open")).to_be_visible()
    await expect(console.page.locator("#attention tbody")).to_contain_text(
        "unknown outcome", timeout=WAIT_MS
    )
    await console.page.screenshot(path=str(shots / "settle-done.png"), full_page=True)
    for _ in range(3):
        status, headers, body = await send(gateway, "/pay", "damaged")
        assert (status, headers.get("Idempotency-Outcome")) == (502, "unknown")
        assert b"outcome-unknown" in body
    assert upstream.calls["/pay"] == 1
    (audit,) = [line for line in gateway.log().splitlines() if '"gateway.audit"' in line]
    assert '"action":"settle"' in audit and record in audit
    assert console.errors == []


async def test_html_in_a_recorded_body_header_and_key_renders_as_text(
    start_gateway: StartGateway, console: Console
) -> None:
    gateway, admin, _ = await start_gateway(1)
    status, _, body = await send(gateway, "/xss", f'"{XSS_KEY}"')
    assert (status, body) == (200, XSS_BODY)
    await console.open(admin, TOKEN)
    await console.look_up("pages", f'"{XSS_KEY}"')  # as the client sent it
    record = console.page.locator("#record")
    await expect(record).to_be_visible(timeout=WAIT_MS)
    await expect(console.page.locator("#record-body")).to_have_text(XSS_BODY.decode())
    await expect(console.page.locator("#record-headers")).to_contain_text(XSS_HEADER)
    await expect(console.page.locator("#record-facts")).to_contain_text(XSS_KEY)
    assert await record.locator("img, script, b").count() == 0
    await console.page.hover("#record-headers")
    assert await console.page.evaluate("window.__xss") is None
    assert console.dialogs == [] and console.errors == []


async def test_without_the_token_no_key_data_reaches_the_page(
    start_gateway: StartGateway, console: Console
) -> None:
    gateway, admin, _ = await start_gateway(1)
    assert (await send(gateway, "/pay", "secret-key", f'"{SECRET}"'))[0] == 201
    seen: list[tuple[str, bytes]] = []  # every answer the page's scripts fetched

    async def recorded(route: Any) -> None:
        response = await route.fetch()
        seen.append((route.request.url, await response.body()))
        await route.fulfill(response=response)

    await console.page.route("**/console/api/**", recorded)
    await console.open(admin)
    await expect(console.page.locator("#keys-open")).to_be_hidden()
    await console.page.fill("#token", "a-wrong-token-of-some-length")
    await console.page.click("#token-use")
    await expect(console.page.locator("#token-state")).to_have_text("token refused")
    await expect(console.page.locator("#keys-open")).to_be_hidden()
    # Even a script of the page's origin gets nothing without the token.
    status = await console.page.evaluate(
        """() => fetch('/console/api/key', {method: 'POST', headers: {'Content-Type':
        'application/json'}, body: JSON.stringify({route: 'payments', key: 'secret-key'})})
        .then(r => r.status)"""
    )
    assert status == 401
    await console.page.wait_for_timeout(2500)  # one more refresh of the overview
    assert SECRET not in await console.page.content()
    assert len(seen) >= 2  # overviews, the refused token, the page's own fetch
    for url, body in seen:
        assert SECRET.encode() not in body, url
    assert all("token" not in url.lower() for url, _ in seen)
    assert not any(r.url.endswith(("/attention", "/routes")) and r.ok for r in console.responses)


async def test_a_multi_worker_gateway_shows_every_workers_traffic(
    start_gateway: StartGateway, console: Console, shots: Path
) -> None:
    gateway, admin, _ = await start_gateway(2)
    await console.open(admin, TOKEN)
    await expect(console.page.locator("#workers-up")).to_have_text("2 / 2")
    rows = console.page.locator("#workers tbody tr")
    sent = 0
    deadline = time.monotonic() + 30
    while True:  # connections of their own, at once, until the kernel gave each some
        await asyncio.gather(
            *(send(gateway, "/pay", f"w-{sent + i}", close=True) for i in range(10))
        )
        sent += 10
        await expect(console.cell("payments", "forwarded")).to_have_attribute(
            "data-total", str(sent), timeout=WAIT_MS
        )
        served = [int(await rows.nth(i).locator("td").nth(6).inner_text()) for i in range(2)]
        if all(served):
            break
        assert time.monotonic() < deadline, f"one worker served everything: {served}"
    assert sum(served) == sent
    # A few other answers and a lookup, for the picture in the docs.
    await send(gateway, "/pay", "w-0")
    await send(gateway, "/pay", "w-1", '{"amount": 2}')
    await send(gateway, "/pay", "")
    await send(gateway, "/reset", "lost-9")
    await expect(console.cell("payments", "rejected")).to_have_attribute(
        "data-total", "1", timeout=WAIT_MS
    )
    attention = console.page.locator("#attention tbody")
    await expect(attention).to_contain_text("unknown outcome", timeout=WAIT_MS)
    await console.look_up("payments", "w-3")
    await expect(console.page.locator("#record")).to_be_visible(timeout=WAIT_MS)
    shot = os.environ.get(SCREENSHOT) or str(shots / "console.png")
    await console.page.screenshot(path=shot, full_page=True)
    assert console.errors == []
