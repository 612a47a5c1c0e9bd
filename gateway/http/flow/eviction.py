"""The eviction guard: a Redis whose `maxmemory-policy` may drop keys loses records and leases,
and the keys they held run again. Such a Redis is refused at start, unless the operator
accepts the risk (`redis.accept_eviction`), and reported by /readyz and a metric.

And the failover guard: a Sentinel master that takes writes with no replica connected (its
`min-replicas-to-write` is 0) goes on taking them once it has been replaced, until Sentinel
demotes it, and those writes are lost: a warning at start (docs/production.md)."""

from __future__ import annotations

import logging

from gateway.core.decision import may_evict
from gateway.errors import ConfigError
from gateway.http.flow.context import Services

log = logging.getLogger(__name__)


async def eviction_risk(s: Services) -> bool | None:
    """Whether Redis may evict our keys now (None: it does not say); sets the metric."""
    policies = await s.store.eviction_policies()
    if policies is None:
        return None
    risk = may_evict(policies)
    s.metrics.eviction_risk.set(1 if risk else 0)
    if risk:
        s.eviction_policies = policies
    return risk


async def refuse_evicting(s: Services) -> None:
    """At start: ConfigError for an evicting Redis, unless accepted (then a warning)."""
    risk = await eviction_risk(s)
    if risk is None:
        why = await s.store.unusable()
        if why is not None:
            log.error(
                "redis is not usable at start (%s): requests to protected routes fail as "
                "their fail_mode says, /readyz reports not ready, until it answers",
                why,
            )
        else:
            log.warning("redis: maxmemory-policy unknown (CONFIG refused); eviction unchecked")
        return
    if not risk:
        return
    policies = ", ".join(sorted(s.eviction_policies))
    if s.settings.redis.accept_eviction:
        log.warning("redis: maxmemory-policy %s may evict records and leases (accepted)", policies)
        return
    raise ConfigError(
        f"redis: maxmemory-policy {policies} may evict idempotency records and leases, and "
        "their keys would run again; set it to noeviction (or redis.accept_eviction: true)"
    )


async def warn_unfenced(s: Services) -> None:
    """At start, with Sentinel: a warning unless the master refuses writes without a replica."""
    if s.settings.redis.sentinel is None:
        return
    found = await s.store.min_replicas()
    if found is None:
        log.warning("redis: min-replicas-to-write unknown (CONFIG refused); failover unchecked")
    elif found[0] < 1:
        log.warning(
            "redis: the Sentinel master has min-replicas-to-write 0: once replaced it takes "
            "writes until Sentinel demotes it, and they are lost (set min-replicas-to-write 1 "
            "and min-replicas-max-lag 10 on every server)"
        )
