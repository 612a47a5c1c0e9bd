"""Every way an upstream may read a path is considered by routing, and no more."""

from __future__ import annotations

import pytest

from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings
from gateway.core.paths import readings
from gateway.core.routing import route_for


@pytest.mark.parametrize(
    ("path", "read_as"),
    [
        ("/payments/7", {"/payments/7"}),
        ("/Payments/7", {"/payments/7"}),
        ("/public/../payments/7", {"/payments/7"}),
        ("//payments/7", {"/payments/7", "//payments/7"}),
        ("/payments//../7/capture", {"/payments/7/capture", "/7/capture"}),  # WHATWG, merged
        ("/x/..\\payments/7", {"/payments/7"}),
        ("/x/..;/payments/7", {"/payments/7"}),
        ("/payments;jsessionid=1/7", {"/payments/7"}),
        ("/payments/./7", {"/payments/7"}),
        ("/..", {"/"}),
    ],
)
def test_a_path_is_read_every_way_an_upstream_may_read_it(path: str, read_as: set[str]) -> None:
    assert read_as <= readings(path)


@pytest.mark.parametrize(
    ("path", "raw", "read_as"),
    [
        ("/x/y/../payments/7", "/x%2Fy/../payments/7", "/payments/7"),
        ("/x/y/../payments/7", "/x%2fy/%2E%2E/payments/7", "/payments/7"),
        ("/a b/7", "/a%20b/7", "/a b/7"),
    ],
)
def test_a_path_is_also_read_as_sent_before_it_is_decoded(
    path: str, raw: str, read_as: str
) -> None:
    assert read_as in readings(path, raw)


def make_settings() -> Settings:
    origin = "http://127.0.0.1:9"
    return settings_from_dict(
        {
            "upstream": origin,
            "routes": [{"name": "pay", "path_prefix": "/payments", "upstream": origin}],
        }
    )


@pytest.mark.parametrize(
    "path",
    [
        "/payments",
        "/payments/7",
        "/PAYMENTS/7",
        "/a/../payments/7",
        "/payments/..",
        "/x/..;/payments",
    ],
)
def test_every_reading_under_the_prefix_is_routed_to_it(path: str) -> None:
    route = route_for(make_settings().routes, path)
    assert route is not None and route.name == "pay"


@pytest.mark.parametrize(
    "path", ["/paymentsx/7", "/payment/7", "/public/7", "/public/payments", "/"]
)
def test_a_path_no_reading_puts_under_the_prefix_stays_unprotected(path: str) -> None:
    assert route_for(make_settings().routes, path) is None
