"""Which code a run runs: an official image of the original platform (the task that
implements it here), the open division's own command and image, and the backend."""

from __future__ import annotations

from collections.abc import Mapping
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


def _backend(given: Mapping[str, Any]) -> str | None:
    """The backend asked for, in any case ("MPI" is the original client's); None: not given."""
    backend = given.get("backend")
    return None if backend is None else backend.strip().lower()


def _image(given: Mapping[str, Any]) -> str | None:
    """The image asked for by `image` or `image_name` ("": none); None when the two name
    different images (refused: which one was meant cannot be told)."""
    image, alias = given.get("image"), given.get("image_name")
    if image and alias and image.strip() != alias.strip():
        return None
    return (alias or image or "").strip()


def _custom(given: Mapping[str, Any], backend: str | None) -> list[str]:
    """The open division's fields given, in the order a refusal names them."""
    return [f for f in CUSTOM_FIELDS if given.get(f)] + (
        ["backend"] if backend == CUSTOM_BACKEND else []
    )


def _runs_here(image: str) -> catalogue.SeedImage | None:
    """The official image's catalogue entry when it runs a task this master offers."""
    found = catalogue.seed_image(image)
    if found is None or found.task is None or found.task not in settings.MLBENCH_TASKS:
        return None
    return found


def fill_image_and_backend(fields: dict[str, Any]) -> None:
    """`image`/`image_name` as one `image`, the task and implementation an official image
    stands for, and the backend as stored, in place (what is wrong is `check_...`'s).

    An official image of the original platform stands for the task that implements it here
    (the catalogue maps them, tag ignored). "custom_image" (or any custom field) is the open
    division: the user's command, and on Kubernetes their image; its custom backend is stored
    as "custom" (it only means something to the user's own code).
    """
    backend = _backend(fields)
    if backend is not None:
        fields["backend"] = backend
    image = _image(fields)
    fields.pop("image", None)
    fields.pop("image_name", None)
    if image is None:
        return
    if image and image != CUSTOM_IMAGE:
        fields["image"] = image
        found = _runs_here(image)
        if found is not None and not _custom(fields, backend):
            fields["task"], fields["implementation"] = found.task, found.implementation
        return
    if image == CUSTOM_IMAGE:
        fields["image"] = CUSTOM_IMAGE
    if fields.get("custom_backend") and backend in (None, CUSTOM_BACKEND):
        fields["backend"] = CUSTOM_BACKEND_STORED


def check_image_and_backend(given: Mapping[str, Any], errors: Errors) -> None:
    """What is wrong with the image, the custom fields and the backend `given` (asked for or
    a resumed parent's, before `fill_image_and_backend`).

    The official images and the open division never mix: a reference task's result must
    come from the reference code, so custom fields with an official image are refused, and
    every open-division run names its command (an image alone would run the reference
    worker in the user's image). A custom backend needs its name and the custom backend.
    """
    backend = _backend(given)
    if backend is not None and backend not in Run.BACKENDS and backend != CUSTOM_BACKEND:
        errors.add("backend", f"backend {backend!r} is not one of {', '.join(Run.BACKENDS)} "
                   f"(any case), or {CUSTOM_BACKEND!r} with custom_backend for a custom "
                   "image")  # fmt: skip
    image = _image(given)
    if image is None:
        errors.add("image_name", f"image ({given['image']!r}) and image_name "
                   f"({given['image_name']!r}) name different images; give one")  # fmt: skip
        return
    custom = _custom(given, backend)
    if image and image != CUSTOM_IMAGE:
        _check_official(image, custom, given, errors)
        return
    if (image == CUSTOM_IMAGE or custom) and not given.get("custom_image_command"):
        errors.add("custom_image_command", "the open division needs custom_image_command: the "
                   "command each worker runs")  # fmt: skip
    if given.get("custom_image_name") and settings.MLBENCH_CLUSTER in IMAGE_REFUSED:
        errors.add("custom_image_name", IMAGE_REFUSED[settings.MLBENCH_CLUSTER])
    named = given.get("custom_backend")
    if backend == CUSTOM_BACKEND and not named:
        errors.add("custom_backend", f"backend {CUSTOM_BACKEND!r} needs custom_backend: the "
                   "backend's name")  # fmt: skip
    elif named and backend not in (None, CUSTOM_BACKEND):
        errors.add("backend", f"custom_backend {named!r} and backend {backend!r} disagree: set "
                   f"backend to {CUSTOM_BACKEND!r} or leave it out")  # fmt: skip


def _check_official(image: str, custom: list[str], given: Mapping[str, Any],
                    errors: Errors) -> None:  # fmt: skip
    implemented = ", ".join(catalogue.implemented_images(list(settings.MLBENCH_TASKS)))
    found = catalogue.seed_image(image)
    if found is None:
        errors.add("image_name", f"{image!r} is not an official mlbench image; this master runs "
                   f"{implemented}, or {CUSTOM_IMAGE!r} with custom_image_command for your own "
                   "code")  # fmt: skip
    elif _runs_here(image) is None:
        errors.add("image_name", f"{found.title} ({found.image}) is not implemented on this "
                   f"master yet; it runs {implemented}")  # fmt: skip
    elif custom:
        errors.add(custom[0], f"{custom[0]} is for the open division (image_name "
                   f"{CUSTOM_IMAGE!r}); image_name {image!r} runs the reference task "
                   f"{found.task}")  # fmt: skip
    else:
        if given.get("task") not in (None, found.task):
            errors.add("task", f"image_name {image!r} runs task {found.task}, not "
                       f"{given['task']!r}; give one")  # fmt: skip
        if given.get("implementation") not in (None, found.implementation):
            errors.add("implementation", f"image_name {image!r} runs implementation "
                       f"{found.implementation}, not {given['implementation']!r}; give "
                       "one")  # fmt: skip
