#!/bin/bash
# Without Docker: run the images' Python install (install-python.sh, exactly as the
# Dockerfiles do) in scratch virtualenvs, from a copy of only what the Dockerfiles COPY,
# then check what each image needs at run time. usage: scripts/k8s/check-image-install.sh [DIR]
set -euo pipefail

here="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work/src"
cd "$here"
cp -r setup.py constraints.txt README.rst package.json package-lock.json mlbench_master mlbench_worker "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
cd "$work/src"

echo "== master: install-python.sh master"
time bash "$here/scripts/k8s/install-python.sh" "$work/master" master
if "$work/master/bin/python" -c "import torch" 2>/dev/null; then
    echo "the master environment must not contain torch" >&2
    exit 1
fi
echo "== master: collectstatic and the gunicorn application"
(
    export PATH="$work/master/bin:$PATH" DJANGO_SETTINGS_MODULE=mlbench_master.settings
    export MLBENCH_HOME="$work/home" MLBENCH_STATIC_ROOT="$work/static"
    export MLBENCH_NODE_MODULES="$here/node_modules" MLBENCH_SECRET_KEY=check-only
    django-admin collectstatic --noinput -v 0
    test -n "$(ls "$work/static")"
    cd /tmp && python - <<PY
import sys
sys.path.insert(0, "$here/scripts/k8s")
import master_wsgi
print("gunicorn app:", type(master_wsgi.application).__name__)
PY
    command -v gunicorn
)

echo "== worker: install-python.sh worker cpu"
time bash "$here/scripts/k8s/install-python.sh" "$work/worker" worker cpu
(
    export PATH="$work/worker/bin:$PATH"
    cd /tmp
    python -c "import torch, mpi4py.MPI as M; print('torch', torch.__version__, '| cuda', torch.version.cuda, '|', M.Get_library_version().splitlines()[0])"
    command -v mpirun prted
    python -m mlbench_worker --help | head -3
)
echo "== both environments installed and checked in $work"
