#!/bin/sh
# The Python install of the mlbench images, run by Dockerfile.master and Dockerfile.worker
# (and by scripts/k8s/check-image-install.sh without Docker). The same steps as the
# virtualenv of `make install`: torch==2.13.0 first (workers only), then the component's
# extra of setup.py, every version pinned by constraints.txt.
#
# usage: install-python.sh VENV master|worker [cpu|cuda]   (run in the source directory)
set -eu

venv="$1"
component="$2"
device="${3:-cpu}"

python3 -m venv "$venv"
pip="$venv/bin/python -m pip"
$pip install -q --upgrade pip
case "$component" in
master)
    $pip install -q -c constraints.txt '.[master]'
    ;;
worker)
    case "$device" in
    # PyPI's Linux torch is the CUDA build (several GB); the CPU build has its own index.
    cpu) torch_index="--extra-index-url ${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" ;;
    cuda) torch_index="" ;;
    *) echo "device must be cpu or cuda, not $device" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    $pip install -q -c constraints.txt $torch_index torch==2.13.0
    $pip install -q -c constraints.txt '.[worker]'
    ;;
*)
    echo "component must be master or worker, not $component" >&2
    exit 2
    ;;
esac
