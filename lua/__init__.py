"""Redis scripts of the idempotency state machine, shipped as package data."""
