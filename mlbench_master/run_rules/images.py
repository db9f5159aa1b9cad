"""Which code a run runs: an official image of the original platform (the task that
implements it here), the open division's own command and image, and the backend."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from mlbench_master.api.models import Run
from mlbench_master.run_rules.errors import Errors
from mlbench_worker.shared import catalogue

CUSTOM_IMAGE = catalogue.CUSTOM_IMAGE
CUSTOM_BACKEND = catalogue.CUSTOM_BACKEND
CUSTOM_BACKEND_STORED = "custom"  # Run.backend of a run whose command picks its backend
CUSTOM_FIELDS = ("custom_image_name", "custom_image_command", "custom_backend")
LOCAL_IMAGE_REFUSED = (
    "the local cluster runs commands as processes on this machine, not containers, so it "
    "cannot run an image; leave custom_image_name empty and give custom_image_command "
    "(it runs here as is), or use a Kubernetes master"
)
SLURM_IMAGE_REFUSED = (
    "the Slurm cluster runs commands in the nodes' shared environment (MLBENCH_SLURM_PYTHON), "
    "not in containers, so it cannot run an image; leave custom_image_name empty and give "
    "custom_image_command (it runs on the nodes as is), or use a Kubernetes master"
)
# Why a cluster without containers refuses custom_image_name (only Kubernetes runs images).
IMAGE_REFUSED = {"local": LOCAL_IMAGE_REFUSED, "slurm": SLURM_IMAGE_REFUSED}


def resolve_image_and_backend(fields: dict[str, Any], errors: Errors) -> None:
    """Resolve `image`/`image_name`, the custom fields and the backend, in place.

    An official image of the original platform stands for the task that implements it here
    (the catalogue maps them, tag ignored). "custom_image" (or any custom field) is the open
    division: the user's command, and on Kubernetes their image. The two never mix: a
    reference task's result must come from the reference code, so custom fields with an
    official image are refused, and every open-division run names its command (an image
    alone would run the reference worker in the user's image). A custom backend only means
    something to the user's own code. Backends in any case ("MPI" is the original client's).
    """
    backend = fields.get("backend")
    if backend is not None:
        backend = fields["backend"] = backend.strip().lower()
        if backend not in Run.BACKENDS and backend != CUSTOM_BACKEND:
            errors.add("backend", f"backend {backend!r} is not one of {', '.join(Run.BACKENDS)} "
                       f"(any case), or {CUSTOM_BACKEND!r} with custom_backend for a custom "
                       "image")  # fmt: skip
    image, alias = fields.pop("image", None), fields.pop("image_name", None)
    if image and alias and image.strip() != alias.strip():
        errors.add("image_name", f"image ({image!r}) and image_name ({alias!r}) name different "
                   "images; give one")  # fmt: skip
        return
    image = (alias or image or "").strip()
    custom = [f for f in CUSTOM_FIELDS if fields.get(f)] + (
        ["backend"] if backend == CUSTOM_BACKEND else []
    )
    if image and image != CUSTOM_IMAGE:
        _official_image(image, custom, fields, errors)
        return
    if image == CUSTOM_IMAGE:
        fields["image"] = CUSTOM_IMAGE
    if (image == CUSTOM_IMAGE or custom) and not fields.get("custom_image_command"):
        errors.add("custom_image_command", "the open division needs custom_image_command: the "
                   "command each worker runs")  # fmt: skip
    if fields.get("custom_image_name") and settings.MLBENCH_CLUSTER in IMAGE_REFUSED:
        errors.add("custom_image_name", IMAGE_REFUSED[settings.MLBENCH_CLUSTER])
    named = fields.get("custom_backend")
    if backend == CUSTOM_BACKEND and not named:
        errors.add("custom_backend", f"backend {CUSTOM_BACKEND!r} needs custom_backend: the "
                   "backend's name")  # fmt: skip
    elif named and backend not in (None, CUSTOM_BACKEND):
        errors.add("backend", f"custom_backend {named!r} and backend {backend!r} disagree: set "
                   f"backend to {CUSTOM_BACKEND!r} or leave it out")  # fmt: skip
    elif named:
        fields["backend"] = CUSTOM_BACKEND_STORED


def _official_image(image: str, custom: list[str], fields: dict[str, Any],
                    errors: Errors) -> None:  # fmt: skip
    fields["image"] = image
    offered = list(settings.MLBENCH_TASKS)
    implemented = ", ".join(catalogue.implemented_images(offered))
    found = catalogue.seed_image(image)
    if found is None:
        errors.add("image_name", f"{image!r} is not an official mlbench image; this master runs "
                   f"{implemented}, or {CUSTOM_IMAGE!r} with custom_image_command for your own "
                   "code")  # fmt: skip
    elif found.task is None or found.task not in offered:
        errors.add("image_name", f"{found.title} ({found.image}) is not implemented on this "
                   f"master yet; it runs {implemented}")  # fmt: skip
    elif custom:
        errors.add(custom[0], f"{custom[0]} is for the open division (image_name "
                   f"{CUSTOM_IMAGE!r}); image_name {image!r} runs the reference task "
                   f"{found.task}")  # fmt: skip
    else:
        if fields.get("task") not in (None, found.task):
            errors.add("task", f"image_name {image!r} runs task {found.task}, not "
                       f"{fields['task']!r}; give one")  # fmt: skip
        if fields.get("implementation") not in (None, found.implementation):
            errors.add("implementation", f"image_name {image!r} runs implementation "
                       f"{found.implementation}, not {fields['implementation']!r}; give "
                       "one")  # fmt: skip
        fields["task"] = found.task
        fields["implementation"] = found.implementation
