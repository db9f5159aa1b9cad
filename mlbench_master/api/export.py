"""Metric downloads as a streamed zip (`GET /api/metrics/<key>/?format=zip`).

A run of millions of points must download without the server holding it in memory (the
original timed out with 504s): rows are read from the database in chunks, written as JSON
as they come, and zipped on the fly (zipstream.py). A run's archive also carries its
description (run.json), its workers' resource use and its logs.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from collections.abc import Iterator

from django.db.models import Q
from django.http import StreamingHttpResponse
from django.utils import timezone

from mlbench_master.api.models import LogChunk, Metric, Pod, Run
from mlbench_master.api.serializers import PodSerializer, RunSerializer
from mlbench_master.common.dates import iso
from mlbench_master.common.zipstream import stream_zip
from mlbench_master.runs.metric_reads import SeriesQuery, stream_rows

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _file_name(name: str) -> str:
    return _SAFE.sub("_", name).strip("._") or "metric"


def _metric_files(query: SeriesQuery, folder: str) -> Iterator[tuple[str, Iterator[bytes]]]:
    rows = stream_rows(query)
    for name, group in itertools.groupby(rows, key=lambda r: r[1]):
        yield f"{folder}{_file_name(name)}.json", _json_array(group, detailed=not query.summarize)


def _json_array(rows: Iterator[tuple], detailed: bool) -> Iterator[bytes]:
    yield b"["
    first = True
    for batch in _batched(rows, 2000):
        parts = []
        for row in batch:
            date, value = iso(row[2]), repr(float(row[3]))
            if detailed:
                cumulative = "true" if row[4] else "false"
                meta = row[5] if isinstance(row[5], str) else json.dumps(row[5])
                parts.append(
                    f'{{"date": "{date}", "value": {value}, "cumulative": {cumulative}, '
                    f'"metadata": {meta}}}'
                )
            elif row[-1] is not None:  # a summarized point's benchmark clock (metric_reads)
                parts.append(
                    f'{{"date": "{date}", "value": {value}, "elapsed": {float(row[-1])!r}}}'
                )
            else:
                parts.append(f'{{"date": "{date}", "value": {value}}}')
        text = ",\n".join(parts)
        yield (text if first else ",\n" + text).encode()
        first = False
    yield b"]\n"


def _batched(rows: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    it = iter(rows)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _json_bytes(data: object) -> Iterator[bytes]:
    yield json.dumps(data, indent=2, default=str).encode()


def _run_logs(run: Run) -> Iterator[tuple[str, Iterator[bytes]]]:
    chunks = (
        LogChunk.objects.filter(run=run)
        .order_by("rank", "stream", "seq")
        .values_list("rank", "stream", "text")
        .iterator(chunk_size=500)
    )
    for (rank, stream), group in itertools.groupby(chunks, key=lambda c: (c[0], c[1])):
        who = "mpirun" if rank is None else f"rank-{rank}"
        yield f"logs/{who}.{stream}.log", (text.encode() for _, _, text in group)


def _run_pod_metrics(run: Run) -> Iterator[tuple[str, Iterator[bytes]]]:
    end = run.finished_at or timezone.now()
    rows = (
        Metric.objects.filter(
            Q(metadata__run_id=run.pk) | Q(metadata__run_id=str(run.pk)),
            pod_name__isnull=False,
            date__gte=run.created_at - dt.timedelta(minutes=5),
            date__lte=end + dt.timedelta(minutes=5),
        )
        .order_by("pod_name", "name", "date", "id")
        .values_list("pod_name", "name", "date", "value", "cumulative", "metadata")
        .iterator(chunk_size=5000)
    )
    for (pod, name), group in itertools.groupby(rows, key=lambda r: (r[0], r[1])):
        yield f"pods/{_file_name(pod)}/{_file_name(name)}.json", _json_array(group, detailed=True)


def zip_response(query: SeriesQuery, run: Run | None) -> StreamingHttpResponse:
    def entries() -> Iterator[tuple[str, Iterator[bytes]]]:
        if run is not None:
            info = {
                "run": RunSerializer(run).data,
                "exported_at": iso(timezone.now()),
                "query": {
                    "since": iso(query.since) if query.since else None,
                    "summarize": query.summarize,
                    "last_n": query.last_n,
                    "metric_filter": query.names,
                },
                "files": {
                    "metrics/<name>.json": "one JSON list of points per metric",
                    "pods/<pod>/<name>.json": "resource use of the run's workers",
                    "logs/<rank>.<stream>.log": "the run's output",
                },
            }
            yield "run.json", _json_bytes(info)
            yield from _metric_files(query, "metrics/")
            yield from _run_pod_metrics(run)
            yield from _run_logs(run)
        else:
            pod = Pod.objects.filter(name=query.key).first()
            if pod is not None:
                yield "pod.json", _json_bytes(PodSerializer(pod).data)
            yield from _metric_files(query, "metrics/")

    label = f"run-{run.pk}" if run is not None else f"pod-{_file_name(str(query.key))}"
    response = StreamingHttpResponse(stream_zip(entries()), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="mlbench-{label}-metrics.zip"'
    return response
