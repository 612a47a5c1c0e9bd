"""The upstream side of the hop: the `Answer` interface, the httptools client for http(s)
origins, aiohttp's client for the rest, and the choice between them per request."""
