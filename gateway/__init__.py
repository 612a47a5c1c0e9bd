"""An idempotency gateway."""

# First of all: a compiled build whose sources changed since loads as pure Python (build.py).
from gateway import build as build
