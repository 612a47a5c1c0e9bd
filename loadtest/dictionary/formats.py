"""Styles of formats and conventions more than of domains: JSON:API, HAL, GraphQL, OData,
JSON-RPC, SOAP and XML, form-encoded answers, problem+json, validation errors as each
framework writes them, 204 and 202 answers, and the error pages and texts of proxies."""

from __future__ import annotations

from typing import Any

from .fakes import Fake
from .house import House, Reply, reason


def jsonapi(f: Fake, h: House) -> Reply:
    """JSON:API: data with type, id, attributes, relationships and links."""
    media = "application/vnd.api+json"
    if f.chance(0.15):
        field = f.pick(("title", "email", "quantity", "starts-at"))
        body: dict[str, Any] = {
            "errors": [
                {
                    "status": "422",
                    "source": {"pointer": f"/data/attributes/{field}"},
                    "title": "Invalid Attribute",
                    "detail": f"{field} {f.pick(('must not be blank', 'is invalid'))}",
                }
            ],
            "jsonapi": {"version": "1.0"},
        }
        return Reply(422, h.dump(body), media, h.headers(f, 422))
    kind = f.pick(("articles", "orders", "tickets", "projects", "invoices"))
    ident = str(h.id(f, kind[:3]))
    author = str(f.numeric_id(1, 99_999))
    self_url = h.url(f"/{kind}/{ident}")
    attributes: dict[str, Any] = {
        "title": f.sentence(f.between(2, 6)),
        "status": f.pick(("draft", "open", "pending")),
        "created-at": h.ts(f.when),
        "updated-at": h.ts(f.when),
    }
    if kind in ("orders", "invoices"):
        currency = f.currency()
        attributes["total"] = f.decimal(f.minor_amount(), currency)
        attributes["currency"] = currency
    body = {
        "data": {
            "type": kind,
            "id": ident,
            "attributes": attributes,
            "relationships": {
                "author": {
                    "links": {
                        "self": f"{self_url}/relationships/author",
                        "related": f"{self_url}/author",
                    },
                    "data": {"type": "people", "id": author},
                }
            },
            "links": {"self": self_url},
        },
        "jsonapi": {"version": "1.0"},
    }
    if f.chance(0.4):
        body["included"] = [
            {
                "type": "people",
                "id": author,
                "attributes": {"first-name": f.first(), "last-name": f.last()},
                "links": {"self": h.url(f"/people/{author}")},
            }
        ]
    headers = h.headers(f, 201, first=[h.location(f"/{kind}/{ident}")])
    return Reply(201, h.dump(body), media, headers)


def hal(f: Fake, h: House) -> Reply:
    """HAL: _links and _embedded, as Spring HATEOAS writes them."""
    media = "application/hal+json"
    kind = f.pick(("orders", "customers", "payments", "shipments"))
    ident = h.id(f, kind[:3])
    base = h.url("") if h.extra.get("absolute") == "1" else ""
    if f.chance(0.15):
        body: dict[str, Any] = {
            "message": f"{kind[:-1].capitalize()} {ident} cannot be modified in its state",
            "_links": {"self": {"href": f"{base}/{kind}/{ident}"}},
        }
        return Reply(409, h.dump(body), media, h.headers(f, 409))
    currency = f.currency()
    body = {
        "status": f.pick(("processing", "created", "pending")),
        "currency": currency,
        "total": round(f.minor_amount() / 100, 2),
        "createdAt": h.ts(f.when),
        "_links": {
            "self": {"href": f"{base}/{kind}/{ident}"},
            "curies": [{"name": "ea", "href": f"{base}/docs/rels/{{rel}}", "templated": True}],
            "ea:customer": {"href": f"{base}/customers/{f.numeric_id()}"},
            "ea:items": {"href": f"{base}/{kind}/{ident}/items"},
        },
    }
    if f.chance(0.5):
        body["_embedded"] = {
            "ea:item": [
                {
                    "_links": {"self": {"href": f"{base}/products/{f.numeric_id()}"}},
                    "sku": f.sku(),
                    "quantity": f.between(1, 4),
                    "price": round(f.minor_amount() / 100, 2),
                }
                for _ in range(f.between(1, 3))
            ]
        }
    headers = h.headers(f, 201, first=[h.location(f"/{kind}/{ident}")])
    return Reply(201, h.dump(body), media, headers)


def graphql(f: Fake, h: House) -> Reply:
    """GraphQL over POST: data with a mutation's payload, or errors, always 200."""
    media = f.pick(("application/json", "application/graphql-response+json"))
    if f.chance(0.2):
        field = f.pick(("createOrder", "createUser", "updateCart", "checkoutComplete"))
        body: dict[str, Any] = {
            "errors": [
                {
                    "message": f'Variable "$input" got invalid value; Field "{f.word()}" '
                    'of required type "String!" was not provided.',
                    "locations": [{"line": 1, "column": f.between(10, 40)}],
                    "path": [field],
                    "extensions": {"code": f.pick(("BAD_USER_INPUT", "GRAPHQL_VALIDATION_FAILED"))},
                }
            ],
            "data": None,
        }
        return Reply(200, h.dump(body), media, h.headers(f, 200))
    ident = f"gid://{h.brand}/Order/{f.numeric_id()}"
    currency = f.currency()
    body = {
        "data": {
            "orderCreate": {
                "order": {
                    "id": ident,
                    "name": f"#{f.between(1000, 99999)}",
                    "createdAt": Fake.iso(f.when),
                    "displayFinancialStatus": "PENDING",
                    "totalPriceSet": {
                        "shopMoney": {
                            "amount": f.decimal(f.minor_amount(), currency),
                            "currencyCode": currency,
                        }
                    },
                },
                "userErrors": [],
            }
        },
    }
    if f.chance(0.5):
        available = f.between(900, 1000)
        body["extensions"] = {
            "cost": {
                "requestedQueryCost": 10,
                "actualQueryCost": 10,
                "throttleStatus": {
                    "maximumAvailable": 1000.0,
                    "currentlyAvailable": available,
                    "restoreRate": 50.0,
                },
            }
        }
    return Reply(200, h.dump(body), media, h.headers(f, 200))


SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"


def soap(f: Fake, h: House) -> Reply:
    """SOAP 1.1 and 1.2 envelopes (and a fault), and plain XML answers of query APIs."""
    version = f.pick(("1.1", "1.2", "xml"))
    ns = f"http://{h.brand}.com/services/{f.word()}/v{f.between(1, 4)}"
    if version == "xml":
        request = f.uuid4()
        instance = "i-0" + f.hex(16)
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<RunInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">\n'
            f"    <requestId>{request}</requestId>\n"
            f"    <reservationId>r-0{f.hex(16)}</reservationId>\n"
            f"    <ownerId>{f.digits(12)}</ownerId>\n"
            "    <instancesSet>\n        <item>\n"
            f"            <instanceId>{instance}</instanceId>\n"
            f"            <imageId>ami-0{f.hex(16)}</imageId>\n"
            "            <instanceState>\n                <code>0</code>\n"
            "                <name>pending</name>\n            </instanceState>\n"
            f"            <instanceType>{f.pick(('t3.micro', 'm5.large', 'c6g.xlarge'))}"
            "</instanceType>\n"
            f"            <launchTime>{Fake.iso(f.when, 'ms')}</launchTime>\n"
            "        </item>\n    </instancesSet>\n</RunInstancesResponse>"
        )
        return Reply(200, body.encode(), "text/xml;charset=UTF-8", h.headers(f, 200))
    envelope = SOAP11 if version == "1.1" else SOAP12
    media = "text/xml; charset=utf-8" if version == "1.1" else "application/soap+xml; charset=utf-8"
    head = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f'<soap:Envelope xmlns:soap="{envelope}" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        'xmlns:xsd="http://www.w3.org/2001/XMLSchema"><soap:Body>'
    )
    if f.chance(0.2):
        fault = (
            "<soap:Fault><faultcode>soap:Client</faultcode><faultstring>Server was unable "
            f"to read request. ---&gt; Invalid value for {f.word()}</faultstring>"
            "<detail /></soap:Fault>"
        )
        return Reply(500, (head + fault + "</soap:Body></soap:Envelope>").encode(), media)
    operation = f.pick(("CreateShipment", "SubmitOrder", "CreateCustomer", "AuthorizePayment"))
    body = (
        f'{head}<{operation}Response xmlns="{ns}"><{operation}Result>'
        f"<Success>true</Success><Id>{h.text_id(f)}</Id>"
        f"<Reference>{f.chars('ABCDEFGHJKLMNPQRSTUVWXYZ0123456789', 10)}</Reference>"
        f"<Status>{f.pick(('Accepted', 'Created', 'Pending'))}</Status>"
        f"<Timestamp>{Fake.iso(f.when, 'net+')}</Timestamp>"
        f"</{operation}Result></{operation}Response></soap:Body></soap:Envelope>"
    )
    return Reply(200, body.encode(), media, h.headers(f, 200))


def odata(f: Fake, h: House) -> Reply:
    """OData v4, as Microsoft Graph-like services write it: @odata.context and its headers."""
    media = (
        "application/json;odata.metadata=minimal;odata.streaming=true;"
        "IEEE754Compatible=false;charset=utf-8"
    )
    request = f.uuid4()
    headers = [
        ("Cache-Control", "no-cache"),
        ("OData-Version", "4.0"),
        ("request-id", request),
        ("client-request-id", request),
        (
            "x-ms-ags-diagnostic",
            '{"ServerInfo":{"DataCenter":"'
            + f.pick(("West Europe", "North Europe", "East US", "West US 2"))
            + '","Slice":"E","Ring":"'
            + str(f.between(1, 6))
            + '","ScaleUnit":"00'
            + str(f.between(1, 9))
            + '","RoleInstance":"'
            + f.chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 2)
            + "PEPF0000"
            + f.hex(4).upper()
            + '"}}',
        ),
        ("Strict-Transport-Security", "max-age=31536000"),
    ]
    if f.chance(0.15):
        body: dict[str, Any] = {
            "error": {
                "code": "Request_BadRequest",
                "message": "Another object with the same value for property userPrincipalName "
                "already exists.",
                "innerError": {
                    "date": Fake.iso(f.when),
                    "request-id": request,
                    "client-request-id": request,
                },
            }
        }
        return Reply(400, h.dump(body), "application/json", headers)
    user = f.uuid4()
    first, last = f.first(), f.last()
    domain = f"{h.brand}.onmicrosoft.com"
    body = {
        "@odata.context": h.url("/v1.0/$metadata#users/$entity"),
        "id": user,
        "businessPhones": [],
        "displayName": f"{first} {last}",
        "givenName": first,
        "jobTitle": f.pick((None, "Engineer", "Sales Manager", "Analyst")),
        "mail": None,
        "mobilePhone": None,
        "officeLocation": None,
        "preferredLanguage": None,
        "surname": last,
        "userPrincipalName": f"{first.lower()}.{last.lower()}@{domain}",
    }
    headers.insert(
        0,
        (
            "Location",
            h.url(f"/v2/{f.uuid4()}/directoryObjects/{user}/Microsoft.DirectoryServices.User"),
        ),
    )
    return Reply(201, h.dump(body), media, headers)


def jsonrpc(f: Fake, h: House) -> Reply:
    """JSON-RPC 2.0: result or error, matched to the call's id."""
    call = f.pick((f.between(1, 9999), f.uuid4(), f.nanoid(8)))
    if f.chance(0.2):
        code, message = f.pick(
            (
                (-32602, "Invalid params"),
                (-32000, "execution reverted"),
                (-32601, "Method not found"),
                (-32603, "Internal error"),
            )
        )
        body: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": call,
            "error": {"code": code, "message": message},
        }
        return Reply(200, h.dump(body), headers=h.headers(f, 200))
    result = f.pick(
        (
            "0x" + f.hex(64),
            {"txHash": "0x" + f.hex(64), "status": "pending"},
            {"id": f.numeric_id(), "state": "draft", "name": f"SO{f.between(1000, 99999)}"},
            True,
        )
    )
    return Reply(
        200, h.dump({"jsonrpc": "2.0", "id": call, "result": result}), headers=h.headers(f, 200)
    )


def nvp_form(f: Fake, h: House) -> Reply:
    """Name-value-pair answers of older payment gateways, form-encoded."""
    stamp = Fake.iso(f.when).replace("-", "%2d").replace(":", "%3a")
    ack = "Success" if f.chance(0.85) else "Failure"
    pairs = [
        ("TOKEN", "EC%2d" + f.chars("0123456789ABCDEFGHJKLMNPRSTUVWXY", 17)),
        ("TIMESTAMP", stamp),
        ("CORRELATIONID", f.hex(13)),
        ("ACK", ack),
        ("VERSION", f.pick(("204", "124", "98"))),
        ("BUILD", str(f.between(10_000_000, 59_999_999))),
    ]
    if ack == "Failure":
        pairs += [
            ("L_ERRORCODE0", str(f.pick((10002, 10527, 10004)))),
            ("L_SHORTMESSAGE0", "Invalid%20Data"),
            ("L_LONGMESSAGE0", "This%20transaction%20cannot%20be%20processed%2e"),
            ("L_SEVERITYCODE0", "Error"),
        ]
    else:
        currency = f.currency()
        pairs += [
            ("TRANSACTIONID", f.chars("0123456789ABCDEFGHJKLMNPRSTUVWXY", 17)),
            ("AMT", f.decimal(f.minor_amount(), currency).replace(".", "%2e")),
            ("CURRENCYCODE", currency),
        ]
    body = "&".join(f"{k}={v}" for k, v in pairs)
    return Reply(200, body.encode(), "text/plain; charset=utf-8", h.headers(f, 200))


def problem_json(f: Fake, h: House) -> Reply:
    """RFC 9457 problem details, from hand-written ones to ASP.NET's and Spring's."""
    media = "application/problem+json"
    kind = f.pick(("rfc", "aspnet", "spring", "zalando"))
    status = f.weighted(
        ((400, 3), (401, 1), (403, 1), (404, 2), (409, 2), (410, 0.3), (422, 2), (429, 1))
    )
    title = reason(status)
    path = f"/{f.pick(('v1', 'api', 'api/v2'))}/{f.pick(('orders', 'payments', 'accounts'))}"
    if kind == "aspnet":
        field = f.pick(("Email", "Amount", "Currency", "CustomerId"))
        body: dict[str, Any] = {
            "type": "https://tools.ietf.org/html/rfc9110#section-15.5.1",
            "title": "One or more validation errors occurred.",
            "status": 400,
            "errors": {field: [f"The {field} field is required."]},
            "traceId": f.traceparent()[:-2] + "00",
        }
        status = 400
    elif kind == "spring":
        body = {
            "type": "about:blank",
            "title": title,
            "status": status,
            "detail": f.pick(("Invalid request content.", "Failed to read request", None)),
            "instance": path,
        }
    elif kind == "zalando":
        body = {"title": title, "status": status, "detail": f.sentence(f.between(4, 12))}
    else:
        body = {
            "type": h.url(f"/problems/{title.lower().replace(' ', '-')}"),
            "title": title,
            "status": status,
            "detail": f.sentence(f.between(4, 14)),
            "instance": f"{path}/{h.text_id(f)}",
        }
        if status == 403:
            body["balance"] = f.between(0, 40)
    headers = h.headers(f, status)
    if status == 429:
        headers.append(("Retry-After", str(f.pick((1, 5, 30, 60)))))
    return Reply(status, h.dump(body), media, headers)


def validation_errors(f: Fake, h: House) -> Reply:
    """A 400 or 422 with field errors, in the shape of the house's framework."""
    origin = h.stack.origin
    field = f.pick(("email", "password", "amount", "currency", "name", "phone", "address"))
    other = f.pick(("quantity", "sku", "country", "starts_at"))
    status = 422
    body: Any
    if origin == "rails":
        body = {
            "errors": {
                field: [f.pick(("has already been taken", "can't be blank"))],
                other: ["is invalid"],
            }
        }
    elif origin == "laravel":
        body = {
            "message": f"The {field} field is required. (and 1 more error)",
            "errors": {
                field: [f"The {field} field is required."],
                other: [f"The {other} field must be a string."],
            },
        }
    elif origin == "fastapi":
        body = {
            "detail": [
                {
                    "type": "missing",
                    "loc": ["body", field],
                    "msg": "Field required",
                    "input": {other: f.word()},
                    "url": "https://errors.pydantic.dev/2.6/v/missing",
                }
            ]
        }
    elif origin in ("django", "flask"):
        status = 400
        body = {field: ["This field is required."], other: ["A valid integer is required."]}
    elif origin in ("express", "node"):
        status = 400
        body = {
            "errors": [
                {
                    "type": "field",
                    "value": "",
                    "msg": "Invalid value",
                    "path": field,
                    "location": "body",
                }
            ]
        }
    elif origin == "fastify":
        status = 400
        body = {
            "statusCode": 400,
            "code": "FST_ERR_VALIDATION",
            "error": "Bad Request",
            "message": f"body must have required property '{field}'",
        }
    elif origin in ("spring", "jetty"):
        status = 400
        body = {
            "timestamp": Fake.iso(f.when, "ms+"),
            "status": 400,
            "error": "Bad Request",
            "path": f"/api/{f.pick(('orders', 'users', 'payments'))}",
        }
    elif origin == "go":
        status = 400
        body = {
            "error": f"Key: 'Request.{field.capitalize()}' Error:Field validation for "
            f"'{field.capitalize()}' failed on the 'required' tag"
        }
    else:
        status = 400
        body = {
            "message": ["email must be an email", f"{field} should not be empty"],
            "error": "Bad Request",
            "statusCode": 400,
        }
    return Reply(status, h.dump(body), headers=h.headers(f, status))


def no_content(f: Fake, h: House) -> Reply:
    """204 No Content after an update or a delete; now and then a 200 with nothing."""
    if f.chance(0.15):
        return Reply(200, b"", "application/json", h.headers(f, 200))
    etag = [("ETag", f.etag(f.hex(8).encode(), f.pick(("md5", "weak", "version"))))]
    return Reply(204, b"", None, h.headers(f, 204, first=etag if f.chance(0.3) else []))


def accepted(f: Fake, h: House) -> Reply:
    """202 Accepted: a job or operation to poll, with Location and Retry-After."""
    job = h.text_id(f)
    path = f"/v1/{f.pick(('operations', 'jobs', 'exports', 'imports', 'tasks'))}/{job}"
    first = [h.location(path), ("Retry-After", str(f.pick((1, 2, 5, 10, 30))))]
    if f.chance(0.25):
        url = h.url(path) + "?api-version=" + f.pick(("2023-01-01", "2024-03-01-preview"))
        first += [("Operation-Location", url), ("Azure-AsyncOperation", url)]
    if f.chance(0.2):
        return Reply(202, b"", "application/json", h.headers(f, 202, first=first))
    body: dict[str, Any] = {
        "id": job,
        "status": f.pick(("pending", "queued", "accepted", "running", "NotStarted")),
        "statusUrl": h.url(path),
        "createdAt": h.ts(f.when),
    }
    if f.chance(0.5):
        body["_links"] = {"self": {"href": path}, "cancel": {"href": path + "/cancel"}}
    return Reply(202, h.dump(body), headers=h.headers(f, 202, first=first))


def _nginx_page(status: int, phrase: str, server: str | None) -> bytes:
    sign = f"<hr><center>{server}</center>\r\n" if server else ""
    return (
        f"<html>\r\n<head><title>{status} {phrase}</title></head>\r\n<body>\r\n"
        f"<center><h1>{status} {phrase}</h1></center>\r\n{sign}</body>\r\n</html>\r\n"
    ).encode()


def proxy_html_errors(f: Fake, h: House) -> Reply:
    """The HTML error pages of nginx, AWS ALB and Cloudflare, written by the proxy itself."""
    kind = f.weighted((("nginx", 3), ("alb", 2), ("cloudflare", 2)))
    if kind == "nginx":
        status = f.pick((502, 503, 504, 413, 500, 429))
        server = h.stack.versions.get("nginx", "nginx")
        page = _nginx_page(status, reason(status), server)
        return Reply(status, page, "text/html", [], "nginx", server)
    if kind == "alb":
        status = f.pick((502, 503, 504, 460, 463))
        page = _nginx_page(status, reason(status) or "", None)
        return Reply(status, page, "text/html", [], "alb")
    status, title, what = f.pick(
        (
            (502, "Bad gateway", "Bad gateway"),
            (520, "Web server is returning an unknown error", "Error code 520"),
            (521, "Web server is down", "Error code 521"),
            (522, "Connection timed out", "Error code 522"),
            (524, "A timeout occurred", "Error code 524"),
        )
    )
    zone = h.host.split(".", 1)[1]
    html = (
        '<!DOCTYPE html>\n<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> '
        '<![endif]-->\n<!--[if IE 7]>    <html class="no-js ie7 oldie" lang="en-US"> '
        '<![endif]-->\n<!--[if IE 8]>    <html class="no-js ie8 oldie" lang="en-US"> '
        '<![endif]-->\n<!--[if gt IE 8]><!--> <html class="no-js" lang="en-US"> <!--<![endif]-->'
        f"\n<head>\n<title>{zone} | {status}: {title}</title>\n"
        '<meta charset="UTF-8" />\n<meta http-equiv="Content-Type" content="text/html; '
        'charset=UTF-8" />\n<meta http-equiv="X-UA-Compatible" content="IE=Edge" />\n'
        '<meta name="robots" content="noindex, nofollow" />\n<meta name="viewport" '
        'content="width=device-width,initial-scale=1" />\n<link rel="stylesheet" '
        'id="cf_styles-css" href="/cdn-cgi/styles/main.css" />\n</head>\n<body>\n'
        '<div id="cf-wrapper">\n    <div id="cf-error-details" class="p-0">\n'
        '        <header class="mx-auto pt-10 lg:pt-6 lg:px-8 w-240 lg:w-full mb-8">\n'
        f'            <h1 class="inline-block sm:block sm:mb-2 font-light text-60 '
        f'lg:text-4xl text-black-dark leading-tight mr-2">\n              <span '
        f'class="inline-block">{title}</span>\n              <span class="code-label">'
        f"{what}</span>\n            </h1>\n            <div>\n               Visit "
        '<a href="https://www.cloudflare.com/5xx-error-landing?utm_source=errorcode_'
        f'{status}&utm_campaign={zone}" target="_blank" rel="noopener noreferrer">'
        "cloudflare.com</a> for more information.\n            </div>\n"
        f'            <div class="mt-3">{Fake.iso(f.when).replace("T", " ").replace("Z", "")}'
        " UTC</div>\n        </header>\n    </div>\n"
        '    <div class="cf-error-footer cf-wrapper w-240 lg:w-full py-10 sm:py-4 sm:px-8 '
        'mx-auto text-center sm:text-left border-solid border-0 border-t border-gray-300">\n'
        '    <p class="text-13">\n      <span class="cf-footer-item sm:block sm:mb-1">'
        f'Cloudflare Ray ID: <strong class="font-semibold">{f.hex(16)}</strong></span>\n'
        '      <span class="cf-footer-separator sm:hidden">&bull;</span>\n'
        '      <span id="cf-footer-item-ip" class="cf-footer-item hidden sm:block sm:mb-1">'
        f"Your IP: {f.ipv4()}</span>\n    </p>\n  </div>\n</div>\n</body>\n</html>\n"
    )
    return Reply(status, html.encode(), "text/html", [], "cloudflare")


def platform_html_errors(f: Fake, h: House) -> Reply:
    """Error pages of platforms: Heroku, Google's front end, Tomcat, IIS, Akamai, Varnish."""
    kind = f.pick(("heroku", "gfe", "tomcat", "iis", "akamai", "varnish"))
    if kind == "heroku":
        page = (
            '<!DOCTYPE html>\n\t<html>\n\t  <head>\n\t\t<meta name="viewport" '
            'content="width=device-width, initial-scale=1">\n\t\t<meta charset="utf-8">\n'
            '\t\t<title>Application Error</title>\n\t\t<style media="screen">\n'
            "\t\t  html,body,iframe {\n\t\t\tmargin: 0;\n\t\t\tpadding: 0;\n\t\t  }\n"
            "\t\t  html,body {\n\t\t\theight: 100%;\n\t\t\toverflow: hidden;\n\t\t  }\n"
            "\t\t  iframe {\n\t\t\twidth: 100%;\n\t\t\theight: 100%;\n\t\t\tborder: 0;\n\t\t  }\n"
            '\t\t</style>\n\t  </head>\n\t  <body>\n\t\t<iframe src="//www.herokucdn.com/'
            'error-pages/application-error.html"></iframe>\n\t  </body>\n\t</html>'
        )
        return Reply(503, page.encode(), "text/html", [], "heroku")
    if kind == "gfe":
        status = f.pick((502, 500, 503))
        page = (
            "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n  <meta name=viewport "
            'content="initial-scale=1, minimum-scale=1, width=device-width">\n  <title>Error '
            f"{status} (Server Error)!!1</title>\n  <style>\n    *{{margin:0;padding:0}}html,"
            "code{font:15px/22px arial,sans-serif}html{background:#fff;color:#222;padding:15px}"
            "body{margin:7% auto 0;max-width:390px;min-height:180px;padding:30px 0 15px}* > "
            "body{padding-right:205px}p{margin:11px 0 22px;overflow:hidden}ins{color:#777;"
            "text-decoration:none}\n  </style>\n  <p><b>"
            f"{status}.</b> <ins>That\u2019s an error.</ins>\n  <p>The server encountered a "
            "temporary error and could not complete your request.<p>Please try again in 30 "
            "seconds.  <ins>That\u2019s all we know.</ins>\n"
        ).replace("\u2019", "&#8217;")
        return Reply(status, page.encode(), "text/html", [], "gfe")
    if kind == "tomcat":
        status = f.pick((500, 404, 405, 400))
        phrase = reason(status)
        page = (
            f'<!doctype html><html lang="en"><head><title>HTTP Status {status} \u2013 {phrase}'
            '</title><style type="text/css">body {font-family:Tahoma,Arial,sans-serif;} h1, h2, '
            "h3, b {color:white;background-color:#525D76;} h1 {font-size:22px;} h2 "
            "{font-size:16px;} h3 {font-size:14px;} p {font-size:12px;} a {color:black;} .line "
            "{height:1px;background-color:#525D76;border:none;}</style></head><body><h1>"
            f'HTTP Status {status} \u2013 {phrase}</h1><hr class="line" /><h3>Apache Tomcat/'
            f"{f.pick(('9.0.83', '10.1.17', '8.5.96'))}</h3></body></html>"
        )
        return Reply(
            status,
            page.encode("utf-8"),
            "text/html;charset=utf-8",
            [("Content-Language", "en")],
            "tomcat",
        )
    if kind == "iis":
        page = (
            '<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01//EN""http://www.w3.org/TR/html4/'
            'strict.dtd">\r\n<HTML><HEAD><TITLE>Service Unavailable</TITLE>\r\n<META '
            'HTTP-EQUIV="Content-Type" Content="text/html; charset=us-ascii"></HEAD>\r\n<BODY>'
            "<h2>Service Unavailable</h2>\r\n<hr><p>HTTP Error 503. The service is unavailable."
            "</p>\r\n</BODY></HTML>\r\n"
        )
        return Reply(503, page.encode(), "text/html; charset=us-ascii", [], "iis")
    if kind == "akamai":
        host = h.host.replace(".", "&#46;")
        ref = f"18&#46;{f.hex(8)}&#46;{int(f.when)}&#46;{f.hex(8)}"
        page = (
            "<HTML><HEAD>\n<TITLE>Access Denied</TITLE>\n</HEAD><BODY>\n<H1>Access Denied</H1>"
            "\n \nYou don't have permission to access \"http&#58;&#47;&#47;"
            f'{host}&#47;v1&#47;{f.word()}" on this server.<P>\nReference&#32;&#35;{ref}\n'
            f"<P>https&#58;&#47;&#47;errors&#46;edgesuite&#46;net&#47;{ref}</P>\n</BODY>\n</HTML>\n"
        )
        return Reply(403, page.encode(), "text/html", [], "akamai")
    xid = f.digits(9)
    page = (
        '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 '
        'Strict//EN"\n "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n<html>\n  <head>'
        "\n    <title>503 Backend is unhealthy</title>\n  </head>\n  <body>\n    <h1>Error 503 "
        "Backend is unhealthy</h1>\n    <p>Backend is unhealthy</p>\n    <h3>Guru Mediation:"
        f"</h3>\n    <p>Details: cache-{f.pick(('fra', 'ams', 'iad'))}-{f.hex(4)}{f.digits(5)}-"
        f"{f.pick(('FRA', 'AMS', 'IAD'))} {int(f.when)} {xid}</p>\n    <hr>\n    <p>Varnish "
        "cache server</p>\n  </body>\n</html>\n"
    )
    return Reply(
        503,
        page.encode(),
        "text/html",
        [("X-Varnish", xid)],
        "varnish",
        reason="Backend is unhealthy",
    )


def plain_text(f: Fake, h: House) -> Reply:
    """Short text answers: Envoy's and API Gateway's own errors, frameworks' defaults."""
    kind = f.pick(
        (
            "envoy",
            "envoy_none",
            "envoy_timeout",
            "apigw",
            "go404",
            "text_ok",
            "throttled",
            "express404",
            "created",
        )
    )
    if kind == "envoy":
        body = "upstream connect error or disconnect/reset before headers. " + f.pick(
            (
                "reset reason: connection failure, transport failure reason: delayed "
                "connect error: 111",
                "reset reason: connection termination",
                "retried and the latest reset reason: remote connection failure, "
                "transport failure reason: delayed connect error: Connection refused",
            )
        )
        return Reply(503, body.encode(), "text/plain", [], "envoy")
    if kind == "envoy_none":
        return Reply(503, b"no healthy upstream", "text/plain", [], "envoy")
    if kind == "envoy_timeout":
        return Reply(504, b"upstream request timeout", "text/plain", [], "envoy")
    if kind == "apigw":
        status, message, kind_header = f.pick(
            (
                (500, "Internal server error", "InternalServerErrorException"),
                (504, "Endpoint request timed out", "InternalServerErrorException"),
                (429, "Too Many Requests", "ThrottlingException"),
                (403, "Forbidden", "ForbiddenException"),
            )
        )
        body2 = ('{"message":"' + message + '"}').encode()
        return Reply(
            status, body2, "application/json", [("x-amzn-ErrorType", kind_header)], "apigw"
        )
    if kind == "go404":
        return Reply(404, b"404 page not found\n", "text/plain; charset=utf-8", h.headers(f, 404))
    if kind == "text_ok":
        return Reply(
            200, f.pick((b"OK", b"ok", b"Accepted", b"success")), "text/plain", h.headers(f, 200)
        )
    if kind == "throttled":
        headers = h.headers(f, 429, last=[("Retry-After", str(f.pick((1, 10, 60))))])
        return Reply(429, b"Too Many Requests", "text/plain; charset=utf-8", headers)
    if kind == "express404":
        path = f"/{f.pick(('api', 'v1', 'v2'))}/{f.word()}s"
        page = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>Error</title>\n</head>\n<body>\n<pre>Cannot POST {path}</pre>\n"
            "</body>\n</html>\n"
        )
        return Reply(404, page.encode(), "text/html; charset=utf-8", h.headers(f, 404))
    return Reply(201, b"Created", "text/plain; charset=utf-8", h.headers(f, 201))
