#!/bin/sh
# Entry point of the mlbench master image. The helm chart runs one container per role:
#   migrate    (init container) database migrations, then the admin account from the Secret
#   web        the dashboard and REST API (gunicorn, static files through WhiteNoise) on
#              port MLBENCH_WEB_PORT (8000 unless set; the chart sets 80, see values.yaml)
#   rq-runs    the RQ worker for run jobs (django-rq's rqworker on queue "runs"); first
#              settles runs a previous master left active
#   collector  records the workers' resource use every MLBENCH_COLLECT_INTERVAL seconds
#   stop-runs  the rq-runs container's preStop hook: the runs in progress are stopped and
#              marked FAILED before the pod ends; what it did goes to the container's log
# Anything else is run as a command (e.g. `docker run IMAGE django-admin shell`).
set -eu

case "${1:-web}" in
migrate)
    # PostgreSQL may still be starting when the pod does: retry for about five minutes.
    tries=0
    until django-admin migrate --noinput; do
        tries=$((tries + 1))
        if [ "$tries" -ge 60 ]; then
            echo "the database did not answer: giving up (check DATABASE_URL)" >&2
            exit 1
        fi
        echo "waiting for the database (attempt $tries)" >&2
        sleep 5
    done
    exec django-admin mlbench_admin
    ;;
web)
    exec gunicorn master_wsgi:application \
        --pythonpath /opt/mlbench \
        --bind "0.0.0.0:${MLBENCH_WEB_PORT:-8000}" \
        --workers "${GUNICORN_WORKERS:-2}" \
        --threads 4 \
        --timeout 120 \
        --worker-tmp-dir /dev/shm \
        --access-logfile -
    ;;
rq-runs)
    python -m mlbench_master reconcile || echo "reconcile failed; runs left active stay so" >&2
    exec python -m mlbench_master rqworker runs
    ;;
rq)
    # The worker for queue "default" of earlier charts: nothing was ever put on it.
    echo "the 'rq' role is gone (it served an empty queue): upgrade the chart; rq-runs runs the jobs" >&2
    exit 64
    ;;
collector)
    exec python -m mlbench_master collector --interval "${MLBENCH_COLLECT_INTERVAL:-10}"
    ;;
stop-runs)
    # A hook's output is not kept by Kubernetes: write it where the container's own goes.
    if [ -w /proc/1/fd/1 ]; then
        exec python -m mlbench_master stop-runs >/proc/1/fd/1 2>&1
    fi
    exec python -m mlbench_master stop-runs
    ;;
*)
    exec "$@"
    ;;
esac
