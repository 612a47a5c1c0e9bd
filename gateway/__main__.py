"""`python -m gateway` runs the `idem-gateway` command."""

import signal
import sys

# SIGHUP reloads the config once the gateway serves; one sent while it still starts (a
# reload right after a start) must not end it, as by default it would: ignored until then.
signal.signal(signal.SIGHUP, signal.SIG_IGN)

try:
    from gateway.cli import main
except KeyboardInterrupt:  # Ctrl-C during the imports: main() cannot say it yet
    print("idem-gateway: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
