#!/usr/bin/env bash
# The whole suite as `make test` runs it: two pytest processes side by side, then the browser.
#
# Why two: much of the suite's wall time is spent waiting (a master coming up, a run
# reaching its target), not computing. The "quick" group below is the tests that mostly wait
# or compute little, and the workers' own tests under mpirun (no master, no slots): the REST
# API on Django's test client and the session's PostgreSQL, bundles, the board, the client
# against a live server, the results' arithmetic, the Kubernetes driver against its emulated
# API server, the chaos invariants' checks, the repository's rules. The rest (e2e, Slurm,
# local slots, images, the chaos series) keeps the foreground.
# Measured from a fresh clone on a 2-core machine (2026-11-26): the rest took 32 min and the
# quick group 9.6 min beside it. With Spark and task 3 (2026-11-28): the rest 39.9 min, the
# quick group 9.5 to 10.7 min, so tests/worker moved to the quick group (2026-11-29). Then,
# from a fresh clone with little else running: the rest 27.2 min, the quick group 25.7 min
# beside it, the browser 2.1 min alone; 32 min in all with the installs (2026-11-29).
#
# The browser tests run last, alone, once both groups have ended: runs on local slots add
# and remove network interfaces (their bridges), and Chromium aborts a page's requests with
# ERR_NETWORK_CHANGED when it sees that happen. Seen in CI: a browser test of the rest failed
# so while a run of the quick group (tests/api) opened its slots. Nothing else runs then.
#
# Each process has its own MLBENCH_HOME, PostgreSQL and Redis (started by its own fixtures on
# free loopback ports), so neither can see the other's runs. The quick group's output is
# printed after the rest; the exit status fails when any failed. Arguments are passed to
# every process (e.g. `-x`).
set -u
PY=${PY:-.venv/bin/python}
QUICK=(tests/api tests/board tests/bundles tests/client tests/evaluation tests/kubernetes)
QUICK+=(tests/results tests/rules tests/worker tests/chaos/test_invariants.py tests/test_*.py)
LAST=(tests/browser)

home=$(mktemp -d -t mlbench-test-XXXXXX)
quick_pid=""
cleanup() {
    [ -n "$quick_pid" ] && kill "$quick_pid" 2>/dev/null && wait "$quick_pid" 2>/dev/null
    rm -rf "$home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$home/quick" "$home/rest" "$home/last"

MLBENCH_HOME=$home/quick "$PY" -m pytest -p no:cacheprovider "$@" "${QUICK[@]}" \
    >"$home/quick.log" 2>&1 &
quick_pid=$!

ignored=()
for path in "${QUICK[@]}" "${LAST[@]}"; do ignored+=("--ignore=$path"); done
echo "== the suite without the quick group (which runs beside it: ${QUICK[*]}) and ${LAST[*]}"
MLBENCH_HOME=$home/rest "$PY" -m pytest "$@" "${ignored[@]}"
rest=$?

wait "$quick_pid"
quick=$?
quick_pid=""
echo
echo "== the quick group (${QUICK[*]}), run beside the rest"
cat "$home/quick.log"

echo
echo "== ${LAST[*]}, alone"
MLBENCH_HOME=$home/last "$PY" -m pytest -p no:cacheprovider "$@" "${LAST[@]}"
last=$?
echo
echo "== exit status: rest $rest, quick group $quick, ${LAST[*]} $last"
[ "$rest" -eq 0 ] && [ "$quick" -eq 0 ] && [ "$last" -eq 0 ]
