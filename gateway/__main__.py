"""`python -m gateway` runs the `idem-gateway` command."""

import sys

from .cli import main

sys.exit(main())
