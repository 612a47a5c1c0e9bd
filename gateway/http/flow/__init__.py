"""A request's way through the gateway: routed, its key claimed, forwarded once, its answer
recorded and settled, a lost owner's key taken over, untouched traffic passed through."""
