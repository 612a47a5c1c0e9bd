"""Operator mistakes, made from outside as a hurried operator makes them: each is one line on
stderr naming the problem and exit 2, never a traceback; a running gateway refuses a broken
reload in one log line and keeps serving with the config it had."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import yaml

from gateway.cli import main
from testkit.polling import wait_until
from testkit.ports import Port, wait_for_port
from testkit.procs import STARTS_WITHIN, GatewayProcess

from .tls_certs import private_ca

ROUTE = "  - name: pay\n    path_prefix: /pay\n    upstream: http://127.0.0.1:9000\n"
GOOD = "redis: {url: 'redis://127.0.0.1:6399'}\nroutes:\n" + ROUTE


def gateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The gateway run to its end: one that refuses to start exits within a start's time."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True, text=True, timeout=STARTS_WITHIN, stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def assert_one_line(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert expected in result.stderr


def run_main(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> subprocess.CompletedProcess[str]:
    """`idem-gateway ARGS` in this process (many cases, no interpreter start each): an
    exception escaping `main` is the traceback the operator would see."""
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's way out
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # The file itself.
        (GOOD.encode() + b"# caf\xe9\n", ":6:6: not UTF-8 (byte 0xe9)"),
        (b"routes: " + b"[" * 3000 + b"]" * 3000 + b"\n", "not valid YAML: nested too deeply"),
        (GOOD.encode() + b"\x00\n", ":6:1: not valid YAML: character #x0000 is not allowed"),
        (GOOD + "redis: {url: embedded}\n", ":6:1: not valid YAML: duplicate key 'redis'"),
        (GOOD + "    lease: 5s\n    lease: 5m\n", ":7:5: not valid YAML: duplicate key 'lease'"),
        # Durations that would make every request fail at run time.
        (GOOD + "    lease: .nan\n", "routes[0].lease: nan must be a positive duration"),
        (GOOD + "    retention: .inf\n", "routes[0].retention: inf is longer than the longest"),
        (GOOD + "    retention: 99999999999d\n", "is longer than the longest duration, 3650d"),
        # Redis URLs that redis-py takes apart only once the gateway runs.
        (GOOD.replace("6399", "99999"), "redis.url: 'redis://127.0.0.1:99999': its port is"),
        (GOOD.replace("127.0.0.1:6399", ":::"), "redis.url: 'redis://:::': its port is not"),
        (GOOD.replace("127.0.0.1:6399", ""), "redis.url: 'redis://': it names no host"),
        (GOOD.replace("6399", "6399/one"), "'/one' is not a database number"),
        (GOOD.replace("redis://127.0.0.1:6399", "unix://"), "needs the socket's path"),
        (GOOD.replace("}", ", tls: {enabled: true, ca: /no/ca.pem}}", 1),
         "redis.tls: ca '/no/ca.pem' cannot be loaded: No such file or directory"),
        # Upstreams the request's path cannot be appended to.
        (GOOD.replace("9000", "9000?v=2"), "routes[0].upstream: 'http://127.0.0.1:9000?v=2' is"),
        (GOOD.replace("http://", "http://svc:pw@"), "without user@, ?query or #fragment"),
        (GOOD + "upstream: 'http://127.0.0.1:9001#x'\n", "upstream: 'http://127.0.0.1:9001#x'"),
        # Routes that can never be used.
        (GOOD + ROUTE.replace("pay\n", "pay2\n", 1).replace("/pay", "/PAY/"),
         "routes 'pay' and 'pay2' have the same path_prefix ('/PAY/')"),
        (GOOD.replace("/pay", "'/pay?v=1'"), "'/pay?v=1' is not a path"),
        (GOOD + "    scope: [Tenant Id]\n", "routes[0].scope: 'Tenant Id' is not a header name"),
        # What a key whose owner died becomes.
        (GOOD + "    on_owner_lost: retry\n",
         "routes[0].on_owner_lost: 'retry': Input should be 'release', 'keep' or 'record'"),
        (GOOD + "    mark_sent: sometimes\n", "routes[0].mark_sent: 'sometimes'"),
        # Listeners that cannot both listen.
        (GOOD + "listen: {port: 8088}\nadmin: {port: 8088}\n",
         "admin.port 8088 is listen.port: the admin listener needs a port of its own"),
        (GOOD + "listen: {backlog: 99999999999}\n", "listen.backlog: 99999999999: Input should"),
        # An upstream that is the gateway itself: each request forwarded to itself, forever.
        (GOOD.replace("9000", "8080"),
         "routes[0].upstream: 'http://127.0.0.1:8080' is this gateway's own listener"),
        (GOOD + "listen: {host: 0.0.0.0, port: 9000}\n", "is this gateway's own listener"),
        # A plain proxy with nowhere to go.
        ("redis: {url: embedded}\npass_through: true\n",
         "pass_through without routes or upstream: every request would get 404"),
    ],
)  # fmt: skip
def test_check_refuses_a_mistake_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes, expected: str
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert_one_line(run_main(["--check", str(path)], capsys), expected)


def test_a_refused_start_says_the_same_line(tmp_path: Path) -> None:
    """The real process: what --check refuses, the start refuses in the same line."""
    path = tmp_path / "gateway.yaml"
    path.write_bytes(GOOD.replace("6399", "abc").encode())
    result = gateway("--config", str(path), "--workers", "1")
    assert_one_line(result, "redis.url: 'redis://127.0.0.1:abc': its port is not a number")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--workers", "0"], "idem-gateway: --workers must be from 1 to 64"),
        (["--workers", "100000"], "idem-gateway: --workers must be from 1 to 64"),
        (["--workers", "abc"], "idem-gateway: argument --workers: invalid int value: 'abc'"),
        (["--check", ""], "idem-gateway: --check needs a file name, got an empty one"),
        (["--config", "", "keys", "show", "--route", "pay", "k"], "--config needs a file name"),
        (["keys", "show", "k"], "idem-gateway keys show: the following arguments are required"),
        (["keys", "resolve", "--route", "pay", "--status", "ok", "k"],
         "idem-gateway keys resolve: argument --status: invalid int value: 'ok'"),
    ],
)  # fmt: skip
def test_a_usage_mistake_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    assert_one_line(run_main(args, capsys), expected)


def test_a_relative_xdg_state_home_is_ignored(tmp_path: Path) -> None:
    """As the XDG spec says; taken as given, it failed the start with a traceback."""
    path = tmp_path / "gateway.yaml"
    path.write_text("routes:\n" + ROUTE)
    env = {"XDG_STATE_HOME": "state", "HOME": str(tmp_path), "IDEM_STATE_DIR": ""}
    result = gateway("--config", str(path), "keys", "show", "--route", "pay", "k", env=env)
    assert_one_line(result, f"state_dir {tmp_path}/.local/state/idem-gateway; start it")


async def test_a_running_gateway_refuses_each_broken_reload_and_keeps_serving(
    upstream, redis_url: str, tmp_path: Path
) -> None:
    _, origin = upstream
    good = {
        "redis": {"url": redis_url},
        "routes": [{"name": "pay", "path_prefix": "/pay", "upstream": origin, "require_key": True}],
    }  # fmt: skip
    process = GatewayProcess(good, tmp_path)
    good_text = process.config_path.read_text()
    broken = {
        "emptied": b"",
        "no routes left": yaml.safe_dump({"redis": {"url": redis_url}}).encode(),
        "not UTF-8": good_text.encode() + b"# caf\xe9\n",
        "nested too deeply": b"routes: " + b"[" * 3000 + b"]" * 3000 + b"\n",
        "a key given twice": good_text.encode() + b"    require_key: false\n",
        "a NaN lease": good_text.encode() + b"    lease: .nan\n",
    }
    await asyncio.to_thread(process.start)
    try:
        async with aiohttp.ClientSession() as http:
            for n, (what, content) in enumerate(broken.items()):
                process.config_path.write_bytes(content)
                before = len(process.log().splitlines())
                process.signal(signal.SIGHUP)
                new = await _new_lines(process, before, "config reload")
                assert len(new) == 1 and "config reload refused" in new[0], (what, new)
                assert "Traceback" not in new[0], what
                async with http.post(f"{process.url}/pay") as resp:
                    assert resp.status == 400, what  # require_key still holds
                key = {"Idempotency-Key": f"k-{n}"}
                async with http.post(f"{process.url}/pay", headers=key) as resp:
                    assert resp.status == 201, what

            # Not a mistake to refuse, but its cost is said: the records stay behind.
            renamed = good_text.replace("name: pay", "name: payments")
            process.config_path.write_text(renamed)
            before = len(process.log().splitlines())
            process.signal(signal.SIGHUP)
            new = await _new_lines(process, before, "config reloaded")
            assert any(
                "keys recorded under route 'pay' (gone, or renamed) are no longer replayed" in line
                for line in new
            ), new
        assert process.process is not None and process.process.poll() is None
    finally:
        assert process.stop() == 0


async def _new_lines(process: GatewayProcess, before: int, text: str) -> list[str]:
    """The log lines written since line `before` (but the requests' access lines), once one
    of them holds `text`."""
    deadline = time.monotonic() + 10
    while True:
        new = [line for line in process.log().splitlines()[before:] if ".access" not in line]
        if any(text in line or "Traceback" in line for line in new):
            return new
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{process.log()[-3000:]}"
        await asyncio.sleep(0.02)


async def test_a_new_key_prefix_is_said_with_its_cost_at_the_reload_and_at_the_start(
    upstream, redis_url: str, tmp_path: Path
) -> None:
    """A reload keeps the running prefix and says what the new one costs once it is used; the
    start that uses it finds the records left under the old one and says it once. The cost
    is real: the retry of a key recorded before runs upstream again."""
    counting, origin = upstream
    route = {"name": "pay", "path_prefix": "/pay", "upstream": origin}
    process = GatewayProcess({"redis": {"url": redis_url}, "routes": [route]}, tmp_path)
    key = {"Idempotency-Key": "before-the-change"}
    said = "another key_prefix than this gateway's"
    await asyncio.to_thread(process.start)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{process.url}/pay", headers=key) as resp:
                assert resp.status == 201
            config = yaml.safe_load(process.config_path.read_text())
            config["redis"]["key_prefix"] = "idem-v2"
            process.config_path.write_text(yaml.safe_dump(config))
            before = len(process.log().splitlines())
            process.signal(signal.SIGHUP)
            new = await _new_lines(process, before, "config reloaded")
            moved = [line for line in new if "redis.key_prefix" in line]
            assert len(moved) == 1, new
            assert "redis.key_prefix 'idem' -> 'idem-v2' is kept until a restart" in moved[0]
            assert "a retry of every one of them runs upstream again" in moved[0]
            async with http.post(f"{process.url}/pay", headers=key) as resp:
                assert resp.headers["Idempotent-Replayed"] == "true"  # kept until a restart
            assert counting.count("/pay", "before-the-change") == 1

            assert process.stop() == 0
            assert said not in process.log()  # its own records: nothing to say
            before = len(process.log().splitlines())
            await asyncio.to_thread(process.start)
            found = [line for line in process.log().splitlines()[before:] if said in line]
            assert len(found) == 1, process.log()[-3000:]
            assert "this gateway's 'idem-v2'" in found[0]
            assert "1 of route 'pay' under 'idem'" in found[0]
            assert "a retry of one of their keys runs upstream again" in found[0]
            async with http.post(f"{process.url}/pay", headers=key) as resp:
                assert resp.status == 201 and "Idempotent-Replayed" not in resp.headers
            assert counting.count("/pay", "before-the-change") == 2
    finally:
        assert process.stop() == 0


def test_tls_files_swapped_are_named_not_an_openssl_source_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = private_ca(tmp_path).client_files()
    for section in ("upstream_tls: {{cert: {0}, key: {1}}}", "upstream_tls: {{cert: {1}}}"):
        path = tmp_path / "gateway.yaml"
        path.write_text(GOOD + section.format(key, cert) + "\n")
        result = run_main(["--check", str(path)], capsys)
        assert_one_line(result, "cannot be loaded: not a PEM certificate and its private key")
        assert "_ssl.c" not in result.stderr


def test_a_sighup_while_the_gateway_starts_does_not_end_it(
    redis_url: str, tmp_path: Path, held_port: Port
) -> None:
    """A reload sent right after a start (before the reload handler is in place) used to
    end the gateway without a word, as SIGHUP's default action does."""
    port = held_port.number
    path = tmp_path / "gateway.yaml"
    path.write_text(f"listen: {{port: {port}}}\nredis: {{url: '{redis_url}'}}\nroutes:\n" + ROUTE)
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(path), "--workers", "1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=_sighup_by_default,  # whatever this test run inherited (nohup)
    )  # fmt: skip
    try:

        def takes_a_reload() -> bool:
            """The starting gateway ignores SIGHUP: it can take one, long before it serves."""
            ignores = _ignores_sighup(process.pid)
            assert ignores or process.poll() is None, "the gateway ended before it served"
            return ignores

        wait_until(takes_a_reload, 10, every=0.005)
        process.send_signal(signal.SIGHUP)
        wait_for_port(port, process, 20)  # it went on to serve
        assert process.poll() is None
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert b"Traceback" not in err


def _sighup_by_default() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _ignores_sighup(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


def test_an_admin_listener_on_the_public_address_under_another_name_stops_the_start(
    redis_url: str, tmp_path: Path, held_port: Port
) -> None:
    """`localhost` is `127.0.0.1`: the admin listener took the public address and the
    gateway said it listened while every request reached the admin app (404)."""
    port = held_port.number
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"listen: {{host: 127.0.0.1, port: {port}}}\nadmin: {{host: localhost, port: {port}}}\n"
        f"redis: {{url: '{redis_url}'}}\nroutes:\n" + ROUTE
    )
    result = gateway("--config", str(path), "--workers", "1")
    assert_one_line(result, f"admin.port: localhost:{port} is the public listener's address")


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("option", ["--listen-fd", "--admin-fd"])
def test_a_socket_to_serve_that_is_none_is_one_line(
    tmp_path: Path, workers: str, option: str, held_port: Port
) -> None:
    """What started the gateway passes its sockets by number: one that is no socket (here
    its standard input, /dev/null) is said in one line, exit 3, as a port it cannot bind."""
    path = tmp_path / "gateway.yaml"
    path.write_text(GOOD + f"listen: {{port: {held_port.number}}}\nadmin: {{port: 0}}\n")
    result = gateway("--config", str(path), "--workers", workers, option, "0")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines() == [
        f"idem-gateway: {option} 0: not a socket this gateway was given (Socket operation on"
        " non-socket)"
    ]


def test_check_says_tracing_needs_its_extra_as_the_start_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--check said OK to a file the start then refused."""
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # the extra is missing
    path = tmp_path / "gateway.yaml"
    path.write_text(GOOD + "tracing: {enabled: true}\n")
    result = run_main(["--check", str(path)], capsys)
    assert_one_line(result, "tracing.enabled needs the otel extra")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("resolve", "expected"),
    [
        (["--status", "200", "--content-type", "text/plain\r\nSet-Cookie: session=x"],
         "content type 'text/plain\\r\\nSet-Cookie: session=x' is not a header value"),
        (["--status", "101"], "101 is not the status of a final answer (200 to 599)"),
        (["--status", "204", "--body-file", __file__], "a 204 answer has no body"),
    ],
)  # fmt: skip
def test_keys_resolve_refuses_an_answer_no_replay_could_send(
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    resolve: list[str],
    expected: str,
) -> None:
    """Checked before Redis is asked: a CR LF in the content type would have been written
    into every replay of the key, a 1xx or a 204 with a body would be no answer at all."""
    path = tmp_path / "gateway.yaml"
    path.write_text(f"redis: {{url: '{redis_url}'}}\nroutes:\n" + ROUTE)
    args = ["--config", str(path), "keys", "resolve", "--route", "pay", *resolve, "key-1"]
    assert_one_line(run_main(args, capsys), f"idem-gateway keys: {expected}")


def test_workers_that_cannot_start_say_it_once_with_the_exit_code_of_one(
    redis_url: str, tmp_path: Path, held_port: Port
) -> None:
    """`--workers N` is the default on a machine of N cores: each worker said the same line,
    was restarted three times, and the parent exited 1 among its own log lines."""
    (tmp_path / "a-file").write_bytes(b"")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"listen: {{port: {held_port.number}}}\nredis: {{url: '{redis_url}'}}\n"
        f"blob: {{url: 'file://{tmp_path}/a-file/blobs'}}\nroutes:\n" + ROUTE
    )
    result = gateway("--config", str(path), "--workers", "2")
    assert_one_line(result, "cannot start: blob.url:")
    assert "is not a writable directory" in result.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_refused_start_with_the_embedded_redis_is_one_line(
    tmp_path: Path, workers: str, held_port: Port
) -> None:
    """The default Redis: its start was logged (twice) before the line saying why the
    gateway could not start."""
    (tmp_path / "a-file").write_bytes(b"")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"listen: {{port: {held_port.number}}}\nredis: {{url: embedded}}\n"
        f"state_dir: {tmp_path}/state\nblob: {{url: 'file://{tmp_path}/a-file/blobs'}}\n"
        "routes:\n" + ROUTE
    )
    result = gateway("--config", str(path), "--workers", workers)
    assert_one_line(result, "is not a writable directory")


@pytest.mark.parametrize("args", [["schema"], ["--check", "GOOD"], ["sizing"]])
def test_output_that_cannot_be_written_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """`idem-gateway schema > config/schema.json` on a full disk ended in a traceback (and
    `idem-gateway sizing | head -1` on a long table, its pipe closed)."""
    path = tmp_path / "gateway.yaml"
    path.write_text(GOOD)
    args = [str(path) if arg == "GOOD" else arg for arg in args]
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "gateway", *args],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=30,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == "idem-gateway: cannot write the output: No space left on device\n"


def test_ctrl_c_while_the_gateway_starts_is_one_line(
    redis_url: str, tmp_path: Path, held_port: Port
) -> None:
    """Before it serves (aiohttp then drains on SIGINT), a Ctrl-C was a KeyboardInterrupt
    traceback from wherever the start was."""
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"listen: {{port: {held_port.number}}}\nredis: {{url: '{redis_url}'}}\nroutes:\n" + ROUTE
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(path), "--workers", "1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=_sigint_by_default, text=True,
    )  # fmt: skip
    # Once it ignores SIGHUP, the gateway's first line ran: Python is up.
    wait_until(lambda: _ignores_sighup(process.pid), 10, "the gateway starting", every=0.002)
    process.send_signal(signal.SIGINT)  # long before it can serve
    _, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (130, "idem-gateway: interrupted\n")


def _sigint_by_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a shell's background job ignores it
    # Under nohup SIGHUP comes ignored: the gateway would seem to have run its first line
    # before Python even installed its SIGINT handler.
    _sighup_by_default()
