"""A history checker for the gateway's promise, under faults: `python -m loadtest.verify`.

Clients that behave like real ones record every request and answer; a counting upstream logs
every execution; a nemesis starts and stops faults (processes killed and paused, Redis full,
network faults through a TCP proxy, a full journal disk, failovers); the checker reads both
histories and reports any key run twice, any wrong 2xx body, any lost acknowledged outcome.
See docs/verification.md.
"""
