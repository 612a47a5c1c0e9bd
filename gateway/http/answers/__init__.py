"""What the client is sent: streamed answers and cut connections, replays of a record, and
the gateway's own problem+json errors (`problems`, the catalogue)."""
