"""What the gateway says about itself: structured logs, the request log line, Prometheus
metrics and OpenTelemetry traces."""
