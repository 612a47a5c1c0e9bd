"""Operating the gateway: the admin listener and its console, operators' key work, config
reloads, listening sockets, GC tuning, and the supervisor of `--workers N`."""
