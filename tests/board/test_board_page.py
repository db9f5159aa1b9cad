"""The board's pages as Django serves them (their rows are drawn by board.js, tested in
tests/browser/test_board.py): a page per task of the catalogue, the task list, an unknown
task a 404, and a visitor without a session sent to sign in unless reads are public."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from mlbench_worker.shared import catalogue

pytestmark = pytest.mark.django_db


def test_a_page_per_task_and_the_list_of_tasks(client, settings):
    settings.MLBENCH_PUBLIC_READ = False
    client.force_login(get_user_model().objects.create_user("alice"))
    listing = client.get("/board/")
    assert listing.status_code == 200
    for name, info in catalogue.TASKS.items():
        listed = f'href="/board/{name}/"' in listing.content.decode()
        assert listed != info.measurement, name  # a measurement has nothing to rank
        page = client.get(f"/board/{name}/")
        assert page.status_code == 200 and f'data-task="{name}"' in page.content.decode()
    assert client.get("/board/chess/").status_code == 404
    assert 'href="/board/"' in client.get("/runs/").content.decode()  # in the navigation


def test_anonymous_visitors_only_where_reads_are_public(client, settings):
    settings.MLBENCH_PUBLIC_READ = False
    answer = client.get("/board/logreg-epsilon/")
    assert answer.status_code == 302 and "/login/" in answer["Location"]
    settings.MLBENCH_PUBLIC_READ = True
    assert client.get("/board/logreg-epsilon/").status_code == 200
