"""Serving the application: the site on a bound socket, TLS certificates and client
certificates, per-connection limits, the access log, and one line for a rejected request."""
