"""`python -m gateway` runs the `idem-gateway` command."""

import sys

from gateway.cli import main

sys.exit(main())
