"""What a call to Redis can fail with, through any of the clients."""

from __future__ import annotations

import asyncio
from typing import Final

from redis.exceptions import RedisError

# redis-py's Cluster client can also fail with AttributeError or RuntimeError when it resets
# a node's connections after an error while other calls are still connecting on them.
FAILURES: Final = (RedisError, OSError, asyncio.TimeoutError, AttributeError, RuntimeError)
