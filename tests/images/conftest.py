"""Session fixtures of the image tests: the engine (started and stopped here when no engine
was running) and both images, built once per session from this checkout."""

from __future__ import annotations

import pytest

from tests.images import engine


@pytest.fixture(scope="session")
def docker_engine():
    started = engine.start_engine()
    yield
    if started:
        engine.stop_engine()


@pytest.fixture(scope="session")
def images(docker_engine):
    engine.build_images()
    return engine.MASTER, engine.WORKER
