"""The values an API's answers are made of, drawn from one seeded `random.Random`: ids of
each kind APIs hand out, timestamps as they write them, amounts, people, places, ETags,
request ids and trace headers.

Everything here is deterministic for a given seed: no clock, no `uuid` module, no set order.
"""

from __future__ import annotations

import base64
import hashlib
import random
import string
from collections.abc import Sequence
from datetime import UTC, datetime
from email.utils import formatdate
from typing import TypeVar

T = TypeVar("T")

BASE62 = string.digits + string.ascii_letters
BASE64URL = string.ascii_letters + string.digits + "-_"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
HEX = "0123456789abcdef"

# 2024-01-01 to 2026-12-31: when the answers were recorded.
EPOCH_FROM = 1_704_067_200
EPOCH_TO = 1_798_761_600

CURRENCIES = (
    *("USD",) * 8, *("EUR",) * 6, *("GBP",) * 3, "CAD", "AUD", "JPY", "CHF", "SEK", "NOK",
    "DKK", "PLN", "BRL", "MXN", "INR", "SGD", "NZD", "HKD", "ZAR", "CZK",
)  # fmt: skip
FIRST = (
    "James", "Mary", "Olivia", "Noah", "Emma", "Liam", "Sofia", "Lucas", "Mia", "Ethan",
    "Amelia", "Mateo", "Chloe", "Hugo", "Lea", "Jonas", "Anna", "Marco", "Giulia", "Yuki",
    "Hiroshi", "Priya", "Arjun", "Fatima", "Omar", "Ines", "Pedro", "Camila", "Lars", "Ingrid",
    "Wei", "Mei", "Chen", "Aisha", "Kwame", "Zoe", "Oscar", "Elena", "Ivan", "Nadia",
)  # fmt: skip
LAST = (
    "Smith", "Johnson", "Brown", "Garcia", "Miller", "Davis", "Martinez", "Lopez", "Wilson",
    "Anderson", "Taylor", "Thomas", "Moore", "Martin", "Lee", "Clark", "Lewis", "Walker",
    "Muller", "Schmidt", "Schneider", "Fischer", "Dubois", "Lefebvre", "Rossi", "Russo",
    "Tanaka", "Suzuki", "Sato", "Kumar", "Sharma", "Patel", "Nguyen", "Kim", "Park", "Silva",
    "Santos", "Novak", "Kowalski", "Jensen", "Hansen", "OBrien", "Murphy", "Cohen", "Ali",
)  # fmt: skip
MAIL_DOMAINS = (
    "example.com", "example.org", "example.net", "gmail.com", "outlook.com", "yahoo.com",
    "icloud.com", "proton.me", "acme.io", "corp.example",
)  # fmt: skip
BRANDS = (
    "acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell", "soylent",
    "cyberdyne", "wonka", "oscorp", "vandelay", "gringotts", "monarch", "aperture", "massive",
    "contoso", "fabrikam", "northwind", "tailspin", "piedpiper", "bluth", "dunder", "krusty",
    "nakatomi", "weyland", "duff", "lacroix", "sirius", "zenith", "quantum", "nimbus", "orbit",
    "lumen", "vertex", "atlas", "helix", "nova", "kite", "ember", "fjord", "tundra", "sable",
)  # fmt: skip
TLDS = (*(".com",) * 6, ".io", ".io", ".dev", ".co", ".net", ".app", ".de", ".co.uk", ".eu")
# (city, region, postal code pattern, country): "9" a digit, "A" a capital letter.
CITIES = (
    ("New York", "NY", "99999", "US"), ("San Francisco", "CA", "99999", "US"),
    ("Austin", "TX", "99999", "US"), ("Chicago", "IL", "99999", "US"),
    ("Seattle", "WA", "99999", "US"), ("Toronto", "ON", "A9A 9A9", "CA"),
    ("London", "", "AA9 9AA", "GB"), ("Manchester", "", "A9 9AA", "GB"),
    ("Berlin", "", "99999", "DE"), ("Munich", "BY", "99999", "DE"),
    ("Paris", "", "99999", "FR"), ("Lyon", "", "99999", "FR"),
    ("Amsterdam", "", "9999 AA", "NL"), ("Madrid", "", "99999", "ES"),
    ("Milan", "MI", "99999", "IT"), ("Stockholm", "", "999 99", "SE"),
    ("Warsaw", "", "99-999", "PL"), ("Dublin", "", "A99 AA99", "IE"),
    ("Sydney", "NSW", "9999", "AU"), ("Tokyo", "", "999-9999", "JP"),
    ("Singapore", "", "999999", "SG"), ("Sao Paulo", "SP", "99999-999", "BR"),
    ("Mexico City", "CDMX", "99999", "MX"), ("Bengaluru", "KA", "999999", "IN"),
)  # fmt: skip
STREETS = (
    "Main St", "Market Street", "Oak Avenue", "Elm St", "Park Road", "High Street",
    "Hauptstrasse", "Rue de Rivoli", "Via Roma", "Calle Mayor", "Broadway", "King Street",
    "Sunset Blvd", "Mission St", "Queen St W", "Kurfurstendamm", "Damrak", "Baker Street",
)  # fmt: skip
WORDS = (
    "alpha", "bravo", "delta", "echo", "falcon", "granite", "harbor", "iris", "juniper", "kepler",
    "lotus", "maple", "nebula", "onyx", "pioneer", "quartz", "raven", "summit", "tango", "umber",
    "violet", "willow", "xenon", "yonder", "zephyr", "blue", "green", "red", "prod", "staging",
    "web", "api", "worker", "db", "cache", "edge", "east", "west", "north", "south",
)  # fmt: skip
PRODUCTS = (
    "Wireless Mouse", "USB-C Cable 2m", "Mechanical Keyboard", "27\" Monitor", "Laptop Stand",
    "Noise Cancelling Headphones", "Coffee Beans 1kg", "Espresso Machine", "Running Shoes",
    "Yoga Mat", "Water Bottle", "Backpack", "Desk Lamp", "Office Chair", "T-Shirt (M)",
    "Hoodie (L)", "Gift Card", "Phone Case", "Screen Protector", "Smart Watch", "Notebook A5",
    "Annual Plan", "Pro Subscription", "Team Seat", "Support Add-on", "Storage 100 GB",
)  # fmt: skip
IATA = (
    "FRA", "AMS", "LHR", "CDG", "IAD", "SJC", "LAX", "ORD", "DFW", "ATL", "SIN", "NRT", "SYD",
    "GRU", "MAD", "MXP", "WAW", "ARN", "DUB", "YYZ", "BOM", "HKG", "EWR", "SEA", "MIA", "ZRH",
)  # fmt: skip
AWS_REGIONS = (
    "us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-central-1", "eu-west-2",
    "ap-southeast-1", "ap-northeast-1", "ap-south-1", "sa-east-1", "ca-central-1",
)  # fmt: skip
USER_AGENTS_ORIGINS = (
    "https://app.example.com", "https://dashboard.example.com", "https://www.example.com",
    "https://checkout.example.com", "http://localhost:3000", "https://admin.example.io",
)  # fmt: skip


class Fake:
    """The value maker of one answer, or of one API's constant choices (`house`)."""

    def __init__(self, rng: random.Random, when: float) -> None:
        self.rng = rng
        self.when = when  # the answer's time (Unix seconds)

    # choices ------------------------------------------------------------------------------

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def weighted(self, options: Sequence[tuple[T, float]]) -> T:
        values = [value for value, _ in options]
        weights = [weight for _, weight in options]
        return self.rng.choices(values, weights)[0]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def between(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def some(self, options: Sequence[T], low: int, high: int) -> list[T]:
        return self.rng.sample(list(options), min(len(options), self.between(low, high)))

    # ids ----------------------------------------------------------------------------------

    def chars(self, alphabet: str, n: int) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def hex(self, n: int) -> str:
        return self.chars(HEX, n)

    def digits(self, n: int) -> str:
        return str(self.rng.randrange(1, 10)) + self.chars(string.digits, n - 1)

    def base62(self, n: int) -> str:
        return self.chars(BASE62, n)

    def uuid4(self) -> str:
        bits = self.rng.getrandbits(128)
        bits = (bits & ~(0xF000 << 64)) | (0x4000 << 64)  # version 4
        bits = (bits & ~(0xC000 << 48)) | (0x8000 << 48)  # variant RFC 4122
        h = f"{bits:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def uuid7(self) -> str:
        ms = int(self.when * 1000) & ((1 << 48) - 1)
        bits = (ms << 80) | (0x7 << 76) | (self.rng.getrandbits(12) << 64)
        bits |= (0b10 << 62) | self.rng.getrandbits(62)
        h = f"{bits:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def ulid(self) -> str:
        ms = int(self.when * 1000)
        stamp = "".join(CROCKFORD[(ms >> (5 * i)) & 31] for i in reversed(range(10)))
        return stamp + self.chars(CROCKFORD, 16)

    def object_id(self) -> str:
        """A MongoDB ObjectId: four bytes of time, then random and counter bytes."""
        return f"{int(self.when):08x}" + self.hex(16)

    def snowflake(self) -> str:
        return str(((int(self.when * 1000) - 1_288_834_974_657) << 22) | self.rng.getrandbits(22))

    def nanoid(self, n: int = 21) -> str:
        return self.chars(BASE64URL, n)

    def ksuid(self) -> str:
        return self.base62(27)

    def prefixed(self, prefix: str, n: int = 24) -> str:
        """A Stripe-like id: `pi_3OqXy...`."""
        return f"{prefix}_{self.base62(n)}"

    def numeric_id(self, low: int = 1_000, high: int = 99_999_999) -> int:
        return self.rng.randint(low, high)

    def b64(self, nbytes: int, url: bool = False, pad: bool = True) -> str:
        raw = self.rng.getrandbits(8 * nbytes).to_bytes(nbytes, "big")
        text = (base64.urlsafe_b64encode if url else base64.b64encode)(raw).decode()
        return text if pad else text.rstrip("=")

    def any_id(self) -> str:
        """An id as one of the usual schemes, for the APIs that could use any."""
        kind = self.rng.randrange(6)
        if kind == 0:
            return self.uuid4()
        if kind == 1:
            return self.ulid()
        if kind == 2:
            return self.object_id()
        if kind == 3:
            return str(self.numeric_id())
        if kind == 4:
            return self.nanoid()
        return self.ksuid()

    # time ---------------------------------------------------------------------------------

    def later(self, low: float, high: float) -> float:
        return self.when + self.rng.uniform(low, high)

    def earlier(self, low: float, high: float) -> float:
        return self.when - self.rng.uniform(low, high)

    @staticmethod
    def imf(when: float) -> str:
        """An IMF-fixdate, as the Date header has it."""
        return formatdate(when, usegmt=True)

    @staticmethod
    def iso(when: float, style: str = "s") -> str:
        """ISO 8601 in UTC: "s" seconds, "ms" milliseconds, "us" microseconds, "net" .NET's
        seven digits; with "Z", or "+00:00" when the style ends in "+"."""
        offset = style.endswith("+")
        style = style.rstrip("+")
        at = datetime.fromtimestamp(when, UTC)
        text = at.strftime("%Y-%m-%dT%H:%M:%S")
        if style == "ms":
            text += f".{at.microsecond // 1000:03d}"
        elif style == "us":
            text += f".{at.microsecond:06d}"
        elif style == "net":
            text += f".{at.microsecond:06d}{int(when * 1e7) % 10}"
        return text + ("+00:00" if offset else "Z")

    @staticmethod
    def day(when: float) -> str:
        return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")

    # money --------------------------------------------------------------------------------

    def currency(self) -> str:
        return self.pick(CURRENCIES)

    def minor_amount(self) -> int:
        """An amount in minor units: round prices, .99 prices, anything."""
        kind = self.rng.random()
        if kind < 0.3:
            return self.pick((500, 1000, 1500, 2000, 2500, 5000, 10000, 20000, 100, 99900))
        if kind < 0.6:
            return self.between(1, 500) * 100 - 1
        return self.between(50, 250_000)

    @staticmethod
    def decimal(minor: int, currency: str = "USD") -> str:
        if currency == "JPY":
            return str(minor)
        return f"{minor // 100}.{minor % 100:02d}"

    # people and places --------------------------------------------------------------------

    def first(self) -> str:
        return self.pick(FIRST)

    def last(self) -> str:
        return self.pick(LAST)

    def email(self, first: str = "", last: str = "") -> str:
        first, last = first or self.first(), last or self.last()
        local = self.pick(
            (f"{first}.{last}", f"{first[0]}{last}", f"{first}{self.between(1, 99)}", first)
        )
        return f"{local.lower()}@{self.pick(MAIL_DOMAINS)}"

    def phone(self) -> str:
        return self.pick(("+1", "+44", "+49", "+33", "+31", "+34", "+39", "+61")) + self.digits(10)

    def postal(self, pattern: str) -> str:
        return "".join(
            self.rng.choice(string.digits) if c == "9" else
            self.rng.choice(string.ascii_uppercase) if c == "A" else c
            for c in pattern
        )  # fmt: skip

    def address(self, names: tuple[str, ...] = ("line1", "line2", "city", "state",
                "postal_code", "country")) -> dict[str, object]:  # fmt: skip
        """An address, its fields named as the API names them (line1, line2, city, state,
        postal code, country)."""
        city, region, postal, country = self.pick(CITIES)
        values: list[object] = [
            f"{self.between(1, 2400)} {self.pick(STREETS)}",
            self.pick(
                (None, None, f"Apt {self.between(1, 40)}", f"Suite {self.between(100, 900)}")
            ),
            city,
            region or None,
            self.postal(postal),
            country,
        ]
        return dict(zip(names, values, strict=True))

    def ipv4(self) -> str:
        return ".".join(str(self.between(1, 254)) for _ in range(4))

    def brand(self) -> str:
        return self.pick(BRANDS)

    def host(self, brand: str = "", prefix: str = "api") -> str:
        return f"{prefix}.{brand or self.brand()}{self.pick(TLDS)}"

    def word(self) -> str:
        return self.pick(WORDS)

    def slug(self, n: int = 2) -> str:
        return "-".join(self.word() for _ in range(n))

    def product(self) -> str:
        return self.pick(PRODUCTS)

    def sku(self) -> str:
        return (
            self.pick(("SKU-", "", "ITM-", "P"))
            + self.chars(string.ascii_uppercase, 3)
            + ("-" + self.digits(self.between(3, 6)))
        )

    def sentence(self, words: int) -> str:
        text = " ".join(self.word() for _ in range(words))
        return text[0].upper() + text[1:] + "."

    # HTTP values --------------------------------------------------------------------------

    def etag(self, body: bytes, kind: str) -> str:
        """An ETag as servers make them: "md5" (quoted hex), "weak" (W/ and hex), "express"
        (Express's weak length-and-SHA-1), "b64" (quoted base64), "version" (W/ and a
        number), "azure" (quoted 0x and 15 hex), "sha256" (quoted 64 hex)."""
        if kind == "md5":
            return f'"{hashlib.md5(body).hexdigest()}"'
        if kind == "weak":
            return f'W/"{hashlib.md5(body).hexdigest()}"'
        if kind == "express":
            digest = base64.b64encode(hashlib.sha1(body).digest()).decode()[:27]
            return f'W/"{len(body):x}-{digest}"'
        if kind == "b64":
            return '"' + base64.b64encode(hashlib.md5(body).digest()).decode() + '"'
        if kind == "version":
            return f'W/"{self.between(1, 40)}"'
        if kind == "azure":
            return f'"0x8DC{self.hex(12).upper()}"'
        return f'"{hashlib.sha256(body).hexdigest()}"'

    def traceparent(self) -> str:
        return f"00-{self.hex(32)}-{self.hex(16)}-0{self.pick('01')}"

    def amzn_trace(self) -> str:
        root = f"Root=1-{int(self.when):08x}-{self.hex(24)}"
        if self.chance(0.4):
            root += f";Parent={self.hex(16)};Sampled={self.pick('01')}"
        return root

    def cf_ray(self) -> str:
        return f"{self.hex(16)}-{self.pick(IATA)}"

    def cloud_trace(self) -> str:
        return f"{self.hex(32)}/{self.digits(self.between(17, 20))};o=1"

    def cf_id(self) -> str:
        """CloudFront's X-Amz-Cf-Id: 56 characters of URL-safe base64."""
        return self.b64(40, url=True)[:54] + "=="

    def cookie_expiry(self, seconds: float, dashed: bool = False) -> str:
        """A cookie's Expires: an IMF-fixdate, or with dashes as PHP and Django write it."""
        text = self.imf(self.when + seconds)
        if dashed:
            day, date, month, year, rest = text.split(" ", 4)
            text = f"{day} {date}-{month}-{year} {rest}"
        return text
