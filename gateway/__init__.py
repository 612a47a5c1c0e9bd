"""An idempotency gateway."""
