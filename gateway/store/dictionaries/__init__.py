"""The zstd dictionaries format-2 records are compressed with (`gateway.core.compact`), one
file each, named by its codec byte. A number once shipped is never changed or reused: a stored
record needs that exact dictionary for as long as it is kept."""
