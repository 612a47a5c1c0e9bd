"""The config: its pydantic models, loading and checking a YAML file, units, TLS settings,
and what a reload may change."""
