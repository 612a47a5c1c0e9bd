"""The API styles of the corpus, and which of them training never sees.

Each style is a kind of API with a few deployments (`house.make_house`); the held-out styles
are kept out of the training corpus so that `--evaluate` can say how the dictionary does on
APIs it has not seen, which is what a shipped dictionary meets.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import commerce, formats, platform
from .house import StyleMaker


@dataclass(frozen=True)
class Style:
    name: str
    make: StyleMaker
    ecosystems: tuple[str, ...] | None = None  # None: built on any
    weight: float = 1.0  # its share of the corpus, against 1 for most


STYLES = (
    Style("stripe_payments", commerce.stripe_payments),
    Style("adyen_payments", commerce.adyen_payments, ("java", "go", "node")),
    Style("paypal_orders", commerce.paypal_orders, ("java", "node")),
    Style("checkout_orders", commerce.checkout_orders),
    Style("inventory", commerce.inventory),
    Style("shipping_labels", commerce.shipping_labels, ("dotnet", "node", "python")),
    Style("subscriptions", commerce.subscriptions),
    Style("bank_transfers", commerce.bank_transfers),
    Style("wallet_transfers", commerce.wallet_transfers, ("node", "go", "rust")),
    Style("bookings", commerce.bookings),
    Style("scim_users", platform.scim_users),
    Style("accounts", platform.accounts),
    Style("cloud_instances", platform.cloud_instances, ("go", "python", "ruby")),
    Style("cloud_volumes", platform.cloud_volumes, ("go", "java", "rust")),
    Style("dns_records", platform.dns_records, ("go", "rust", "node")),
    Style("messaging", platform.messaging, ("python", "java", "go")),
    Style("notifications", platform.notifications),
    Style("forge_rest", platform.forge_rest, ("ruby", "go")),
    Style("kubernetes", platform.kubernetes, ("go",)),
    Style("aws_json", platform.aws_json, weight=0.5),
    Style("google_api", platform.google_api, weight=0.5),
    Style("webhooks", platform.webhooks),
    Style("uploads", platform.uploads),
    Style("saas_resources", platform.saas_resources, weight=2.0),
    Style("events_ingest", platform.events_ingest, weight=0.7),
    Style("jsonapi", formats.jsonapi, ("ruby", "php", "node", "elixir")),
    Style("hal", formats.hal, ("java",)),
    Style("graphql", formats.graphql, ("node", "ruby", "python", "go", "elixir")),
    Style("soap", formats.soap, ("dotnet", "java"), weight=0.6),
    Style("odata", formats.odata, ("dotnet",)),
    Style("jsonrpc", formats.jsonrpc, ("go", "rust", "node", "python")),
    Style("nvp_form", formats.nvp_form, ("php", "java"), weight=0.5),
    Style("problem_json", formats.problem_json),
    Style("validation_errors", formats.validation_errors),
    Style("no_content", formats.no_content, weight=0.7),
    Style("accepted", formats.accepted),
    Style("proxy_html_errors", formats.proxy_html_errors, weight=0.5),
    Style("platform_html_errors", formats.platform_html_errors, weight=0.4),
    Style("plain_text", formats.plain_text, weight=0.5),
)
BY_NAME = {style.name: style for style in STYLES}

# Kept out of training, one or two of each family: payments, goods, travel, cloud, formats,
# error pages. Their deployments (servers, conventions) are never seen either.
HELD_OUT = frozenset(
    {
        "adyen_payments",
        "shipping_labels",
        "bookings",
        "kubernetes",
        "hal",
        "odata",
        "jsonrpc",
        "nvp_form",
        "platform_html_errors",
    }
)
TRAINED = tuple(style for style in STYLES if style.name not in HELD_OUT)
