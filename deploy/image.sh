#!/usr/bin/env bash
# Build the container image from the Dockerfile and try it as a user would, on a machine that
# reaches no image registry: the image's walk-through (README.md), then the compose stack
# (deploy/smoke.sh). Needs root and Debian's packages (docker.io, debootstrap, docker-compose:
# installed here when missing).
#
# The Dockerfile's base images cannot be pulled, so stand-ins are made under the same names
# with an `idem-standin/` prefix, and the Dockerfile's FROM lines alone are rewritten to them:
#   python:X.Y-slim  Debian bookworm (debootstrap), with this machine's CPython X.Y (pyenv's)
#                    in /usr/local as the official image has it, and the host's CA bundle
#   python:X.Y       the same with gcc and libc6-dev, as the official image has a compiler
#   redis:7-alpine   the slim one with Debian's redis-server (compose's Redis)
# A dockerd of its own serves them (vfs storage, no iptables, a private socket), stopped by its
# PID at the end. The stand-ins and the engine's storage are kept in IDEM_IMAGE_WORK
# (/var/tmp/idem-image) between runs; a first run takes some minutes more.
#
# PYTHON (default: python3) runs the walk-through; it needs the test environment
# (pip install -e '.[test]').
#
# `deploy/image.sh --inputs` prints one digest of what the image is made from; .ci/run builds
# the image when it differs from deploy/image.tested, which records the last run that passed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --inputs ]; then
    sha256sum Dockerfile .dockerignore pyproject.toml setup.py build_backend.py MANIFEST.in \
        deploy/constraints.txt deploy/image.sh deploy/smoke.sh docker-compose.yml config/docker.yaml \
        | sha256sum | cut -d' ' -f1
    exit 0
fi
WORK=${IDEM_IMAGE_WORK:-/var/tmp/idem-image}
PYTHON=${PYTHON:-python3}
say() { echo "image: $*"; }
fail() { echo "image: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, dockerd)"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-compose >/dev/null || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq >/dev/null && apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The Python the image's FROM lines name, taken from this machine's pyenv.
version=$(sed -nE 's/^FROM python:([0-9]+\.[0-9]+)-slim.*/\1/p' Dockerfile)
[ -n "$version" ] || fail "the Dockerfile's runtime stage is not FROM python:X.Y-slim"
prefix=$(ls -d "$(pyenv root 2>/dev/null || echo /root/.pyenv)"/versions/"$version".* 2>/dev/null | tail -n 1)
[ -x "$prefix/bin/python$version" ] || fail "no CPython $version here (pyenv install $version)"

mkdir -p "$WORK/run"
# The engine, on a socket of its own.
dockerd --data-root "$WORK/docker" --exec-root "$WORK/run/exec" --pidfile "$WORK/run/dockerd.pid" \
    --host "unix://$WORK/run/docker.sock" --storage-driver vfs --iptables=false --bridge=none \
    >"$WORK/dockerd.log" 2>&1 &
engine=$!
export DOCKER_HOST="unix://$WORK/run/docker.sock" DOCKER_BUILDKIT=0
stop() {
    docker rm --force idem-image-gateway idem-image-upstream >/dev/null 2>&1 || true
    kill "$engine" 2>/dev/null && wait "$engine" 2>/dev/null || true
}
trap stop EXIT
for _ in $(seq 100); do docker info >/dev/null 2>&1 && break; sleep 0.3; done
docker info >/dev/null 2>&1 || fail "dockerd did not start ($WORK/dockerd.log)"

# A stand-in base: a root file system made by `make` (given its folder), imported under a name.
standin() {
    local name=$1 make=$2 root="$WORK/rootfs-${1//[\/:]/-}"
    docker image inspect "$name" >/dev/null 2>&1 && return
    say "making the stand-in $name"
    rm -rf "$root"
    "$make" "$root"
    tar -C "$root" -c . | docker import \
        --change "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change "ENV LANG=C.UTF-8" \
        --change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
        --change 'CMD ["python3"]' - "$name" >/dev/null
    rm -rf "$root"
}
slim_root() {
    debootstrap --variant=minbase \
        --include=ca-certificates,passwd,libssl3,libffi8,libsqlite3-0,zlib1g,libbz2-1.0,liblzma5,libexpat1,libncursesw6,libreadline8,libgdbm6,libuuid1 \
        bookworm "$1" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 \
        || fail "debootstrap failed ($WORK/debootstrap.log)"
    # CPython in /usr/local, as the official images install it (its tests left out).
    (cd "$prefix" && tar -c --exclude="lib/python$version/test" --exclude=__pycache__ bin include lib share) \
        | tar -x -C "$1/usr/local"
    ln -sf "python$version" "$1/usr/local/bin/python3"
    ln -sf "python$version" "$1/usr/local/bin/python"
    chroot "$1" ldconfig
    cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"
    rm -rf "$1/var/cache/apt/archives"/*.deb "$1/var/lib/apt/lists"/*
}
with_packages() {  # the slim root with Debian packages added: with_packages ROOT PACKAGE...
    local root=$1
    shift
    slim_root "$root"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    chroot "$root" apt-get update -qq >>"$WORK/apt.log" 2>&1
    chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "$@" >>"$WORK/apt.log" 2>&1 || fail "apt-get failed ($WORK/apt.log)"
    rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/*
}
build_root() { with_packages "$1" gcc libc6-dev; }
redis_root() { with_packages "$1" redis-server redis-tools && mkdir -p "$1/data"; }
standin "idem-standin/python:$version-slim" slim_root
standin "idem-standin/python:$version" build_root
standin "redis:7-alpine" redis_root

# The image, from the Dockerfile with its FROM lines alone rewritten.
sed -E 's#^FROM (python:[^ ]+)#FROM idem-standin/\1#' Dockerfile >"$WORK/Dockerfile"
diff <(grep -v '^FROM ' Dockerfile) <(grep -v '^FROM ' "$WORK/Dockerfile") >/dev/null \
    || fail "rewriting the FROM lines changed other lines"
say "building the image"
started=$SECONDS
docker build --network host --file "$WORK/Dockerfile" --tag idem-gateway:local . >"$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/build.log" >&2; fail "the image did not build ($WORK/build.log)"; }
say "built in $((SECONDS - started)) s"

run() { local entry=$1; shift; docker run --rm --entrypoint "$entry" idem-gateway:local "$@"; }
said=$(run idem-gateway --version) && echo "$said"
grep -q 'compiled (mypyc)' <<<"$said" || fail "the image's gateway is not the compiled build"
# As root, so that root's own caches are looked at too.
docker run --rm --user 0 --entrypoint python idem-gateway:local -c '
import importlib.util, os, pathlib, shutil, sys
found = [n for n in ("gcc", "cc") if shutil.which(n)]
found += [m for m in ("mypy", "mypyc", "setuptools") if importlib.util.find_spec(m)]
found += [str(p) for p in (pathlib.Path.home() / ".cache/pip", pathlib.Path("/root/.cache/pip")) if p.exists()]
found += [str(p) for p in pathlib.Path("/opt/idem-gateway").rglob("*.egg-info")]
sys.exit(f"the runtime image holds {found}" if found else 0)
' || fail "the runtime stage is not clean"
[ "$(run id -u)" = 10001 ] || fail "the image does not run as uid 10001"
size=$(docker image inspect --format '{{.Size}}' idem-gateway:local)
venv=$(run du -sm /opt/idem-gateway | cut -f1)
say "$((size / 1000000)) MB on the stand-in base; its virtual environment: $venv MB"

# README's "Run it in a container", then its curl walk-through.
for port in 8080 9090 9000; do
    ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || fail "port $port is taken: the walk-through needs it"
done
docker run --detach --name idem-image-upstream --network host --entrypoint python \
    idem-gateway:local -m gateway.demo_upstream --port 9000 >/dev/null
docker run --detach --name idem-image-gateway --network host -e DEMO_UPSTREAM=http://127.0.0.1:9000 \
    -v "$PWD/config/docker.yaml:/etc/idem-gateway/gateway.yaml:ro" idem-gateway:local >/dev/null
deadline=$((SECONDS + 90))
until [ "$(docker inspect --format '{{.State.Health.Status}}' idem-image-gateway)" = healthy ]; do
    [ $SECONDS -lt $deadline ] || { docker logs idem-image-gateway >&2; fail "not healthy within 90 s"; }
    sleep 1
done
"$PYTHON" -m tests.test_readme 8080 || { docker logs idem-image-gateway >&2; fail "the walk-through failed"; }
docker rm --force idem-image-gateway idem-image-upstream >/dev/null
say "walk-through passed"

# The compose stack, with the image just built.
PYTHON=$PYTHON IDEM_SMOKE_BUILT=1 deploy/smoke.sh
say "OK"
