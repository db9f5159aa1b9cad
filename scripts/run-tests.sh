#!/usr/bin/env bash
# The whole suite as `make test` runs it: two pytest processes side by side.
#
# Why two: much of the suite's wall time is spent waiting (a master coming up, a run
# reaching its target), not computing. The "quick" group below is the tests that mostly wait
# or compute little: the REST API on Django's test client and the session's PostgreSQL,
# bundles, the board, the client against a live server, the results' arithmetic, the
# Kubernetes driver against its emulated API server, the chaos invariants' checks, the
# repository's rules. Few of them start worker ranks. The rest (e2e, workers under mpirun,
# Slurm, local slots, images, the chaos series, headless Chromium) keeps the foreground.
# Measured from a fresh clone on a 2-core machine (2026-11-26): the rest took 32 min and the
# quick group 9.6 min beside it. With Spark and task 3 (2026-11-28): the rest 39.9 min (Spark's
# runs about 7 of them), the quick group 9.5 to 10.7 min: the quick group has room to take
# more (tests/worker is the candidate: mpirun alone, no master, no slots).
#
# The browser tests stay with the rest: runs on local slots add and remove network
# interfaces (their bridges), and Chromium aborts a page's requests with ERR_NETWORK_CHANGED
# when it sees that happen (seen: a browser test in the quick group failed so beside the
# rest's many runs). The quick group's own few runs on slots (tests/api, tests/client) can
# still meet a browser test of the rest; their tests check slots, so they keep them.
#
# Each process has its own MLBENCH_HOME, PostgreSQL and Redis (started by its own fixtures on
# free loopback ports), so neither can see the other's runs. The quick group's output is
# printed after the rest; the exit status fails when either failed. Arguments are passed to
# both processes (e.g. `-x`).
set -u
PY=${PY:-.venv/bin/python}
QUICK=(tests/api tests/board tests/bundles tests/client tests/evaluation)
QUICK+=(tests/kubernetes tests/results tests/rules tests/chaos/test_invariants.py tests/test_*.py)

home=$(mktemp -d -t mlbench-test-XXXXXX)
quick_pid=""
cleanup() {
    [ -n "$quick_pid" ] && kill "$quick_pid" 2>/dev/null && wait "$quick_pid" 2>/dev/null
    rm -rf "$home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$home/quick" "$home/rest"

MLBENCH_HOME=$home/quick "$PY" -m pytest -p no:cacheprovider "$@" "${QUICK[@]}" \
    >"$home/quick.log" 2>&1 &
quick_pid=$!

ignored=()
for path in "${QUICK[@]}"; do ignored+=("--ignore=$path"); done
echo "== the suite without the quick group (which runs beside it: ${QUICK[*]})"
MLBENCH_HOME=$home/rest "$PY" -m pytest "$@" "${ignored[@]}"
rest=$?

wait "$quick_pid"
quick=$?
quick_pid=""
echo
echo "== the quick group (${QUICK[*]}), run beside the rest"
cat "$home/quick.log"
echo
echo "== exit status: rest $rest, quick group $quick"
[ "$rest" -eq 0 ] && [ "$quick" -eq 0 ]
