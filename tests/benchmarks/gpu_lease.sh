#!/usr/bin/env bash
# Every GPU check (shared/GPU.md) in one command, for a GPU machine lent for minutes.
#
# Run from the repository's root on the lent machine, with $OUT a folder whose files come
# back. That machine has no network and its own Python (3.12, with a CUDA build of torch,
# numpy, onnxruntime); what the project needs beyond it travels as wheels in .whl/, which
# scripts/gpu-wheels.sh downloads here beforehand for that Python, dropping the wheels the
# machine already has. The machine's python3 is itself a virtualenv, whose packages a new
# venv's --system-site-packages would not see: a venv of its own gets the wheels (mpirun
# lands in its bin/, where the local driver and the benchmarks look) and a .pth file adds the
# machine's packages after them, so the workers run the machine's CUDA torch and the
# embedded master runs as `make run` runs it.
#
# From this machine, with the device tool: scripts/gpu-wheels.sh, then run
# `bash tests/benchmarks/gpu_lease.sh` with carry [".whl"] and a timeout of 600 s.
#
# 1. tests/benchmarks/bench_gpu.py: the worker's checks, each with a time limit of its own.
# 2. The default benchmark through an embedded master with one GPU (`mlbench run --gpu`).
set -u
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
start=$(date +%s)
say() { echo "[$(($(date +%s) - start)) s] $*"; }

python3 -m venv --without-pip /tmp/venv
image_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
venv_site=$(/tmp/venv/bin/python -c 'import site; print(site.getsitepackages()[0])')
echo "$image_site" >"$venv_site/machine-packages.pth"
python3 -m pip install -q --no-index --no-deps --no-compile --ignore-installed \
    --prefix /tmp/venv .whl/*.whl
export PATH=/tmp/venv/bin:$PATH OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
printf '#!/tmp/venv/bin/python\nimport sys\nfrom mlbench_worker.client.cli import main\nsys.exit(main())\n' \
    >/tmp/venv/bin/mlbench  # the console script `pip install` would write
chmod +x /tmp/venv/bin/mlbench
# (pip --prefix wrote the wheels' own scripts for the machine's python3, which lacks Django:
# harmless, since the master starts its processes with sys.executable, the venv's python.)
python -c 'import torch, mpi4py.MPI as M, django; print("torch", torch.__version__,
    torch.cuda.is_available(), M.Get_library_version().split(",")[0], "django", django.__version__)'
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
say "installed; the worker's checks"

# At most 8 files come back: the sections share gpu-results.json, and the table is copied.
MLBENCH_BENCH_DIR=/tmp/bench python tests/benchmarks/bench_gpu.py --out "$OUT" ${BENCH_ARGS:-} \
    2>&1 | tee "$OUT/bench.log"
cp /tmp/bench/gpu.md "$OUT/" 2>/dev/null

# The device tool stops the whole command at 600 s: the master's run only where it fits.
if [ $(($(date +%s) - start)) -gt 460 ]; then say "no time left for the embedded master"; exit; fi
say "the default benchmark through an embedded master"
export MLBENCH_HOME=/tmp/mlbench-home MLBENCH_MAX_GPUS=1 MLBENCH_LOCAL_NETWORK=off
{
    timeout 45 mlbench up --detach
    timeout "${EMBEDDED_SECONDS:-80}" mlbench run gpu-default --task resnet20-cifar10 \
        --workers 1 --cpus 4 --gpu --dataset synthetic --time-budget 20 --wait
    mlbench show 1
    mlbench down
} >"$OUT/embedded.log" 2>&1
tail -40 "$OUT/embedded.log"
say "done"
