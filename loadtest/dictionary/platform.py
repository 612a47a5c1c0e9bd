"""Styles of platforms: users and accounts, cloud resources (instances, volumes, DNS
records, Kubernetes objects), messaging, a GitHub-like REST API, AWS- and Google-style JSON
APIs, webhooks, uploads and event ingestion."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

from .fakes import AWS_REGIONS, Fake
from .house import House, Reply


def scim_users(f: Fake, h: House) -> Reply:
    """User provisioning over SCIM 2.0: schemas, meta, application/scim+json."""
    media = "application/scim+json"
    if f.chance(0.15):
        body: dict[str, Any] = {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"],
            "status": "409",
            "scimType": "uniqueness",
            "detail": "User with the same userName already exists",
        }
        return Reply(409, h.dump(body), media, h.headers(f, 409))
    user = f.uuid4()
    first, last = f.first(), f.last()
    email = f.email(first, last)
    path = f"/scim/v2/Users/{user}"
    body = {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "id": user,
        "externalId": str(f.numeric_id()),
        "userName": email,
        "name": {"givenName": first, "familyName": last, "formatted": f"{first} {last}"},
        "displayName": f"{first} {last}",
        "emails": [{"value": email, "type": "work", "primary": True}],
        "active": True,
        "groups": [],
        "meta": {
            "resourceType": "User",
            "created": Fake.iso(f.when, "ms"),
            "lastModified": Fake.iso(f.when, "ms"),
            "location": h.url(path),
            "version": f'W/"{f.hex(8)}"',
        },
    }
    headers = h.headers(f, 201, first=[h.location(path), ("ETag", body["meta"]["version"])])
    return Reply(201, h.dump(body), media, headers)


def _jwt(f: Fake, subject: str, when: float) -> str:
    header = {"alg": f.pick(("RS256", "HS256", "ES256")), "typ": "JWT"}
    if header["alg"] != "HS256":
        header["kid"] = f.b64(12, url=True, pad=False)
    claims = {"sub": subject, "iat": int(when), "exp": int(when) + 3600, "scope": "openid"}

    def part(obj: dict[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    signature = f.b64(48 if header["alg"] == "ES256" else 64, url=True, pad=False)
    return f"{part(header)}.{part(claims)}.{signature}"


def accounts(f: Fake, h: House) -> Reply:
    """Sign-up and token issue: a user object with a bearer token (a JWT) or a session."""
    if f.chance(0.15):
        body: dict[str, Any] = {
            "error": f.pick(("email_taken", "invalid_grant", "weak_password")),
            "error_description": f.pick(
                (
                    "An account with this email already exists.",
                    "Invalid username or password.",
                    "Password must be at least 12 characters long.",
                )
            ),
        }
        return Reply(f.pick((400, 401, 409)), h.dump(body), headers=h.headers(f, 400))
    user = h.id(f, "usr")
    first, last = f.first(), f.last()
    token = _jwt(f, str(user), f.when)
    if f.chance(0.4):
        body = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": 3600,
            "refresh_token": f.b64(32, url=True, pad=False),
            "scope": "openid profile email",
        }
        return Reply(200, h.dump(body), headers=h.headers(f, 200))
    body = {
        "user": {
            "id": user,
            "email": f.email(first, last),
            "name": f"{first} {last}",
            "role": f.pick(("member", "admin", "owner", "viewer")),
            "email_verified": False,
            "created_at": h.ts(f.when),
        },
        "token": token,
    }
    return Reply(201, h.dump(body), headers=h.headers(f, 201))


def cloud_instances(f: Fake, h: House) -> Reply:
    """A DigitalOcean-like API: a droplet created (202) with its size, image and actions."""
    region = f.pick(("nyc3", "ams3", "fra1", "sfo3", "lon1", "sgp1", "tor1", "blr1"))
    slug = f.pick(("s-1vcpu-1gb", "s-2vcpu-4gb", "s-4vcpu-8gb", "c-2", "g-2vcpu-8gb"))
    if f.chance(0.15):
        body: dict[str, Any] = {
            "id": "unprocessable_entity",
            "message": f"You specified an invalid size for Droplet creation: {slug}",
            "request_id": f.uuid4(),
        }
        return Reply(422, h.dump(body), headers=h.headers(f, 422))
    droplet = f.numeric_id(100_000_000, 499_999_999)
    action = f.numeric_id(1_000_000_000, 2_999_999_999)
    memory, vcpus = f.pick(((1024, 1), (4096, 2), (8192, 4), (2048, 1)))
    body = {
        "droplet": {
            "id": droplet,
            "name": f"{f.word()}-{f.between(1, 20):02d}",
            "memory": memory,
            "vcpus": vcpus,
            "disk": f.pick((25, 50, 80, 160)),
            "locked": False,
            "status": "new",
            "kernel": None,
            "created_at": Fake.iso(f.when),
            "features": f.some(("backups", "ipv6", "monitoring", "droplet_agent"), 0, 3),
            "backup_ids": [],
            "next_backup_window": None,
            "snapshot_ids": [],
            "image": {
                "id": f.numeric_id(100_000_000, 199_999_999),
                "name": f.pick(("22.04 (LTS) x64", "24.04 (LTS) x64", "12 x64")),
                "distribution": f.pick(("Ubuntu", "Debian")),
                "slug": f.pick(("ubuntu-22-04-x64", "ubuntu-24-04-x64", "debian-12-x64")),
                "public": True,
                "regions": [region],
                "created_at": Fake.iso(f.earlier(1e7, 5e7)),
                "type": "base",
                "min_disk_size": 7,
                "size_gigabytes": 2.36,
                "status": "available",
            },
            "volume_ids": [],
            "size_slug": slug,
            "networks": {"v4": [], "v6": []},
            "region": {"name": region.upper(), "slug": region, "available": True},
            "tags": f.some(("web", "prod", "staging", "worker", "db"), 0, 2),
            "vpc_uuid": f.uuid4(),
        },
        "links": {
            "actions": [
                {"id": action, "rel": "create", "href": h.url(f"/v2/actions/{action}")},
            ]
        },
    }
    return Reply(202, h.dump(body), headers=h.headers(f, 202))


def cloud_volumes(f: Fake, h: House) -> Reply:
    """Block storage volumes: AWS-flavoured ids, ARNs, zones, sizes and IOPS."""
    region = f.pick(AWS_REGIONS)
    if f.chance(0.15):
        body: dict[str, Any] = {
            "code": "VolumeLimitExceeded",
            "message": "You have exceeded your maximum gp3 storage limit in this region.",
            "requestId": f.uuid4(),
        }
        return Reply(400, h.dump(body), headers=h.headers(f, 400))
    volume = "vol-0" + f.hex(16)
    kind = f.pick(("gp3", "gp2", "io2", "st1"))
    body = {
        "volume": {
            "id": volume,
            "name": f"{f.word()}-data",
            "sizeGb": f.pick((8, 20, 50, 100, 500, 1000)),
            "type": kind,
            "iops": 3000 if kind == "gp3" else f.pick((100, 16000)),
            "throughput": 125 if kind == "gp3" else None,
            "state": "creating",
            "availabilityZone": region + f.pick("abc"),
            "encrypted": True,
            "kmsKeyId": f"arn:aws:kms:{region}:{f.digits(12)}:key/{f.uuid4()}",
            "multiAttachEnabled": False,
            "createdAt": h.ts(f.when),
            "tags": {"env": f.pick(("prod", "staging", "dev")), "team": f.word()},
        }
    }
    return Reply(
        201, h.dump(body), headers=h.headers(f, 201, first=[h.location(f"/v1/volumes/{volume}")])
    )


def dns_records(f: Fake, h: House) -> Reply:
    """A Cloudflare-like DNS API: result, success, errors and messages around each answer."""
    zone = f.host(prefix="www").removeprefix("www.")
    if f.chance(0.15):
        body: dict[str, Any] = {
            "result": None,
            "success": False,
            "errors": [
                f.pick(
                    (
                        {"code": 81057, "message": "Record already exists."},
                        {
                            "code": 9005,
                            "message": "Content for A record must be a valid IPv4 address.",
                        },
                        {"code": 1004, "message": "DNS Validation Error"},
                    )
                )
            ],
            "messages": [],
        }
        return Reply(400, h.dump(body), headers=h.headers(f, 400))
    kind = f.pick(("A", "A", "CNAME", "TXT", "AAAA", "MX"))
    content = {
        "A": f.ipv4(),
        "CNAME": f"{f.word()}.{zone}",
        "TXT": f"v=spf1 include:_spf.{zone} ~all",
        "AAAA": f"2001:db8::{f.hex(4)}",
        "MX": f"mx.{zone}",
    }[kind]
    record = {
        "id": f.hex(32),
        "zone_id": f.hex(32),
        "zone_name": zone,
        "name": f"{f.word()}.{zone}",
        "type": kind,
        "content": content,
        "proxiable": kind in ("A", "AAAA", "CNAME"),
        "proxied": f.chance(0.5) and kind in ("A", "AAAA", "CNAME"),
        "ttl": f.pick((1, 300, 3600)),
        "locked": False,
        "meta": {"auto_added": False, "managed_by_apps": False, "managed_by_argo_tunnel": False},
        "comment": None,
        "tags": [],
        "created_on": Fake.iso(f.when, "us"),
        "modified_on": Fake.iso(f.when, "us"),
    }
    if kind == "MX":
        record["priority"] = 10
    body = {"result": record, "success": True, "errors": [], "messages": []}
    return Reply(200, h.dump(body), headers=h.headers(f, 200))


def messaging(f: Fake, h: House) -> Reply:
    """A Twilio-like messaging API: SIDs, RFC 2822 dates, subresource URIs."""
    account = "AC" + f.hex(32)
    headers = h.headers(
        f,
        201,
        first=[
            ("Twilio-Concurrent-Requests", "1"),
            ("Twilio-Request-Duration", f"{f.rng.uniform(0.02, 0.4):.3f}"),
            ("Twilio-Request-Id", "RQ" + f.hex(32)),
        ],
    )
    if f.chance(0.15):
        code = f.pick((21211, 21610, 21408, 21614))
        body: dict[str, Any] = {
            "code": code,
            "message": f"The 'To' number {f.phone()} is not a valid phone number.",
            "more_info": f"https://www.{h.brand}.com/docs/errors/{code}",
            "status": 400,
        }
        return Reply(400, h.dump(body), headers=headers)
    sid = "SM" + f.hex(32)
    date = Fake.imf(f.when).replace("GMT", "+0000")
    base = f"/2010-04-01/Accounts/{account}/Messages/{sid}"
    text = f.sentence(f.between(3, 25))
    body = {
        "account_sid": account,
        "api_version": "2010-04-01",
        "body": text,
        "date_created": date,
        "date_sent": None,
        "date_updated": date,
        "direction": "outbound-api",
        "error_code": None,
        "error_message": None,
        "from": f.phone(),
        "messaging_service_sid": "MG" + f.hex(32) if f.chance(0.5) else None,
        "num_media": "0",
        "num_segments": str(1 + len(text) // 160),
        "price": None,
        "price_unit": "USD",
        "sid": sid,
        "status": "queued",
        "subresource_uris": {"media": base + "/Media.json"},
        "to": f.phone(),
        "uri": base + ".json",
    }
    return Reply(201, h.dump(body), headers=headers)


def notifications(f: Fake, h: House) -> Reply:
    """E-mail and push sends: an empty 202 with a message id, or a short queued answer."""
    domain = f.host(prefix="mg")
    kind = f.pick(("sendgrid", "mailgun", "postmark", "push", "slack"))
    if kind == "sendgrid":
        headers = h.headers(f, 202, first=[("X-Message-Id", f.b64(16, url=True, pad=False))])
        return Reply(202, b"", "text/plain; charset=utf-8", headers)
    if kind == "mailgun":
        stamp = Fake.iso(f.when).replace("-", "").replace(":", "").replace("T", "")[:14]
        body: dict[str, Any] = {
            "id": f"<{stamp}.{f.hex(16)}@{domain}>",
            "message": "Queued. Thank you.",
        }
    elif kind == "postmark":
        body = {
            "To": f.email(),
            "SubmittedAt": Fake.iso(f.when, "net+"),
            "MessageID": f.uuid4(),
            "ErrorCode": 0,
            "Message": "OK",
        }
    elif kind == "push":
        body = {"name": f"projects/{f.slug()}/messages/0:{f.digits(16)}%{f.hex(16)}"}
    else:
        body = {
            "ok": True,
            "channel": "C" + f.chars("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10),
            "ts": f"{f.when:.6f}",
        }
    return Reply(200, h.dump(body), headers=h.headers(f, 200))


def forge_rest(f: Fake, h: House) -> Reply:
    """A GitHub-like REST API: long URL-laden objects and its many headers."""
    brand = h.brand.capitalize()
    owner, repo = f.word(), f.slug()
    number = f.between(1, 40_000)
    api = f"https://{h.host}/repos/{owner}/{repo}"
    user = f.word() + str(f.between(1, 999))
    user_id = f.numeric_id(1_000, 150_000_000)
    headers = h.headers(
        f,
        201,
        first=[
            ("Cache-Control", "private, max-age=60, s-maxage=60"),
            ("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP"),
            ("ETag", f'"{f.hex(64)}"'),
            ("Location", f"{api}/issues/{number}"),
            ("X-OAuth-Scopes", "repo, workflow"),
            ("X-Accepted-OAuth-Scopes", ""),
            (f"x-{h.brand}-api-version-selected", "2022-11-28"),
            ("X-RateLimit-Limit", "5000"),
            ("X-RateLimit-Remaining", str(f.between(0, 4999))),
            ("X-RateLimit-Reset", str(int(f.when) + f.between(60, 3600))),
            ("X-RateLimit-Used", str(f.between(1, 5000))),
            ("X-RateLimit-Resource", "core"),
            (
                "Access-Control-Expose-Headers",
                f"ETag, Link, Location, Retry-After, X-{brand}-OTP, "
                "X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Used, X-RateLimit-Resource, "
                "X-RateLimit-Reset, X-OAuth-Scopes, X-Accepted-OAuth-Scopes, X-Poll-Interval, "
                f"X-{brand}-Media-Type, X-{brand}-SSO, X-{brand}-Request-Id, Deprecation, Sunset",
            ),
            ("Access-Control-Allow-Origin", "*"),
            ("Strict-Transport-Security", "max-age=31536000; includeSubdomains; preload"),
            ("X-Frame-Options", "deny"),
            ("X-Content-Type-Options", "nosniff"),
            ("X-XSS-Protection", "0"),
            ("Referrer-Policy", "origin-when-cross-origin, strict-origin-when-cross-origin"),
            ("Content-Security-Policy", "default-src 'none'"),
            (f"X-{brand}-Media-Type", f"{h.brand}.v3; format=json"),
            (
                f"X-{brand}-Request-Id",
                f"{f.hex(4).upper()}:{f.hex(4).upper()}:"
                f"{f.hex(6).upper()}:{f.hex(6).upper()}:{int(f.when):08X}",
            ),
        ],
    )

    def account(login: str, ident: int) -> dict[str, Any]:
        url = f"https://{h.host}/users/{login}"
        return {
            "login": login,
            "id": ident,
            "node_id": "MDQ6VXNlcj" + f.b64(6, pad=False),
            "avatar_url": f"https://avatars.{h.brand}usercontent.com/u/{ident}?v=4",
            "gravatar_id": "",
            "url": url,
            "html_url": f"https://{h.brand}.com/{login}",
            "followers_url": f"{url}/followers",
            "following_url": f"{url}/following{{/other_user}}",
            "gists_url": f"{url}/gists{{/gist_id}}",
            "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{url}/subscriptions",
            "organizations_url": f"{url}/orgs",
            "repos_url": f"{url}/repos",
            "events_url": f"{url}/events{{/privacy}}",
            "received_events_url": f"{url}/received_events",
            "type": "User",
            "site_admin": False,
        }

    if f.chance(0.15):
        body: dict[str, Any] = {
            "message": "Validation Failed",
            "errors": [{"resource": "Issue", "code": "missing_field", "field": "title"}],
            "documentation_url": f"https://docs.{h.brand}.com/rest/issues/issues#create-an-issue",
            "status": "422",
        }
        return Reply(422, h.dump(body), "application/json", headers)
    body = {
        "url": f"{api}/issues/{number}",
        "repository_url": api,
        "labels_url": f"{api}/issues/{number}/labels{{/name}}",
        "comments_url": f"{api}/issues/{number}/comments",
        "events_url": f"{api}/issues/{number}/events",
        "html_url": f"https://{h.brand}.com/{owner}/{repo}/issues/{number}",
        "id": f.numeric_id(1_000_000_000, 2_999_999_999),
        "node_id": "I_kwDO" + f.b64(12, url=True, pad=False),
        "number": number,
        "title": f.sentence(f.between(3, 9)).rstrip("."),
        "user": account(user, user_id),
        "labels": [],
        "state": "open",
        "locked": False,
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "comments": 0,
        "created_at": Fake.iso(f.when),
        "updated_at": Fake.iso(f.when),
        "closed_at": None,
        "author_association": "OWNER",
        "active_lock_reason": None,
        "body": f.sentence(f.between(5, 40)),
        "closed_by": None,
        "reactions": {
            "url": f"{api}/issues/{number}/reactions",
            "total_count": 0,
            "+1": 0,
            "-1": 0,
            "laugh": 0,
            "hooray": 0,
            "confused": 0,
            "heart": 0,
            "rocket": 0,
            "eyes": 0,
        },
        "timeline_url": f"{api}/issues/{number}/timeline",
        "performed_via_github_app": None,
        "state_reason": None,
    }
    return Reply(201, h.dump(body), "application/json", headers)


def kubernetes(f: Fake, h: House) -> Reply:
    """A Kubernetes-like API server: kind, apiVersion, metadata with managedFields."""
    name = f.slug()
    namespace = f.pick(("default", "prod", "staging", "payments", "kube-system"))
    headers = [
        ("Audit-Id", f.uuid4()),
        ("Cache-Control", "no-cache, private"),
        ("X-Kubernetes-Pf-Flowschema-Uid", h.extra.get("flow", f.uuid4())),
        ("X-Kubernetes-Pf-Prioritylevel-Uid", h.extra.get("level", f.uuid4())),
    ]
    if f.chance(0.15):
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f'deployments.apps "{name}" already exists',
            "reason": "AlreadyExists",
            "details": {"name": name, "group": "apps", "kind": "deployments"},
            "code": 409,
        }
        return Reply(409, h.dump(body), headers=headers)
    labels = {"app": name, "tier": f.pick(("web", "api", "worker"))}
    created = Fake.iso(f.when)
    body = {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f.uuid4(),
            "resourceVersion": str(f.between(100_000, 99_999_999)),
            "generation": 1,
            "creationTimestamp": created,
            "labels": labels,
            "managedFields": [
                {
                    "manager": f.pick(("kubectl-client-side-apply", "helm", "argocd-controller")),
                    "operation": "Update",
                    "apiVersion": "apps/v1",
                    "time": created,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}}},
                        "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {}},
                    },
                }
            ],
        },
        "spec": {
            "replicas": f.pick((1, 2, 3, 5)),
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"creationTimestamp": None, "labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": name,
                            "image": f"registry.{h.brand}.io/{name}:{f.between(1, 9)}."
                            f"{f.between(0, 30)}.{f.between(0, 9)}",
                            "ports": [
                                {"containerPort": f.pick((80, 8080, 3000)), "protocol": "TCP"}
                            ],
                            "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent",
                        }
                    ],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler",
                },
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {},
    }
    return Reply(201, h.dump(body), headers=headers)


def aws_json(f: Fake, h: House) -> Reply:
    """An AWS JSON 1.0/1.1 protocol service: x-amz-json media types, x-amzn-RequestId."""
    media = "application/x-amz-json-1." + ("0" if len(h.brand) % 2 else "1")
    request = f.uuid4() if f.chance(0.7) else f.chars("ABCDEFGHIJKLMNOPQRSTUV0123456789", 52)
    headers = [("x-amzn-RequestId", request), ("x-amz-crc32", str(f.rng.getrandbits(32)))]
    if f.chance(0.15):
        kind = f.pick(
            (
                ("ConditionalCheckFailedException", "The conditional request failed"),
                (
                    "ValidationException",
                    "1 validation error detected: Value null at 'tableName' "
                    "failed to satisfy constraint: Member must not be null",
                ),
                (
                    "ProvisionedThroughputExceededException",
                    "The level of configured provisioned throughput for the table was exceeded.",
                ),
            )
        )
        body: dict[str, Any] = {
            "__type": f"com.amazonaws.dynamodb.v20120810#{kind[0]}",
            "message": kind[1],
        }
        return Reply(400, h.dump(body), media, headers, "plain", "Server")
    kind2 = f.pick(("sqs", "dynamodb", "kinesis", "sfn"))
    if kind2 == "sqs":
        body = {
            "MD5OfMessageBody": f.hex(32),
            "MessageId": f.uuid4(),
            **({"SequenceNumber": f.digits(20)} if f.chance(0.3) else {}),
        }
    elif kind2 == "dynamodb":
        body = {"ConsumedCapacity": {"CapacityUnits": 1.0, "TableName": f.word()}}
    elif kind2 == "kinesis":
        body = {"SequenceNumber": f.digits(56), "ShardId": f"shardId-{f.between(0, 9):012d}"}
    else:
        machine = f"arn:aws:states:{f.pick(AWS_REGIONS)}:{f.digits(12)}:execution:{f.slug()}"
        body = {
            "executionArn": f"{machine}:{f.uuid4()}",
            "startDate": round(f.when, 3),
        }
    return Reply(200, h.dump(body), media, headers, "plain", "Server")


def google_api(f: Fake, h: House) -> Reply:
    """A Google-style API: resources with kind, name paths and the google.rpc error format."""
    project = f.slug()
    headers = [
        ("Vary", "Origin"),
        ("Vary", "X-Origin"),
        ("Vary", "Referer"),
        ("Server", "ESF"),
        ("Cache-Control", "private"),
        ("X-XSS-Protection", "0"),
        ("X-Frame-Options", "SAMEORIGIN"),
        ("X-Content-Type-Options", "nosniff"),
    ]
    pretty = replace(h, indent=2)
    if f.chance(0.2):
        code, status = f.pick(
            (
                (400, "INVALID_ARGUMENT"),
                (403, "PERMISSION_DENIED"),
                (409, "ALREADY_EXISTS"),
                (429, "RESOURCE_EXHAUSTED"),
            )
        )
        body: dict[str, Any] = {
            "error": {
                "code": code,
                "message": f"Request had invalid argument: {f.word()}",
                "status": status,
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": status,
                        "domain": f"{h.brand}apis.com",
                        "metadata": {"service": f"{f.word()}.{h.brand}apis.com"},
                    }
                ],
            }
        }
        return Reply(code, pretty.dump(body), "application/json; charset=UTF-8", headers, "gfe")
    operation = f"operation-{int(f.when * 1000)}-{f.hex(13)}-{f.hex(8)}-{f.hex(8)}"
    body = {
        "kind": "compute#operation",
        "id": f.digits(19),
        "name": operation,
        "zone": f"https://www.{h.brand}apis.com/compute/v1/projects/{project}/zones/europe-west1-b",
        "operationType": "insert",
        "targetLink": f"https://www.{h.brand}apis.com/compute/v1/projects/{project}/zones/"
        f"europe-west1-b/instances/{f.slug()}",
        "targetId": f.digits(19),
        "status": "RUNNING",
        "user": f.email(),
        "progress": 0,
        "insertTime": Fake.iso(f.when, "ms").replace("Z", "-07:00"),
        "startTime": Fake.iso(f.when, "ms").replace("Z", "-07:00"),
        "selfLink": f"https://www.{h.brand}apis.com/compute/v1/projects/{project}/zones/"
        f"europe-west1-b/operations/{operation}",
    }
    return Reply(200, pretty.dump(body), "application/json; charset=UTF-8", headers, "gfe")


def webhooks(f: Fake, h: House) -> Reply:
    """Webhook endpoint registration: URL, events, a signing secret."""
    events = f.some(
        (
            "charge.succeeded",
            "charge.failed",
            "invoice.paid",
            "customer.created",
            "order.created",
            "order.fulfilled",
            "payment.refunded",
            "subscription.updated",
        ),
        1,
        5,
    )
    if f.chance(0.12):
        body: dict[str, Any] = {"error": {"message": "Invalid URL: must be https", "param": "url"}}
        return Reply(400, h.dump(body), headers=h.headers(f, 400))
    body = {
        "id": h.id(f, "we"),
        "object": "webhook_endpoint",
        "url": f"https://{f.host(prefix='hooks')}/{f.word()}/{f.nanoid(12)}",
        "enabled_events": events,
        "secret": "whsec_" + f.base62(32),
        "status": "enabled",
        "description": None,
        "api_version": None,
        "created": int(f.when),
        "metadata": {},
    }
    return Reply(201, h.dump(body), headers=h.headers(f, 201))


def uploads(f: Fake, h: House) -> Reply:
    """File uploads: metadata, checksums and a presigned URL to put the bytes to."""
    name = f.pick(("invoice", "receipt", "avatar", "export", "contract", "photo"))
    ext, mime = f.pick(
        (
            ("pdf", "application/pdf"),
            ("png", "image/png"),
            ("csv", "text/csv"),
            ("jpg", "image/jpeg"),
            ("zip", "application/zip"),
        )
    )
    file_id = h.text_id(f)
    region = f.pick(AWS_REGIONS)
    stamp = Fake.iso(f.when).replace("-", "").replace(":", "")
    body: dict[str, Any] = {
        "id": file_id,
        "filename": f"{name}-{Fake.day(f.when)}.{ext}",
        "content_type": mime,
        "size": f.between(1_000, 20_000_000),
        "checksum": f.pick(("sha256:" + f.hex(64), "md5:" + f.b64(16))),
        "status": "pending_upload",
        "upload_url": f"https://{h.brand}-uploads.s3.{region}.amazonaws.com/{file_id}?"
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA"
        f"{f.chars('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', 16)}%2F{stamp[:8]}%2F{region}%2Fs3%2F"
        f"aws4_request&X-Amz-Date={stamp}&X-Amz-Expires=900&X-Amz-SignedHeaders=host&"
        f"X-Amz-Signature={f.hex(64)}",
        "expires_at": h.ts(f.when + 900),
        "created_at": h.ts(f.when),
    }
    return Reply(201, h.dump(body), headers=h.headers(f, 201))


def events_ingest(f: Fake, h: House) -> Reply:
    """Analytics and telemetry ingestion: tiny acknowledgements."""
    kind = f.pick(("success", "counts", "status", "text", "batch"))
    if kind == "text":
        return Reply(200, b"1", "text/plain", h.headers(f, 200))
    if kind == "success":
        body: dict[str, Any] = {"success": True}
    elif kind == "counts":
        accepted = f.between(1, 500)
        body = {"accepted": accepted, "rejected": 0, "errors": []}
    elif kind == "status":
        body = {"status": 1, "error": None}
    else:
        body = {
            "code": 200,
            "server_upload_time": int(f.when * 1000),
            "payload_size_bytes": f.between(200, 90_000),
            "events_ingested": f.between(1, 100),
        }
    return Reply(f.pick((200, 200, 202)), h.dump(body), headers=h.headers(f, 200))


RESOURCES = {
    "customers": ("cus", ("name", "email", "phone", "address", "metadata")),
    "invoices": ("in", ("customer", "amount_due", "currency", "due_date", "number", "lines")),
    "products": ("prod", ("name", "description", "sku", "price", "currency", "active")),
    "tickets": ("tkt", ("subject", "priority", "requester", "assignee", "tags")),
    "projects": ("prj", ("name", "description", "owner", "visibility", "tags")),
    "payments": ("pay", ("amount", "currency", "customer", "description", "method")),
    "refunds": ("re", ("payment", "amount", "currency", "reason")),
    "payouts": ("po", ("amount", "currency", "destination", "arrival_date", "method")),
    "transfers": ("tr", ("amount", "currency", "destination", "description")),
    "coupons": ("co", ("code", "percent_off", "duration", "max_redemptions")),
}


def _field(f: Fake, h: House, name: str) -> object:
    """A value of a common field, as such APIs fill it."""
    if name in ("amount", "amount_due", "price"):
        return f.minor_amount()
    if name == "currency":
        code = f.currency()
        return code.lower() if h.extra.get("lower_currency") == "1" else code
    if name in ("customer", "requester", "assignee", "owner", "payment", "destination"):
        return h.id(f, name[:3])
    if name == "email":
        return f.email()
    if name == "phone":
        return f.phone()
    if name == "address":
        return f.address()
    if name in ("metadata",):
        return {} if f.chance(0.6) else {"order_id": str(f.numeric_id())}
    if name in ("tags",):
        return f.some(("urgent", "billing", "vip", "beta", "internal", "customer"), 0, 3)
    if name in ("due_date", "arrival_date"):
        return Fake.day(f.later(86_400, 40 * 86_400))
    if name in ("active",):
        return True
    if name == "lines":
        return {"object": "list", "data": [], "has_more": False, "total_count": f.between(1, 5)}
    if name in ("percent_off", "max_redemptions"):
        return f.pick((5, 10, 15, 20, 25, 50, 100))
    if name in ("priority",):
        return f.pick(("low", "normal", "high", "urgent"))
    if name in ("visibility",):
        return f.pick(("private", "internal", "public"))
    if name in ("reason",):
        return f.pick(("requested_by_customer", "duplicate", "fraudulent", None))
    if name in ("method", "duration"):
        return f.pick(("card", "bank_transfer", "sepa_debit", "once", "forever", "repeating"))
    if name == "number":
        return f"{h.brand.upper()[:4]}-{f.between(1000, 99999)}"
    if name == "code":
        return f.chars("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", 8)
    if name == "name":
        return f"{f.first()} {f.last()}" if f.chance(0.5) else f.slug().replace("-", " ").title()
    if name == "sku":
        return f.sku()
    return f.sentence(f.between(2, 9))


def saas_resources(f: Fake, h: House) -> Reply:
    """A plain REST API of a SaaS product: one resource created, the fields such APIs share
    (id, object or type, status, amounts, timestamps, metadata) in the house's spelling."""
    kind = f.pick(tuple(RESOURCES))
    prefix, fields = RESOURCES[kind]
    if f.chance(0.12):
        body: dict[str, Any] = {
            "error": {
                "type": "invalid_request_error",
                "code": f.pick(("resource_missing", "parameter_invalid", "amount_too_small")),
                "message": f"No such {kind[:-1]}: '{h.id(f, prefix)}'",
                "param": f.pick(fields),
            }
        }
        return Reply(f.pick((400, 404)), h.dump(body), headers=h.headers(f, 400))
    ident = h.id(f, prefix)
    body = {"id": ident}
    if h.extra.get("object") == "1":
        body["object"] = kind[:-1]
    for name in fields:
        body[name] = _field(f, h, name)
    body["status"] = f.pick(("succeeded", "pending", "active", "open", "draft", "paid"))
    if h.times == "unix":
        body["created"] = int(f.when)
    else:
        body["created_at"] = h.ts(f.when)
        body["updated_at"] = h.ts(f.when)
    if h.extra.get("object") == "1":
        body["livemode"] = f.chance(0.8)
    headers = h.headers(f, 201, first=[h.location(f"/v1/{kind}/{ident}")])
    return Reply(201, h.dump(body), headers=headers)
