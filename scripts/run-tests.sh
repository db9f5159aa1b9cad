#!/usr/bin/env bash
# The whole suite as `make test` runs it: two pytest processes side by side, then the browser
# beside the end of the quick group.
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
# beside it, the browser 2.1 min alone; 32 min in all with the installs (2026-11-29). Later
# (2026-12-02, CI): the quick group 38 min, the rest 35.5, then the browser alone.
#
# The browser tests never run beside a test that may open local slots: runs on slots add and
# remove network interfaces (their bridges), and Chromium aborts a page's requests with
# ERR_NETWORK_CHANGED when it sees that happen. Seen in CI: a browser test of the rest failed
# so while a run of the quick group (tests/api) opened its slots. So the quick group runs in
# two parts, one after the other: first the tests that may open slots (QUICK), then those
# that never do (QUICK_NO_SLOTS: the workers' tests under mpirun on loopback, no master; the
# chaos invariants' checks; the repository's rules). The browser tests start once the rest
# and the first part have ended, beside the second part (which used to end alone while the
# browser waited for it).
#
# Each process has its own MLBENCH_HOME, PostgreSQL and Redis (started by its own fixtures on
# free loopback ports), so none can see another's runs. The quick group's output is printed
# after the rest (its second part's after the browser's); the exit status fails when any
# failed. Arguments are passed to every process (e.g. `-x`).
set -u
PY=${PY:-.venv/bin/python}
QUICK=(tests/api tests/board tests/bundles tests/client tests/evaluation tests/kubernetes)
QUICK+=(tests/results tests/rules)
QUICK_NO_SLOTS=(tests/worker tests/chaos/test_invariants.py tests/test_*.py)
LAST=(tests/browser)

home=$(mktemp -d -t mlbench-test-XXXXXX)
quick_pid=""
cleanup() {
    [ -n "$quick_pid" ] && kill "$quick_pid" 2>/dev/null && wait "$quick_pid" 2>/dev/null
    rm -rf "$home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$home/quick" "$home/quick-no-slots" "$home/rest" "$home/last"

# One part of the quick group: its log in $home/NAME.log, its exit status in $home/NAME.status
# once it has ended (the pytest process ends with this shell when it is terminated).
quick_part() {
    local name=$1 child
    shift
    MLBENCH_HOME=$home/$name "$PY" -m pytest -p no:cacheprovider "$@" >"$home/$name.log" 2>&1 &
    child=$!
    trap 'kill "$child" 2>/dev/null; wait "$child"; exit 143' TERM
    wait "$child"
    echo $? >"$home/$name.part" && mv "$home/$name.part" "$home/$name.status"
}
{
    quick_part quick "$@" "${QUICK[@]}"
    quick_part quick-no-slots "$@" "${QUICK_NO_SLOTS[@]}"
} &
quick_pid=$!

ignored=()
for path in "${QUICK[@]}" "${QUICK_NO_SLOTS[@]}" "${LAST[@]}"; do ignored+=("--ignore=$path"); done
echo "== the suite without the quick group (which runs beside it: ${QUICK[*]}," \
    "then ${QUICK_NO_SLOTS[*]}) and ${LAST[*]}"
MLBENCH_HOME=$home/rest "$PY" -m pytest "$@" "${ignored[@]}"
rest=$?

while [ ! -e "$home/quick.status" ] && kill -0 "$quick_pid" 2>/dev/null; do sleep 1; done
echo
echo "== the quick group's first part (${QUICK[*]}), run beside the rest"
cat "$home/quick.log"

echo
echo "== ${LAST[*]}, beside the quick group's second part (${QUICK_NO_SLOTS[*]}), which opens no slots"
MLBENCH_HOME=$home/last "$PY" -m pytest -p no:cacheprovider "$@" "${LAST[@]}"
last=$?

wait "$quick_pid"
quick_pid=""
quick=$(cat "$home/quick.status" 2>/dev/null || echo 1)
quick_no_slots=$(cat "$home/quick-no-slots.status" 2>/dev/null || echo 1)
echo
echo "== the quick group's second part (${QUICK_NO_SLOTS[*]})"
cat "$home/quick-no-slots.log" 2>/dev/null
echo
echo "== exit status: rest $rest, quick group $quick then $quick_no_slots, ${LAST[*]} $last"
[ "$rest" -eq 0 ] && [ "$quick" -eq 0 ] && [ "$quick_no_slots" -eq 0 ] && [ "$last" -eq 0 ]
