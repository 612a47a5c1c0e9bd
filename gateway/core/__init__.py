"""The decision core: pure functions on plain values (claims, fingerprints, keys, records,
headers, routing, scope), with no event loop, network, Redis or HTTP behind them."""
