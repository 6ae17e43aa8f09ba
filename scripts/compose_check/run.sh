#!/usr/bin/env bash
# The compose check (issue 38): run the project's docker-compose.yml and Dockerfile as a user would, on this machine.
#
#   scripts/compose_check/run.sh            the whole check (tests/integration/test_compose_demo.py runs it)
#
# 1. Installs Debian's docker.io, docker-compose and debootstrap with apt-get if missing (root only; else it fails).
# 2. Uses the Docker engine of DOCKER_HOST or /var/run/docker.sock if one answers, else starts dockerd on a private
#    socket and data root under ~/.cache/arbiter-compose-check/ and stops it by its PID at the end. Images stay in that data root,
#    so a second run builds only what changed.
# 3. Builds the base images no registry gives here, under the names the project's files use (a label records the
#    stand-in's content hash; a changed stand-in is rebuilt): debian:bookworm-slim by debootstrap,
#    python:3.11-slim-bookworm (Debian's Python 3.11 in a venv at /usr/local) and apache/kafka:4.1.1 (Kafka's jars
#    from Maven Central, the ones `arbiter kafka fetch` caches, and a start script honouring KAFKA_*).
# 4. Runs flow.py: the README's Docker section, literally, under a project name of its own, with Debian's
#    docker-compose 1.29 and then with Compose v2 (COMPOSE_V2_VERSION), built once from its Go module with the
#    machine's Go toolchain into ~/.cache/arbiter-compose-check/bin (no Compose v2 binary or Debian package can be had here).
# One check per machine at a time (a lock in /tmp): two private engines would share the docker0 bridge.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/scripts/compose_check
# Machine-wide, like pip's and Maven's caches: a fresh clone (CI) reuses the images an earlier check built.
WORK=${COMPOSE_CHECK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/arbiter-compose-check}
mkdir -p "$WORK"

say() { echo "compose-check: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

exec 9>/tmp/arbiter-compose-check.lock
flock -w 3600 9 || die "another compose check holds /tmp/arbiter-compose-check.lock"

# --- 1. packages ------------------------------------------------------------------------------------------------
need_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    || die "needs ${missing[*]} (Debian packages) and root to run dockerd; run as root or install them"
  say "installing ${missing[*]} with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; } \
    || die "could not install ${missing[*]} with apt-get"
}
need_packages
# Debian's client (a newer docker CLI elsewhere on PATH would work too, but this is the one the packages give).
DOCKER=/usr/bin/docker; [ -x "$DOCKER" ] || DOCKER=$(command -v docker)

# --- 2. engine --------------------------------------------------------------------------------------------------
DOCKERD_PID=""
stop_engine() {
  [ -n "$DOCKERD_PID" ] || return 0
  say "stopping the private dockerd (pid $DOCKERD_PID)"
  kill "$DOCKERD_PID" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$DOCKERD_PID" 2>/dev/null || true
  DOCKERD_PID=""
}
trap stop_engine EXIT
trap 'exit 130' INT TERM

if [ -z "${DOCKER_HOST:-}" ] && [ -S /var/run/docker.sock ] && "$DOCKER" -H unix:///var/run/docker.sock info >/dev/null 2>&1; then
  export DOCKER_HOST=unix:///var/run/docker.sock
fi
if [ -n "${DOCKER_HOST:-}" ]; then
  "$DOCKER" info >/dev/null 2>&1 || die "DOCKER_HOST=$DOCKER_HOST does not answer"
  say "using the running engine at $DOCKER_HOST"
else
  [ "$(id -u)" = 0 ] || die "no Docker engine answers and starting one needs root"
  sock=$WORK/docker.sock
  # containerd's sockets live under the exec root: a short path (unix socket paths are limited to 108 bytes).
  exec_root=/tmp/arbiter-cc-exec
  old=$(cat "$WORK/dockerd.pid" 2>/dev/null || true)
  if [ -n "$old" ] && tr '\0' ' ' <"/proc/$old/cmdline" 2>/dev/null | grep -q -- "--data-root $WORK/docker "; then
    say "stopping the dockerd an interrupted check left running (pid $old, data root $WORK/docker)"
    DOCKERD_PID=$old; stop_engine
  fi
  rm -f "$sock"
  say "starting a private dockerd (socket $sock, data root $WORK/docker)"
  # A session of its own: a signal to the check's process group (a timeout) must not stop the engine before the
  # flow's `down -v` has run; the EXIT trap stops it by its PID.
  setsid dockerd --host "unix://$sock" --data-root "$WORK/docker" --exec-root "$exec_root" \
    --pidfile "$WORK/dockerd.pid" >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  export DOCKER_HOST=unix://$sock
  for _ in $(seq 120); do "$DOCKER" info >/dev/null 2>&1 && break; kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  "$DOCKER" info >/dev/null 2>&1 || { tail -20 "$WORK/dockerd.log" >&2; die "dockerd did not start"; }
fi

# --- 3. base images ---------------------------------------------------------------------------------------------
stamp() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16; }
have() { [ "$("$DOCKER" image inspect -f '{{index .Config.Labels "arbiter.standin"}}' "$1" 2>/dev/null)" = "$2" ]; }

# This machine's own extra CA certificates (an egress proxy that intercepts TLS, as here): the stand-in base image
# carries them where Debian's ca-certificates adds them to every store (the system bundle pip uses, Java's cacerts),
# so the project's Dockerfile fetches from PyPI and Maven Central here unchanged. Not needed on a user's machine.
EXTRA_CAS=/usr/local/share/ca-certificates
base_id() { "$DOCKER" image inspect -f '{{.Id}}' debian:bookworm-slim | cut -c8-23; }

debian_image() {
  local tag=debian:bookworm-slim want
  want=$( { echo "bookworm minbase v1"; cat "$EXTRA_CAS"/*.crt 2>/dev/null || true; } | sha256sum | cut -c1-16)
  have "$tag" "$want" && return
  local mirror; mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  say "building $tag by debootstrap from $mirror ($(elapsed))"
  local rootfs=$WORK/rootfs; rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  mkdir -p "$rootfs$EXTRA_CAS"; cp "$EXTRA_CAS"/*.crt "$rootfs$EXTRA_CAS/" 2>/dev/null || true
  tar -C "$rootfs" -c . | "$DOCKER" import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL arbiter.standin=$want" - "$tag" >/dev/null
  rm -rf "$rootfs"
}

python_image() {
  local tag=python:3.11-slim-bookworm want; want=$(stamp "$HERE/python")-$(base_id)
  have "$tag" "$want" && return
  say "building $tag from Debian's python3.11 ($(elapsed))"
  "$DOCKER" build -q --label "arbiter.standin=$want" -t "$tag" "$HERE/python" >/dev/null
}

kafka_image() {
  local tag=apache/kafka:4.1.1 ctx=$WORK/kafka-context
  local jars=$ROOT/.cache/jars/kafka
  if [ ! -f "$jars/.complete" ]; then
    say "fetching Kafka's jars (arbiter kafka fetch)"
    "$ROOT/dev" setup >/dev/null
  fi
  local tools=$WORK/kafka-tools
  if [ ! -f "$tools/kafka-tools-4.1.1.jar" ]; then
    # The healthcheck's kafka-broker-api-versions.sh runs a class of kafka-tools, which the broker does not need.
    mkdir -p "$tools"
    mvn -q dependency:copy -Dartifact=org.apache.kafka:kafka-tools:4.1.1 -DoutputDirectory="$tools" >/dev/null \
      || die "could not fetch org.apache.kafka:kafka-tools:4.1.1 from Maven Central"
  fi
  rm -rf "$ctx"; mkdir -p "$ctx/libs"
  cp -a "$HERE/kafka/." "$ctx/"
  cp "$jars"/*.jar "$tools"/*.jar "$ctx/libs/"
  local want; want=$(stamp "$ctx")-$(base_id)
  if ! have "$tag" "$want"; then
    say "building $tag from Kafka 4.1.1's jars ($(elapsed))"
    "$DOCKER" build -q --label "arbiter.standin=$want" -t "$tag" "$ctx" >/dev/null
  fi
  rm -rf "$ctx"
}

COMPOSE_V2_VERSION=v2.29.7
compose_v2() {
  local bin=$WORK/bin/docker-compose-$COMPOSE_V2_VERSION
  if [ ! -x "$bin" ]; then
    local go; go=$(command -v go || echo /usr/local/go/bin/go)
    [ -x "$go" ] || die "Compose v2 is built from its Go module here, and no Go toolchain was found"
    say "building Compose $COMPOSE_V2_VERSION from its Go module ($(elapsed))"
    local mod=$WORK/compose-v2-module; rm -rf "$mod"; mkdir -p "$mod" "$WORK/bin"
    printf 'module arbiter.local/composev2\n\ngo 1.22\n' >"$mod/go.mod"
    (cd "$mod" && GOFLAGS=-buildvcs=false "$go" get "github.com/docker/compose/v2/cmd@$COMPOSE_V2_VERSION" \
       && GOFLAGS=-buildvcs=false "$go" build -o "$bin.partial" \
            -ldflags "-X github.com/docker/compose/v2/internal.Version=$COMPOSE_V2_VERSION" github.com/docker/compose/v2/cmd) \
       >"$WORK/compose-v2-build.log" 2>&1 || { tail -20 "$WORK/compose-v2-build.log" >&2; die "building Compose v2 failed"; }
    mv "$bin.partial" "$bin"; rm -rf "$mod"
  fi
  echo "$bin"
}

# Compose v2's build (CPU, the Go toolchain) overlaps the image builds (mostly downloads and apt).
compose_v2 >"$WORK/compose-v2.path" &
v2_job=$!
debian_image
python_image
kafka_image
say "base images ready ($(elapsed))"
wait "$v2_job" || die "Compose v2 is not available (see above)"
V2=$(cat "$WORK/compose-v2.path")

# --- 4. the README's Docker section -----------------------------------------------------------------------------
PY=${PYTHON:-$ROOT/.venv/bin/python}; [ -x "$PY" ] || PY=python3
say "the README's flow with Debian's docker-compose $(docker-compose version --short 2>/dev/null) ($(elapsed))"
"$PY" "$HERE/flow.py" --docker "$DOCKER" --compose docker-compose
say "the README's flow with Compose $("$V2" version --short) ($(elapsed))"
"$PY" "$HERE/flow.py" --docker "$DOCKER" --compose "$V2"
say "passed ($(elapsed))"
