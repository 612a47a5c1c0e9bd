"""`python -m gateway` runs the `idem-gateway` command."""

import signal
import sys

# SIGHUP reloads the config once the gateway serves; one sent while it still starts (a
# reload right after a start) must not end it, as by default it would: ignored until then.
signal.signal(signal.SIGHUP, signal.SIG_IGN)

from gateway.cli import main  # noqa: E402 - after the signal, before the slow imports

sys.exit(main())
