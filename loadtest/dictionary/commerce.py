"""Styles of money and goods: payments (Stripe-, Adyen- and PayPal-like), orders and
checkout, inventory, shipping labels, subscriptions, bank transfers, wallets and bookings."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .fakes import Fake
from .house import House, Reply


def stripe_payments(f: Fake, h: House) -> Reply:
    """A Stripe-like API: pretty JSON, `object` fields, prefixed ids, Request-Id headers."""
    brand = h.brand.capitalize()
    request = "req_" + f.base62(14)
    headers = h.headers(
        f,
        200,
        first=[
            ("Access-Control-Allow-Credentials", "true"),
            ("Access-Control-Allow-Methods", "GET,HEAD,PUT,PATCH,POST,DELETE"),
            ("Access-Control-Allow-Origin", "*"),
            (
                "Access-Control-Expose-Headers",
                f"Request-Id, {brand}-Manage-Version, "
                f"{brand}-Should-Retry, X-{brand}-External-Auth-Required",
            ),
            ("Access-Control-Max-Age", "300"),
            ("Cache-Control", "no-cache, no-store"),
            (
                "Content-Security-Policy",
                f"report-uri https://q.{h.brand}.com/csp-report?p=v1%2F"
                "payment_intents; block-all-mixed-content; default-src 'none'; base-uri 'none'; "
                "form-action 'none'; frame-ancestors 'none'; img-src 'self'; script-src 'self' "
                "'report-sample'; style-src 'self'",
            ),
            ("Idempotency-Key", f.uuid4()),
            ("Original-Request", request),
            ("Request-Id", request),
            (f"{brand}-Should-Retry", "false"),
            (f"{brand}-Version", f.pick(("2023-10-16", "2024-04-10", "2024-06-20", "2022-11-15"))),
            ("Vary", "Origin"),
        ],
        last=[("Strict-Transport-Security", "max-age=63072000; includeSubDomains; preload")],
    )
    h2 = replace(h, indent=2) if h.indent is not None else h
    currency = f.currency().lower()
    amount = f.minor_amount()
    customer = f.prefixed("cus", 14) if f.chance(0.6) else None
    if f.chance(0.15):
        code = f.pick(("card_declined", "expired_card", "incorrect_cvc", "processing_error"))
        body: dict[str, Any] = {
            "error": {
                "charge": f.prefixed("ch"),
                "code": code,
                "decline_code": f.pick(("insufficient_funds", "generic_decline", "do_not_honor")),
                "doc_url": f"https://{h.brand}.com/docs/error-codes/{code.replace('_', '-')}",
                "message": f.pick(
                    (
                        "Your card has insufficient funds.",
                        "Your card was declined.",
                        "Your card's security code is incorrect.",
                    )
                ),
                "request_log_url": f"https://dashboard.{h.brand}.com/test/logs/{request}"
                f"?t={int(f.when)}",
                "type": "card_error",
            }
        }
        return Reply(402, h2.dump(body), headers=headers)
    kind = f.weighted((("payment_intent", 5), ("refund", 1), ("customer", 1), ("charge", 1)))
    if kind == "refund":
        body = {
            "id": f.prefixed("re"),
            "object": "refund",
            "amount": amount,
            "balance_transaction": f.prefixed("txn"),
            "charge": f.prefixed("ch"),
            "created": int(f.when),
            "currency": currency,
            "metadata": {},
            "payment_intent": f.prefixed("pi"),
            "reason": f.pick((None, "requested_by_customer")),
            "receipt_number": None,
            "source_transfer_reversal": None,
            "status": "succeeded",
            "transfer_reversal": None,
        }
    elif kind == "customer":
        first, last = f.first(), f.last()
        body = {
            "id": customer or f.prefixed("cus", 14),
            "object": "customer",
            "address": None,
            "balance": 0,
            "created": int(f.when),
            "currency": None,
            "default_source": None,
            "delinquent": False,
            "description": None,
            "discount": None,
            "email": f.email(first, last),
            "invoice_prefix": f.hex(8).upper(),
            "invoice_settings": {
                "custom_fields": None,
                "default_payment_method": None,
                "footer": None,
                "rendering_options": None,
            },
            "livemode": False,
            "metadata": {"user_id": str(f.numeric_id())},
            "name": f"{first} {last}",
            "next_invoice_sequence": 1,
            "phone": None,
            "preferred_locales": [],
            "shipping": None,
            "tax_exempt": "none",
            "test_clock": None,
        }
    else:
        intent = f.prefixed("pi")
        body = {
            "id": intent,
            "object": "payment_intent",
            "amount": amount,
            "amount_capturable": 0,
            "amount_details": {"tip": {}},
            "amount_received": amount if kind == "charge" else 0,
            "application": None,
            "application_fee_amount": None,
            "automatic_payment_methods": {"allow_redirects": "always", "enabled": True},
            "canceled_at": None,
            "cancellation_reason": None,
            "capture_method": "automatic",
            "client_secret": f"{intent}_secret_{f.base62(25)}",
            "confirmation_method": "automatic",
            "created": int(f.when),
            "currency": currency,
            "customer": customer,
            "description": f.pick((None, f"Order #{f.between(1000, 99999)}")),
            "invoice": None,
            "last_payment_error": None,
            "latest_charge": f.prefixed("ch") if kind == "charge" else None,
            "livemode": False,
            "metadata": {"order_id": str(h.id(f, "ord"))} if f.chance(0.5) else {},
            "next_action": None,
            "on_behalf_of": None,
            "payment_method": f.prefixed("pm") if kind == "charge" else None,
            "payment_method_configuration_details": None,
            "payment_method_options": {
                "card": {
                    "installments": None,
                    "mandate_options": None,
                    "network": None,
                    "request_three_d_secure": "automatic",
                }
            },
            "payment_method_types": ["card"],
            "processing": None,
            "receipt_email": None,
            "review": None,
            "setup_future_usage": None,
            "shipping": None,
            "source": None,
            "statement_descriptor": None,
            "statement_descriptor_suffix": None,
            "status": "succeeded"
            if kind == "charge"
            else f.pick(("requires_payment_method", "requires_confirmation", "requires_action")),
            "transfer_data": None,
            "transfer_group": None,
        }
    return Reply(200, h2.dump(body), headers=headers)


def adyen_payments(f: Fake, h: House) -> Reply:
    """An Adyen-like payments API: camelCase, pspReference, resultCode, amounts in minor units."""
    psp = f.chars("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", 16)
    headers = h.headers(f, 200, first=[("pspReference", psp)])
    currency, amount = f.currency(), f.minor_amount()
    reference = f"{f.pick(('order', 'ORD', 'checkout', 'txn'))}-{h.text_id(f)}"
    if f.chance(0.15):
        code = f.pick(
            (
                ("14_0417", "Invalid payment method data"),
                ("702", "Required field 'reference' is not provided."),
                ("167", "Original pspReference required for this operation"),
            )
        )
        body: dict[str, Any] = {
            "status": 422,
            "errorCode": code[0],
            "message": code[1],
            "errorType": "validation",
            "pspReference": psp,
        }
        return Reply(422, h.dump(body), headers=headers)
    result = f.weighted(
        (
            ("Authorised", 6),
            ("Refused", 1),
            ("RedirectShopper", 1),
            ("IdentifyShopper", 1),
            ("Pending", 0.5),
        )
    )
    body = {
        "additionalData": {
            "cvcResult": "1 Matches",
            "authCode": f.digits(6),
            "avsResult": "4 AVS not supported for this card type",
            "refusalReasonRaw": "AUTHORISED" if result == "Authorised" else "DECLINED",
            "cardSummary": f.digits(4),
            "paymentMethod": f.pick(("visa", "mc", "amex")),
            "networkTxReference": f.digits(15),
            "fundingSource": f.pick(("CREDIT", "DEBIT")),
        },
        "pspReference": psp,
        "resultCode": result,
        "amount": {"currency": currency, "value": amount},
        "merchantReference": reference,
        "paymentMethod": {"brand": f.pick(("visa", "mc", "amex")), "type": "scheme"},
    }
    if result == "Refused":
        body["refusalReason"] = f.pick(("Refused", "Not enough balance", "CVC Declined"))
        body["refusalReasonCode"] = f.pick(("2", "12", "24"))
    if result in ("RedirectShopper", "IdentifyShopper"):
        body["action"] = {
            "paymentMethodType": "scheme",
            "url": f"https://checkoutshopper-test.{h.brand}.com/checkoutshopper/threeDS/"
            f"redirect?MD={f.b64(60, url=True, pad=False)}",
            "method": "GET",
            "type": "redirect" if result == "RedirectShopper" else "threeDS2",
        }
    return Reply(200, h.dump(body), headers=headers)


def paypal_orders(f: Fake, h: House) -> Reply:
    """A PayPal-like orders API: upper-case statuses, HATEOAS links, decimal string amounts."""
    order = f.chars("0123456789ABCDEFGHJKLMNPRSTUVWXY", 17)
    debug = f.hex(13)
    api = h.url("/v2/checkout/orders/" + order)
    headers = h.headers(f, 201, first=[("Paypal-Debug-Id", debug)])
    if f.chance(0.15):
        issue = f.pick(("INSTRUMENT_DECLINED", "ORDER_ALREADY_CAPTURED", "PAYER_ACTION_REQUIRED"))
        body: dict[str, Any] = {
            "name": "UNPROCESSABLE_ENTITY",
            "details": [
                {
                    "issue": issue,
                    "description": "The instrument presented was either "
                    "declined by the processor or bank, or it can't be used for this payment.",
                }
            ],
            "message": "The requested action could not be performed, semantically incorrect, "
            "or failed business validation.",
            "debug_id": debug,
            "links": [
                {
                    "href": f"https://developer.{h.brand}.com/docs/api/orders/v2/#error-{issue}",
                    "rel": "information_link",
                    "method": "GET",
                }
            ],
        }
        return Reply(422, h.dump(body), headers=headers)
    currency = f.currency()
    value = f.decimal(f.minor_amount(), currency)
    captured = f.chance(0.4)
    body = {"id": order, "status": "COMPLETED" if captured else "PAYER_ACTION_REQUIRED"}
    if captured:
        body["payment_source"] = {
            "paypal": {
                "email_address": f.email(),
                "account_id": f.chars("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", 13),
                "account_status": "VERIFIED",
            }
        }
        body["purchase_units"] = [
            {
                "reference_id": "default",
                "payments": {
                    "captures": [
                        {
                            "id": f.chars("0123456789ABCDEFGHJKLMNPRSTUVWXY", 17),
                            "status": "COMPLETED",
                            "amount": {"currency_code": currency, "value": value},
                            "final_capture": True,
                            "create_time": Fake.iso(f.when),
                            "update_time": Fake.iso(f.when),
                        }
                    ]
                },
            }
        ]
    else:
        body["payment_source"] = {"paypal": {}}
    body["links"] = [
        {"href": api, "rel": "self", "method": "GET"},
        {
            "href": f"https://www.{h.brand}.com/checkoutnow?token={order}",
            "rel": "payer-action",
            "method": "GET",
        },
    ]
    return Reply(201, h.dump(body), headers=headers)


def checkout_orders(f: Fake, h: House) -> Reply:
    """An order or checkout API: line items, totals as strings, addresses."""
    order_id = h.id(f, "ord")
    if f.chance(0.12):
        sku = f.sku()
        body: dict[str, Any] = {
            "error": {
                "code": "out_of_stock",
                "message": f"Item {sku} is out of stock",
                "details": {"sku": sku, "requested": f.between(2, 9), "available": f.between(0, 1)},
            }
        }
        return Reply(409, h.dump(body), headers=h.headers(f, 409))
    currency = f.currency()
    items = []
    subtotal = 0
    for _ in range(f.weighted(((1, 4), (2, 3), (3, 2), (5, 1), (8, 0.5)))):
        price, quantity = f.minor_amount() % 20_000 + 100, f.weighted(((1, 5), (2, 2), (3, 1)))
        subtotal += price * quantity
        items.append(
            {
                "id": h.id(f, "li"),
                "sku": f.sku(),
                "title": f.product(),
                "quantity": quantity,
                "price": f.decimal(price, currency),
            }
        )
    tax = subtotal * f.pick((0, 7, 19, 20)) // 100
    shipping = f.pick((0, 499, 999))
    first, last = f.first(), f.last()
    order = {
        "id": order_id,
        "number": f"#{f.between(1000, 999999)}",
        "email": f.email(first, last),
        "created_at": h.ts(f.when),
        "currency": currency,
        "subtotal_price": f.decimal(subtotal, currency),
        "total_tax": f.decimal(tax, currency),
        "total_shipping": f.decimal(shipping, currency),
        "total_price": f.decimal(subtotal + tax + shipping, currency),
        "financial_status": f.pick(("pending", "authorized", "paid")),
        "fulfillment_status": None,
        "line_items": items,
        "shipping_address": {
            "first_name": first,
            "last_name": last,
            **f.address(("address1", "address2", "city", "province", "zip", "country_code")),
        },
    }
    wrapped = {"order": order} if h.extra.get("wrap") == "1" else order
    headers = h.headers(f, 201, first=[h.location(f"/orders/{order_id}")])
    return Reply(201, h.dump(wrapped), headers=headers)


def inventory(f: Fake, h: House) -> Reply:
    """Inventory: stock reservations and adjustments, camelCase, warehouses and SKUs."""
    warehouse = f"WH-{f.pick(('FRA', 'AMS', 'NYC', 'LAX', 'LON', 'WAW'))}-{f.between(1, 9):02d}"
    if f.chance(0.15):
        sku = f.sku()
        body: dict[str, Any] = {
            "error": "INSUFFICIENT_STOCK",
            "message": f"Not enough stock for {sku} in {warehouse}",
            "sku": sku,
            "requested": f.between(3, 50),
            "available": f.between(0, 2),
        }
        return Reply(409, h.dump(body), headers=h.headers(f, 409))
    if f.chance(0.5):
        reservation = h.text_id(f)
        items = [
            {
                "sku": f.sku(),
                "warehouseId": warehouse,
                "quantity": f.between(1, 5),
                "available": f.between(0, 500),
            }
            for _ in range(f.between(1, 4))
        ]
        body = {
            "reservationId": reservation,
            "status": "RESERVED",
            "expiresAt": h.ts(f.later(600, 1800)),
            "items": items,
        }
        return Reply(
            201,
            h.dump(body),
            headers=h.headers(f, 201, first=[h.location(f"/v1/reservations/{reservation}")]),
        )
    on_hand = f.between(0, 5000)
    committed = f.between(0, min(on_hand, 200))
    body = {
        "sku": f.sku(),
        "locationId": warehouse,
        "onHand": on_hand,
        "available": on_hand - committed,
        "committed": committed,
        "incoming": f.pick((0, 0, 50, 200)),
        "updatedAt": h.ts(f.when),
        "version": f.between(1, 900),
    }
    return Reply(200, h.dump(body), headers=h.headers(f, 200))


def shipping_labels(f: Fake, h: House) -> Reply:
    """Shipping label creation: carriers, tracking numbers, rates and label downloads."""
    carrier = f.pick(("ups", "fedex", "usps", "dhl_express", "stamps_com"))
    tracking = {
        "ups": "1Z" + f.chars("0123456789ABCDEFGHJKLMNPRSTUVWXYZ", 16),
        "fedex": f.digits(12),
        "usps": "9400" + f.digits(18),
        "dhl_express": f.digits(10),
    }.get(carrier, "9205" + f.digits(18))
    label = "se-" + f.digits(9)
    if f.chance(0.15):
        body: dict[str, Any] = {
            "request_id": f.uuid4(),
            "errors": [
                {
                    "error_source": "carrier",
                    "error_type": "validation",
                    "error_code": "invalid_address",
                    "message": "Invalid ship_to address: postal code does not match city",
                }
            ],
        }
        return Reply(400, h.dump(body), headers=h.headers(f, 400))
    currency = f.pick(("usd", "usd", "eur", "gbp"))
    downloads = h.url(
        f"/v1/downloads/{f.between(1, 20)}/{f.b64(18, url=True, pad=False)}/label-{label[3:]}"
    )
    body = {
        "label_id": label,
        "status": "completed",
        "shipment_id": "se-" + f.digits(9),
        "ship_date": Fake.day(f.when) + "T00:00:00Z",
        "created_at": Fake.iso(f.when, "us"),
        "shipment_cost": {"currency": currency, "amount": round(f.rng.uniform(4, 90), 2)},
        "insurance_cost": {"currency": currency, "amount": 0.0},
        "tracking_number": tracking,
        "is_return_label": False,
        "rma_number": None,
        "is_international": f.chance(0.2),
        "batch_id": "",
        "carrier_id": "se-" + f.digits(6),
        "service_code": f.pick(
            ("ups_ground", "fedex_2day", "usps_priority_mail", "express_worldwide")
        ),
        "package_code": "package",
        "voided": False,
        "voided_at": None,
        "label_format": "pdf",
        "display_scheme": "label",
        "label_layout": "4x6",
        "trackable": True,
        "label_image_id": None,
        "carrier_code": carrier,
        "tracking_status": "in_transit",
        "label_download": {
            "pdf": downloads + ".pdf",
            "png": downloads + ".png",
            "zpl": downloads + ".zpl",
            "href": downloads + ".pdf",
        },
        "form_download": None,
        "insurance_claim": None,
        "packages": [
            {
                "package_code": "package",
                "weight": {"value": round(f.rng.uniform(0.1, 30), 1), "unit": "pound"},
                "dimensions": {
                    "unit": "inch",
                    "length": f.between(4, 30),
                    "width": f.between(4, 20),
                    "height": f.between(1, 16),
                },
                "insured_value": {"currency": currency, "amount": 0.0},
                "tracking_number": tracking,
                "label_messages": {"reference1": None, "reference2": None, "reference3": None},
                "external_package_id": None,
            }
        ],
        "charge_event": "carrier_default",
    }
    return Reply(200, h.dump(body), headers=h.headers(f, 200))


def subscriptions(f: Fake, h: House) -> Reply:
    """Subscription billing: plans, billing periods, terms in Unix seconds, MRR."""
    customer = h.id(f, "cus")
    plan = f.pick(("pro-monthly", "basic-yearly", "team-monthly", "enterprise-annual", "starter"))
    if f.chance(0.12):
        body: dict[str, Any] = {
            "message": f"The plan_id '{plan}' is not active.",
            "type": "invalid_request",
            "api_error_code": "resource_not_found",
            "param": "plan_id",
            "error_code": "referenced_resource_not_found",
            "error_msg": f"{plan} not found",
            "http_status_code": 404,
        }
        return Reply(404, h.dump(body), headers=h.headers(f, 404))
    start = int(f.when)
    period = 30 * 86_400 if "month" in plan else 365 * 86_400
    price = f.pick((900, 1900, 4900, 9900, 29900))
    currency = f.currency()
    subscription = {
        "id": h.id(f, "sub"),
        "plan_id": plan,
        "plan_quantity": f.weighted(((1, 5), (5, 1))),
        "plan_unit_price": price,
        "billing_period": 1,
        "billing_period_unit": "month" if "month" in plan else "year",
        "customer_id": customer,
        "status": f.pick(("active", "in_trial", "future")),
        "current_term_start": start,
        "current_term_end": start + period,
        "next_billing_at": start + period,
        "created_at": start,
        "started_at": start,
        "activated_at": start,
        "updated_at": start,
        "has_scheduled_changes": False,
        "channel": "web",
        "resource_version": int(f.when * 1000),
        "deleted": False,
        "object": "subscription",
        "currency_code": currency,
        "due_invoices_count": 0,
        "mrr": price,
    }
    invoice = {
        "id": str(f.between(1000, 99999)),
        "customer_id": customer,
        "recurring": True,
        "status": "paid",
        "price_type": "tax_exclusive",
        "date": start,
        "due_date": start,
        "net_term_days": 0,
        "total": price,
        "amount_paid": price,
        "amount_due": 0,
        "currency_code": currency,
        "object": "invoice",
    }
    body = {"subscription": subscription, "invoice": invoice} if f.chance(0.6) else subscription
    return Reply(200, h.dump(body), headers=h.headers(f, 200))


def bank_transfers(f: Fake, h: House) -> Reply:
    """Payment orders of a banking API: IBAN/BIC or routing numbers, effective dates."""
    transfer = h.text_id(f)
    currency = f.pick(("EUR", "EUR", "USD", "GBP"))
    if f.chance(0.15):
        body: dict[str, Any] = {
            "errors": {
                "code": "parameter_invalid",
                "message": "Receiving account is not verified",
                "parameter": "receiving_account_id",
            }
        }
        return Reply(422, h.dump(body), headers=h.headers(f, 422))
    if currency == "EUR":
        account: dict[str, Any] = {
            "iban": f.pick(("DE", "FR", "NL", "ES", "IT")) + f.digits(2) + f.digits(18),
            "bic": f.chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 6) + "XX" + f.pick(("", "XXX")),
        }
    else:
        account = {"account_number": f.digits(10), "routing_number": f.digits(9)}
    body = {
        "id": transfer,
        "object": "payment_order",
        "type": f.pick(("sepa", "ach", "wire", "rtp")),
        "amount": f.minor_amount(),
        "direction": f.pick(("credit", "debit")),
        "currency": currency,
        "status": f.pick(("pending", "approved", "processing")),
        "originating_account_id": f.uuid4(),
        "receiving_account": {"name": f"{f.first()} {f.last()}", **account},
        "reference": f"INV-{f.between(10000, 999999)}",
        "statement_descriptor": h.brand.upper()[:10],
        "effective_date": Fake.day(f.later(0, 3 * 86400)),
        "priority": "normal",
        "metadata": {},
        "created_at": h.ts(f.when),
        "updated_at": h.ts(f.when),
    }
    return Reply(
        201,
        h.dump(body),
        headers=h.headers(f, 201, first=[h.location(f"/api/payment_orders/{transfer}")]),
    )


def wallet_transfers(f: Fake, h: House) -> Reply:
    """A wallet or crypto API: decimal strings, assets, networks, transaction hashes."""
    asset, network = f.pick(
        (
            ("BTC", "bitcoin"),
            ("ETH", "ethereum"),
            ("USDC", "polygon"),
            ("SOL", "solana"),
            ("USDT", "tron"),
        )
    )
    if f.chance(0.15):
        body: dict[str, Any] = {
            "code": 40001,
            "msg": "insufficient balance",
            "data": None,
            "success": False,
        }
        return Reply(400, h.dump(body), headers=h.headers(f, 400))
    transfer = {
        "id": h.text_id(f),
        "from_wallet": h.text_id(f),
        "to_address": "0x" + f.hex(40),
        "amount": f"{f.rng.uniform(0.0001, 3):.8f}".rstrip("0"),
        "asset": asset,
        "network": network,
        "fee": f"{f.rng.uniform(0.00001, 0.002):.8f}".rstrip("0"),
        "status": f.pick(("pending", "submitted", "broadcast")),
        "tx_hash": None if f.chance(0.5) else "0x" + f.hex(64),
        "confirmations": 0,
        "created_at": h.ts(f.when),
    }
    body = {"data": transfer, "success": True} if h.extra.get("wrap") == "1" else transfer
    return Reply(201, h.dump(body), headers=h.headers(f, 201))


def bookings(f: Fake, h: House) -> Reply:
    """A travel booking API: confirmation codes, stays, guests, rates and policies."""
    code = f.chars("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", 6)
    if f.chance(0.15):
        body: dict[str, Any] = {
            "errors": [
                {
                    "code": "ROOM_UNAVAILABLE",
                    "title": "Room not available",
                    "detail": "The selected room type is "
                    "no longer available for the requested dates",
                    "status": 409,
                }
            ]
        }
        return Reply(409, h.dump(body), headers=h.headers(f, 409))
    check_in = f.later(86_400, 90 * 86_400)
    nights = f.between(1, 7)
    currency = f.currency()
    rate = f.between(60, 450) * 100
    guests = [{"firstName": f.first(), "lastName": f.last()} for _ in range(f.between(1, 3))]
    guests[0]["email"] = f.email(guests[0]["firstName"], guests[0]["lastName"])
    body = {
        "bookingId": h.text_id(f),
        "confirmationNumber": code,
        "status": "CONFIRMED",
        "hotel": {
            "id": str(f.between(10000, 999999)),
            "name": f"{f.brand().capitalize()} "
            f"{f.pick(('Hotel', 'Suites', 'Inn', 'Resort'))} {f.address()['city']}",
            "chainCode": f.chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 2),
        },
        "checkInDate": Fake.day(check_in),
        "checkOutDate": Fake.day(check_in + nights * 86_400),
        "room": {
            "type": f.pick(("DELUXE_KING", "STANDARD_TWIN", "SUITE", "SUPERIOR_QUEEN")),
            "rate": {
                "amount": f.decimal(rate, currency),
                "currency": currency,
                "total": f.decimal(rate * nights, currency),
            },
        },
        "guests": guests,
        "cancellationPolicy": {
            "deadline": Fake.iso(check_in - 86_400),
            "amount": f.decimal(rate, currency),
            "description": "Free cancellation until 24 hours before arrival",
        },
        "createdAt": h.ts(f.when),
    }
    return Reply(
        201,
        h.dump(body),
        headers=h.headers(f, 201, first=[h.location(f"/v1/bookings/{body['bookingId']}")]),
    )
