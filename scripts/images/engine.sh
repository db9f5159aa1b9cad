#!/usr/bin/env bash
# A private Docker engine for building and trying the mlbench images on a machine that has
# no running engine (CI, this project's test machines). It never touches the host's network:
# no iptables rules, no bridge, no forwarding or masquerading; containers and builds use the
# host network. Its images stay in a data root outside the clone, so a second build is
# cached; its socket, pid file and exec root are its own, so it never meets another engine.
#
# usage: engine.sh start|stop|status|env
#   start  installs docker.io (Debian) when dockerd is missing, starts the engine unless it
#          already answers, and prints DOCKER_HOST=...; exit 0 once it answers
#   stop   stops the engine this script started (by its pid file), and nothing else
#   env    prints DOCKER_HOST=... for `eval`
# Settings: MLBENCH_DOCKER_ROOT (data root, default /var/lib/mlbench-docker),
#           MLBENCH_DOCKER_RUN  (socket, pid file, exec root; default /run/mlbench-docker)
set -euo pipefail

root="${MLBENCH_DOCKER_ROOT:-/var/lib/mlbench-docker}"
run="${MLBENCH_DOCKER_RUN:-/run/mlbench-docker}"
sock="$run/docker.sock"
pidfile="$run/dockerd.pid"
log="$run/dockerd.log"
here="$(cd "$(dirname "$0")/.." && pwd)"
export DOCKER_HOST="unix://$sock"

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

find_dockerd() {
    command -v dockerd 2>/dev/null || { [ -x /usr/sbin/dockerd ] && echo /usr/sbin/dockerd; }
}

start() {
    if answers; then
        echo "DOCKER_HOST=$DOCKER_HOST"
        return 0
    fi
    local dockerd
    dockerd="$(find_dockerd || true)"
    if [ -z "$dockerd" ]; then
        echo "dockerd is not installed: installing Debian's docker.io" >&2
        bash "$here/apt-install.sh" docker.io >&2
        dockerd="$(find_dockerd || true)"
        [ -n "$dockerd" ] || { echo "docker.io installed no dockerd: install a Docker engine" >&2; exit 1; }
    fi
    command -v docker >/dev/null || { echo "no docker client on PATH: apt-get install docker.io" >&2; exit 1; }
    if [ "$(id -u)" -ne 0 ]; then
        echo "starting a private Docker engine needs root; or set DOCKER_HOST to a running engine" >&2
        exit 1
    fi
    mkdir -p "$root" "$run/exec"
    # containerd ships with docker.io; dockerd starts its own when none is given.
    setsid "$dockerd" \
        --data-root "$root" --exec-root "$run/exec" --pidfile "$pidfile" \
        -H "unix://$sock" --storage-driver overlay2 \
        --iptables=false --ip6tables=false --bridge=none --ip-forward=false --ip-masq=false \
        --containerd-namespace mlbench --containerd-plugins-namespace mlbench-plugins \
        >"$log" 2>&1 </dev/null &
    for _ in $(seq 1 150); do
        if answers; then
            echo "DOCKER_HOST=$DOCKER_HOST"
            return 0
        fi
        kill -0 $! 2>/dev/null || break
        sleep 0.2
    done
    echo "the Docker engine did not start; its log ($log) ends:" >&2
    tail -n 20 "$log" >&2 || true
    exit 1
}

stop() {
    [ -s "$pidfile" ] || { echo "no engine started by this script (no $pidfile)"; return 0; }
    local pid
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$pidfile"
    echo "engine stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) if answers; then echo "running: DOCKER_HOST=$DOCKER_HOST"; else echo "not running"; exit 1; fi ;;
env) echo "DOCKER_HOST=$DOCKER_HOST" ;;
*) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
