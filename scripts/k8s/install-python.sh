#!/bin/sh
# The Python install of the mlbench images, run by Dockerfile.master and Dockerfile.worker
# (and by scripts/k8s/check-image-install.sh without Docker). The same steps as the
# virtualenv of `make install`: torch==2.13.0 first (workers only), then the component's
# extra of setup.py, every version pinned by constraints.txt.
#
# pip is not quiet: its notes on indexes it could not reach (refused certificates,
# connection errors) are what scripts/images/build.py reads to say what to fix.
# usage: install-python.sh VENV master|worker|torch|flink [cpu|cuda]   (run in the source directory)
#   torch: only torch (Dockerfile.worker installs it in a layer of its own, before the
#   sources are copied, so a changed source file does not download torch again)
#   flink: the flink implementation's environment of its own (the `flink` extra pinned by
#   constraints-flink.txt: its pins are not constraints.txt's; no torch)
set -eu

venv="$1"
component="$2"
device="${3:-cpu}"

# A CA bundle given to the build as a secret (Dockerfile.*) is used for every download.
if [ -s /run/secrets/ca ]; then
    export PIP_CERT=/run/secrets/ca
fi

pip="$venv/bin/python -m pip"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    $pip install --progress-bar off --upgrade pip
fi

install_torch() {
    case "$device" in
    # PyPI's Linux torch is the CUDA build (several GB); the CPU build has its own index.
    # An empty TORCH_CPU_INDEX leaves it to pip's configuration (a local wheel folder).
    cpu) cpu_index="${TORCH_CPU_INDEX-https://download.pytorch.org/whl/cpu}"
         torch_index="${cpu_index:+--extra-index-url $cpu_index}" ;;
    cuda) torch_index="" ;;
    *) echo "device must be cpu or cuda, not $device" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    $pip install --progress-bar off -c constraints.txt $torch_index torch==2.13.0
}

case "$component" in
master)
    $pip install --progress-bar off -c constraints.txt '.[master]'
    ;;
torch)
    install_torch
    ;;
worker)
    install_torch
    $pip install --progress-bar off -c constraints.txt '.[worker]'
    ;;
flink)
    $pip install --progress-bar off -c constraints-flink.txt '.[flink]'
    ;;
*)
    echo "component must be master, worker, torch or flink, not $component" >&2
    exit 2
    ;;
esac
