"""The collector tuning a serving gateway applies at start-up."""

from __future__ import annotations

import gc

from aiohttp import web

from gateway.ops.collector import YOUNG_THRESHOLD, tune_collector


async def test_start_up_objects_are_frozen_and_young_collections_are_rarer() -> None:
    before = gc.get_threshold()
    try:
        await tune_collector(web.Application())
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
