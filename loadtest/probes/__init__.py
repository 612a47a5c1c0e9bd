"""Probes: measurements a maintainer runs again to check a figure of loadtest/RESULTS.md or
docs/production.md, one module each, run as `python -m loadtest.probes NAME [OPTIONS]`."""
