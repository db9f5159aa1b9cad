"""Which images every rank reads: ImageNet from the data directory, or the synthetic set.

The decision is made together, as for the other tasks (mlbench_worker.data.agree_on_real_data): rank 0
looks first, then the others (on other machines they look at their own disk), and with
`auto` every rank falls back to the synthetic set when rank 0 finds no ImageNet. The
synthetic files are written by rank 0 first while the others wait; a rank on another
machine that does not see them writes its own identical copy.

`train_images` / `test_images` (smoke tests): for ImageNet, that many images spread evenly
over the sorted list, so every class keeps its share; for the synthetic set, how many to
generate and use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlbench_worker.data import DataUnavailable, agree_on_real_data
from mlbench_worker.tasks.imagenet import layout, synthetic
from mlbench_worker.tasks.imagenet.layout import Listing
from mlbench_worker.training.errors import WorkerError


@dataclass
class ImageNetData:
    name: str  # what was used: "imagenet" or "synthetic"
    listing: Listing
    note: str = ""  # why synthetic was used, when it was a fallback


def _real(data_dir: Path) -> tuple[Listing | None, str | None, bool]:
    """(listing, error, whether the error means 'unavailable' rather than 'damaged')."""
    try:
        return layout.find(data_dir), None, False
    except DataUnavailable as exc:
        return None, str(exc), True
    except WorkerError as exc:
        return None, str(exc), False


def _synthetic(
    data_dir: Path, train: int, val: int, say: Callable[[str], None]
) -> tuple[Listing | None, str | None, bool]:
    try:
        synthetic.ensure(data_dir, train, val, say)
    except OSError as exc:
        return (
            None,
            f"cannot write the synthetic set into {synthetic.root_of(data_dir)}: {exc}",
            False,
        )
    listing = Listing(
        synthetic.root_of(data_dir),
        list(synthetic.CLASSES),
        synthetic.split(data_dir, "train", train),
        synthetic.split(data_dir, "val", val),
    )
    return listing, None, False


def load(
    dataset: str,
    data_dir: str | Path,
    comm: object,
    train_images: int | None = None,
    test_images: int | None = None,
    say: Callable[[str], None] = print,
) -> ImageNetData:
    """The images for `dataset` (auto | imagenet | synthetic), agreed by all ranks."""
    data_dir = Path(data_dir)

    def generated(note: str = "") -> ImageNetData:
        train = train_images or synthetic.TRAIN_SIZE
        val = test_images or synthetic.VAL_SIZE
        listing, _ = agree_on_real_data(
            comm,
            "synthetic",
            lambda first: _synthetic(data_dir, train, val, say if first else lambda _m: None),
        )
        assert listing is not None
        return ImageNetData("synthetic", listing, note)

    if dataset == "synthetic":
        return generated()
    listing, unavailable = agree_on_real_data(comm, dataset, lambda _first: _real(data_dir))
    if unavailable is not None:
        return generated(f"ImageNet could not be had: {unavailable}")
    assert listing is not None
    sizes = comm.allgather_object((len(listing.train), len(listing.val)))
    if len(set(sizes)) > 1:
        raise WorkerError(
            f"the ranks see different ImageNet folders (train, val images per rank: {sizes}); "
            "every machine needs the same copy",
            exit_code=1,
        )
    listing.train = listing.train.subset(train_images)
    listing.val = listing.val.subset(test_images)
    return ImageNetData("imagenet", listing)
