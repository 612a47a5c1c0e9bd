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

# --network host: the build reaches the package index as this host does. IDEM_SMOKE_BUILT=1:
# the image is built already (deploy/image.sh builds it on stand-in bases).
if [ "${IDEM_SMOKE_BUILT:-0}" != 1 ]; then
    docker build --network host --tag idem-gateway:local .
fi
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

wait_ready() {  # ready once it reaches Redis on the compose network
"$PYTHON" - "$ADMIN" <<'PY'
import sys, time, urllib.error, urllib.request
deadline, url = time.monotonic() + 60, f"http://127.0.0.1:{sys.argv[1]}/readyz"
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            print("smoke: /readyz", answer.read().decode())
            break
    except (urllib.error.URLError, ConnectionError) as exc:
        if time.monotonic() > deadline:
            sys.exit(f"smoke: not ready within 60 s: {exc}")
    time.sleep(1)
PY
}
wait_ready

"$PYTHON" -m tests.test_readme "$PORT"

# Restarted, Redis (append-only file on its volume) still holds the record: a retry of the
# walk-through's first payment is replayed, not run again.
"${compose[@]}" restart redis gateway
wait_ready
"$PYTHON" - "$PORT" <<'PY'
import json, sys, urllib.request
request = urllib.request.Request(
    f"http://127.0.0.1:{sys.argv[1]}/payments", method="POST",
    data=b'{"amount": 100, "currency": "EUR"}',
    headers={"Idempotency-Key": "order-1001", "Content-Type": "application/json"},
)
with urllib.request.urlopen(request, timeout=10) as answer:
    body = json.loads(answer.read())
    replayed = answer.headers.get("Idempotent-Replayed")
if answer.status != 201 or replayed != "true" or body["id"] != "pay_000001":
    sys.exit(f"smoke: after a restart order-1001 got {answer.status} {replayed} {body}")
print("smoke: after restarting redis and the gateway, order-1001 is replayed")
PY
