# idem-gateway on a slim Python, run by an unprivileged user.
# The config is mounted at /etc/idem-gateway/gateway.yaml (see docker-compose.yml).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY lua ./lua
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin idem \
    && mkdir -p /etc/idem-gateway

USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 9090

# The admin listener's liveness endpoint; the slim image has no curl, Python has urllib.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${IDEM_ADMIN_PORT:-9090}/healthz', timeout=2)"

ENTRYPOINT ["idem-gateway"]
CMD ["--config", "/etc/idem-gateway/gateway.yaml"]
