#!/usr/bin/env bash
# Build the image, start docker-compose.yml's stack (gateway, Redis, demo upstream), run
# README's curl walk-through against it, and tear the stack down again (volumes included).
# Needs a Docker engine, compose v2 (`docker compose`) or v1 (`docker-compose`), and the
# repository's Python environment (pip install -e '.[test]') for the walk-through.
# IDEM_PUBLIC_PORT / IDEM_ADMIN_PUBLISHED choose the host ports (default 8080 / 9090).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v .venv/bin/python || command -v python3)}
PORT=${IDEM_PUBLIC_PORT:-8080}
ADMIN=${IDEM_ADMIN_PUBLISHED:-9090}
export IDEM_PUBLIC_PORT=$PORT IDEM_ADMIN_PUBLISHED=$ADMIN
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-idem-smoke}

if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null; then
    compose=(docker-compose)
else
    echo "smoke: neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 2
fi

down() { "${compose[@]}" down --volumes --remove-orphans >/dev/null 2>&1 || true; }
trap down EXIT
down  # a stack left over from an interrupted run

# --network host: the build reaches the package index as this host does.
docker build --network host --tag idem-gateway:local .
"${compose[@]}" up --detach

# Healthy once the image's HEALTHCHECK has passed against the admin listener.
container=$("${compose[@]}" ps -q gateway)
deadline=$((SECONDS + 120))
until [ "$(docker inspect --format '{{.State.Health.Status}}' "$container")" = healthy ]; do
    if [ $SECONDS -ge $deadline ]; then
        echo "smoke: the gateway did not become healthy within 120 s" >&2
        "${compose[@]}" logs --no-color >&2
        exit 1
    fi
    sleep 1
done
echo "smoke: gateway healthy ($("${compose[@]}" ps -q | wc -l) containers up)"

# Ready once it reaches Redis on the compose network.
"$PYTHON" - "$ADMIN" <<'PY'
import json, sys, time, urllib.error, urllib.request
deadline, url = time.monotonic() + 60, f"http://127.0.0.1:{sys.argv[1]}/readyz"
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            print("smoke: /readyz", answer.read().decode())
            break
    except urllib.error.HTTPError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"smoke: not ready within 60 s: {exc.code} {exc.read().decode()}")
    time.sleep(1)
PY

"$PYTHON" -m tests.test_readme "$PORT"
