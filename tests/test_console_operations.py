"""The console on a bad day, in Chromium: every kind of traffic on its route (requests sent
upstream without idempotency while Redis is down shown loudly), an attention list that says
how many keys need a person, pages through them and acts on one by its record id, and one
that says it is incomplete while Redis is unreachable. Screenshots, narrow and wide, with
and without the token, go to the `shots` folder (never docs/)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gateway.core.keys import digest, record_names, tenant_id
from testkit.redis_server import RedisServer

from .consolekit import (
    TOKEN,
    WAIT_MS,
    Console,
    StartGateway,
    console,
    expect,
    send,
    shots,
    start_gateway,
)

__all__ = ["console", "shots", "start_gateway"]  # the fixtures, used by name

NARROW = {"width": 390, "height": 844}
WIDE = {"width": 1400, "height": 1000}


async def post_without_key(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.post(url, data=b"{}") as resp:
        await resp.read()
        return resp.status


async def test_every_kind_of_traffic_is_on_its_route_and_bypassing_is_loud(
    start_gateway: StartGateway, console: Console, own_redis: RedisServer, shots: Path
) -> None:
    gateway, admin, upstream = await start_gateway(1, redis=own_redis.url)
    await console.open(admin)
    # Listed before any traffic, with its mode.
    pages = console.page.locator('tr[data-route="pages"]')
    await expect(pages).to_contain_text("enforce", timeout=WAIT_MS)
    await expect(console.page.locator('tr[data-route="lenient"]')).to_contain_text("fails open")
    await expect(console.page.locator('tr[data-route="trial"]')).to_contain_text("shadow")
    assert (await send(gateway, "/pay", "k-1"))[0] == 201  # forwarded
    assert (await send(gateway, "/pay", "k-1"))[0] == 201  # replayed
    assert (await send(gateway, "/pay", "k-1", '{"other": 1}'))[0] == 422  # refused
    assert (await send(gateway, "/pay", ""))[0] == 400  # refused: an empty key
    assert await post_without_key(f"{gateway.url}/pay") == 201  # passed through
    assert (await send(gateway, "/shadow", "s-1"))[0] == 201  # run, and recorded
    assert (await send(gateway, "/shadow", "s-1"))[0] == 201  # shadowed: enforce would replay
    for outcome, total in (
        ("forwarded", 1), ("replayed", 1), ("mismatch", 1), ("rejected", 1), ("unprotected", 1)
    ):  # fmt: skip
        cell = console.cell("payments", outcome)
        await expect(cell).to_have_attribute("data-total", str(total), timeout=WAIT_MS)
    await expect(console.cell("trial", "shadowed")).to_have_attribute("data-total", "1")
    await expect(console.cell("trial", "forwarded")).to_have_attribute("data-total", "1")
    await expect(console.page.locator("#bypass-alert")).to_be_hidden()
    await console.page.screenshot(path=str(shots / "traffic-no-token.png"), full_page=True)

    own_redis.stop()
    calls = upstream.calls["/open"]
    for n in range(3):  # Redis down, fail_mode open: upstream called with no idempotency
        status, headers, _ = await send(gateway, "/open", f"b-{n}")
        assert status == 201 and headers.get("Idempotency-Degraded") == "true"
    assert upstream.calls["/open"] == calls + 3
    assert (await send(gateway, "/pay", "k-2"))[0] == 503  # fails closed: an error
    alert = console.page.locator("#bypass-alert")
    await expect(alert).to_be_visible(timeout=WAIT_MS)
    await expect(alert).to_contain_text("lenient: 3 requests")
    await expect(console.cell("lenient", "bypassed")).to_have_attribute("data-total", "3")
    await expect(console.cell("lenient", "bypassed")).to_have_class("alarm")
    await expect(console.page.locator('tr[data-route="lenient"]')).to_have_class("bypassing")
    await expect(console.cell("payments", "error")).to_have_attribute("data-total", "1")
    await expect(console.page.locator("#redis")).to_have_text("unreachable", timeout=WAIT_MS)
    await console.page.fill("#token", TOKEN)
    await console.page.click("#token-use")
    await expect(console.page.locator("#keys-open")).to_be_visible(timeout=WAIT_MS)
    await expect(console.page.locator("#attention-incomplete")).to_be_visible(timeout=WAIT_MS)
    await expect(console.page.locator("#attention-empty")).to_be_hidden()
    await console.page.screenshot(path=str(shots / "redis-down-wide.png"), full_page=True)
    await console.page.set_viewport_size(NARROW)
    await expect(alert).to_be_visible()
    await console.page.screenshot(path=str(shots / "redis-down-narrow.png"), full_page=True)
    assert console.errors == []


async def test_the_attention_list_counts_pages_and_acts_by_record_id(
    start_gateway: StartGateway, console: Console, shots: Path
) -> None:
    gateway, admin, upstream = await start_gateway(1)
    lost = 60
    for n in range(lost):  # one after the other: each sent, so each outcome is unknown
        status, headers, _ = await send(gateway, "/reset", f"lost-{n}")
        assert (status, headers.get("Idempotency-Outcome")) == (502, "unknown")
    await console.page.set_viewport_size(WIDE)
    await console.open(admin, TOKEN)
    count = console.page.locator("#attention-count")
    await expect(count).to_have_text(f"1\u201350 of {lost}", timeout=WAIT_MS)
    await expect(console.page.locator("#attention tbody tr")).to_have_count(50)
    await console.page.click("#attention-older")
    await expect(count).to_have_text(f"51\u2013{lost} of {lost}", timeout=WAIT_MS)
    await expect(console.page.locator("#attention-older")).to_be_disabled()
    await console.page.click("#attention-newer")
    await expect(count).to_have_text(f"1\u201350 of {lost}", timeout=WAIT_MS)
    # Resolve one of them from its row, by its record id: the raw key is nowhere on the page.
    # Its name in format 2: what a gateway writes on a Redis of its own.
    record = record_names("idem", "risky", tenant_id([None]), digest("lost-59"))[1]
    row = console.page.locator(f'#attention tr[data-record="{record}"]')
    await expect(row).to_be_visible()
    await row.locator("button.attention-open").click()
    facts = console.page.locator("#record-facts")
    await expect(facts).to_contain_text(record, timeout=WAIT_MS)
    await expect(facts).to_contain_text("not known here")
    await expect(facts).to_contain_text("unknown")
    await console.page.screenshot(path=str(shots / "attention-record.png"), full_page=True)
    await console.page.click("#resolve-open")
    await console.page.fill("#resolve-status", "201")
    await console.page.fill("#resolve-body", '{"id":"settled-by-record"}')
    await console.page.click("#resolve-go")
    await expect(console.page.locator("#confirm-text")).to_contain_text(record)
    await console.confirm()
    result = console.page.locator("#action-result")
    await expect(result).to_contain_text("Resolved record", timeout=WAIT_MS)
    await expect(result).to_be_visible()
    await expect(count).to_have_text(f"1\u201350 of {lost - 1}", timeout=WAIT_MS)
    await expect(row).to_have_count(0)
    calls = upstream.calls["/reset"]
    status, headers, body = await send(gateway, "/reset", "lost-59")
    assert (status, body) == (201, b'{"id":"settled-by-record"}')
    assert headers["Idempotent-Replayed"] == "true" and upstream.calls["/reset"] == calls
    (audit,) = [line for line in gateway.log().splitlines() if '"gateway.audit"' in line]
    assert '"action":"resolve"' in audit and record in audit
    await console.page.set_viewport_size(NARROW)
    await console.page.screenshot(path=str(shots / "attention-narrow.png"), full_page=True)
    assert console.errors == []


async def test_the_history_charts_show_the_traffic_of_the_last_minutes(
    start_gateway: StartGateway, console: Console, shots: Path
) -> None:
    gateway, admin, _ = await start_gateway(1)
    await console.open(admin)
    charts = console.page.locator("#history .chart")
    await expect(charts).to_have_count(4, timeout=WAIT_MS)
    for n in range(20):
        await send(gateway, "/pay", f"h-{n}")
    # The admin listener takes a point every 10 s; the page reads them as often.
    answers = console.page.locator('#history .chart[data-series="answers"] .now')
    await expect(answers).not_to_have_text("\u2013", timeout=30_000)
    await expect(answers).not_to_contain_text("max 0.0", timeout=30_000)
    await console.page.screenshot(path=str(shots / "history.png"), full_page=True)
    assert console.errors == []
