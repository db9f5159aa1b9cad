#!/usr/bin/env bash
# The whole suite as `make test` runs it: two lanes of pytest processes side by side on the
# machine's 2 cores, the browser tests at the end of one, and the workers' tests shared out
# between both as they come free.
#
# Why two lanes: much of the suite's wall time is spent waiting (a master coming up, a run
# reaching its target), not computing, and a 2-core machine has two cores to fill. Lane A
# runs "the rest" (e2e, Slurm, local slots, images, the chaos series), then the browser
# tests. Lane B runs the quick group: the REST API on Django's test client and the
# session's PostgreSQL, bundles, the board, the client against a live server, the results'
# arithmetic, the Kubernetes driver against its emulated API server, the rules (QUICK).
# Then both lanes take the SHARED units below, one at a time, whichever lane is free first
# taking the next (a directory made with mkdir is the claim: only one lane can make it).
# The shared units are the workers' own tests under mpirun on loopback (no master, no
# slots), the chaos invariants' checks and the repository's rules, longest first, so the
# lane that ends its own part first keeps the cores busy and the two lanes end close
# together instead of one waiting for the other.
#
# The browser tests never run beside a test that may open local slots: runs on slots add and
# remove network interfaces (their bridges), and Chromium aborts a page's requests with
# ERR_NETWORK_CHANGED when it sees that happen (seen in CI: a browser test failed so while a
# run of tests/api opened its slots). So they start once the rest and QUICK have both ended;
# the SHARED units open no slots and may run beside them.
#
# Measured from a fresh clone on a 2-core machine (2026-11-26): the rest took 32 min and the
# quick group 9.6 min beside it; with Spark and task 3 (2026-11-28) the rest 39.9 min, so
# tests/worker moved to the quick group; from a fresh clone with little else running
# (2026-11-29): the rest 27.2 min, the quick group 25.7 min beside it, the browser 2.1 min,
# 32 min in all with the installs. Later, in CI (2026-12-02) the quick group 38 min and the
# rest 35.5. A fresh clone under the load of three other sessions (2026-12-02): the rest
# 52.2 min, QUICK 30.0 min beside it, then the workers' tests (a fixed second part of the
# quick group then) 34.3 min, the browser 4.9 min beside them: 64 min of tests, 74 with the
# installs, lane B ending 7 min after lane A, which stood idle. The shared units are
# that part cut so that either lane can take it (with those numbers the lanes would end
# within about 2 min of each other, near 61 min); at the end each part's lane, start and
# duration are printed, for the next measurement. With them (2026-12-02, measured one
# test at a time on the loaded machine, CPU seconds): the --amp worker run 38.8 -> 19.1,
# the MLPerf closed-ResNet run 41.9 -> 29.2, the resume test's epochs about half (two
# epochs of 2 ranks 117 -> 67), each implementation's e2e run's evaluation of 1,000 test
# images instead of 10,000 (a 2-rank run 71 -> 35). Every part collects (2,834 tests
# in all, the whole suite, none twice).
#
# Each pytest process has its own MLBENCH_HOME, PostgreSQL and Redis (started by its own
# fixtures on free loopback ports), so none can see another's runs. Lane B's logs are
# printed after lane A's parts; the exit status fails when any part failed or never ran.
# Arguments are passed to every process (e.g. `-x`).
set -u
PY=${PY:-.venv/bin/python}
QUICK=(tests/api tests/board tests/bundles tests/client tests/evaluation tests/kubernetes)
QUICK+=(tests/results tests/rules)
LAST=(tests/browser)
# The shared units, longest first (estimated from the 2026-12-02 run's slowest tests: the
# workers' other tests about 15 min, the algorithms' 11, the other implementations' 7.5,
# the rules and chaos checks 2).
ALGORITHMS=(tests/worker/test_algorithms_*.py tests/worker/test_buckets.py)
ALGORITHMS+=(tests/worker/test_diloco.py tests/worker/test_outside_algorithms.py)
FRAMEWORKS=(tests/worker/test_tensorflow_run.py tests/worker/test_spark_run.py)
FRAMEWORKS+=(tests/worker/test_flink_run.py)
worker_rest=(tests/worker)
for path in "${ALGORITHMS[@]}" "${FRAMEWORKS[@]}"; do worker_rest+=("--ignore=$path"); done
SHARED_NAMES=(worker algorithms frameworks rules)
SHARED_ARGS=("${worker_rest[*]}" "${ALGORITHMS[*]}" "${FRAMEWORKS[*]}")
SHARED_ARGS+=("tests/chaos/test_invariants.py $(echo tests/test_*.py)")
# Everything lane A's first process must leave out: what the other parts run.
ignored=()
for path in "${QUICK[@]}" tests/worker tests/chaos/test_invariants.py tests/test_*.py \
    "${LAST[@]}"; do
    ignored+=("--ignore=$path")
done

home=$(mktemp -d -t mlbench-test-XXXXXX)
lane_b=""
cleanup() {
    [ -n "$lane_b" ] && kill "$lane_b" 2>/dev/null && wait "$lane_b" 2>/dev/null
    rm -rf "$home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
begun=$(date +%s)

# One pytest process: NAME's home is $home/NAME; its output goes to the terminal (`--live`,
# lane A: in the foreground, so Ctrl-C reaches it) or to $home/NAME.log (lane B: its pytest
# ends with this lane's shell when that is terminated); its exit status goes to
# $home/NAME.status once it has ended, and a line to $home/timings (lane, name, start and
# duration in seconds).
part() {
    local lane=$1 name=$2 child start code
    shift 2
    mkdir -p "$home/$name"
    start=$(date +%s)
    if [ "${1:-}" = --live ]; then
        shift
        echo
        echo "== lane $lane, $name: $*"
        MLBENCH_HOME=$home/$name "$PY" -m pytest -p no:cacheprovider "$@"
        code=$?
    else
        MLBENCH_HOME=$home/$name "$PY" -m pytest -p no:cacheprovider "$@" >"$home/$name.log" 2>&1 &
        child=$!
        trap 'kill "$child" 2>/dev/null; wait "$child"; exit 143' TERM
        wait "$child"
        code=$?
        trap - TERM
    fi
    echo "$lane $name $((start - begun)) $(($(date +%s) - start))" >>"$home/timings"
    echo "$code" >"$home/$name.part" && mv "$home/$name.part" "$home/$name.status"
}

# Takes every shared unit no lane has claimed yet, in order, and runs it.
take_shared() {
    local lane=$1 i
    shift
    for i in "${!SHARED_NAMES[@]}"; do
        mkdir "$home/claim-${SHARED_NAMES[$i]}" 2>/dev/null || continue
        # shellcheck disable=SC2086  # the unit's paths, split on purpose
        part "$lane" "${SHARED_NAMES[$i]}" "$@" ${SHARED_ARGS[$i]}
    done
}

{
    part B quick "$@" "${QUICK[@]}"
    take_shared B "$@"
} &
lane_b=$!

part A rest --live "$@" "${ignored[@]}"

while [ ! -e "$home/quick.status" ] && kill -0 "$lane_b" 2>/dev/null; do sleep 1; done
echo
echo "== lane B: ${QUICK[*]}, run beside the rest"
cat "$home/quick.log"

part A last --live "$@" "${LAST[@]}"
take_shared A --live "$@"

wait "$lane_b"
lane_b=""
status=0
summary=""
for name in rest quick last "${SHARED_NAMES[@]}"; do
    code=$(cat "$home/$name.status" 2>/dev/null || echo "never ran")
    [ "$code" = 0 ] || status=1
    summary+="$name $code, "
done
for i in "${!SHARED_NAMES[@]}"; do
    name=${SHARED_NAMES[$i]}
    if [ -e "$home/$name.log" ]; then
        echo
        echo "== lane B, $name: ${SHARED_ARGS[$i]}"
        cat "$home/$name.log"
    fi
done
echo
echo "== the parts (lane, name, started after s, took s); $(($(date +%s) - begun)) s in all"
sort -k3 -n "$home/timings"
echo "== exit status: ${summary%, }"
exit "$status"
