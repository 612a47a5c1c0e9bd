"""The public listener: the aiohttp application (`app`) and its three groups: `server`
(sockets, TLS, connection limits), `flow` (a request's way through the key's state
machine) and `answers` (what the client is sent)."""
