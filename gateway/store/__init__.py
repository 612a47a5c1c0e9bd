"""Redis: the idempotency records and their state machine (`store`), how its calls are sent
(`sending` and the pipelines), the client per topology, the breaker, the embedded
redis-server, the journal of outcomes Redis has not taken yet and the attention index."""
