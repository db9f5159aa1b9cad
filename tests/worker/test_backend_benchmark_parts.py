"""The backend benchmark's pieces without MPI: message sizes, the bandwidth formulas,
the summary statistics, the command line, the table."""

import subprocess
import sys

import pytest

from mlbench_worker.backend_benchmark import records, sizes, stats
from mlbench_worker.backend_benchmark.options import parse_args
from mlbench_worker.backend_benchmark.sweep import Outcome, Plan

KiB, MiB = 2**10, 2**20


@pytest.mark.parametrize(
    "text, size",
    [("4096", 4096), ("1KiB", KiB), ("1 kib", KiB), ("64MiB", 64 * MiB), ("2M", 2 * MiB),
     ("1GiB", 2**30), ("8b", 8)],
)  # fmt: skip
def test_sizes_are_read_with_binary_suffixes(text, size):
    assert sizes.parse_size(text) == size


@pytest.mark.parametrize(
    "text, words",
    [("1.5MiB", "is not a size"), ("1TB", "is not a size"), ("lots", "is not a size"),
     ("6", "float32 elements"), ("0", "float32 elements"), ("2GiB", "more than 1 GiB")],
)  # fmt: skip
def test_bad_sizes_say_why(text, words):
    with pytest.raises(ValueError, match=words):
        sizes.parse_size(text)


def test_the_default_sweep_is_1_kib_to_64_mib_in_powers_of_two():
    listed = sizes.size_list(KiB, 64 * MiB, 2)
    assert len(listed) == 17 and listed[0] == KiB and listed[-1] == 64 * MiB
    assert all(b == 2 * a for a, b in zip(listed, listed[1:], strict=False))
    assert sizes.size_list(KiB, 64 * MiB, 4) == [KiB * 4**k for k in range(9)]
    assert sizes.size_list(KiB, 3 * KiB, 2) == [KiB, 2 * KiB]  # the largest is a bound
    with pytest.raises(ValueError, match="above the largest"):
        sizes.size_list(MiB, KiB, 2)


def test_size_labels():
    assert [sizes.label(s) for s in (KiB, 64 * MiB, 2**30, 3000)] == [
        "1 KiB", "64 MiB", "1 GiB", "3000 B",
    ]  # fmt: skip


def test_bus_factors_are_those_of_nccl_tests():
    assert stats.bus_factor("allreduce", 2) == 1.0
    assert stats.bus_factor("allreduce", 4) == 1.5
    assert stats.bus_factor("allreduce", 8) == 1.75
    assert stats.bus_factor("broadcast", 2) == stats.bus_factor("broadcast", 16) == 1.0
    with pytest.raises(ValueError, match="at least 2 workers"):
        stats.bus_factor("allreduce", 1)
    with pytest.raises(ValueError, match="unknown op 'scatter'"):
        stats.bus_factor("scatter", 2)


def test_bandwidths_in_mbit_per_second():
    # 12.5 MB in one second is 100 Mbit/s: what a 100 Mbit/s link can carry at most.
    assert stats.algbw_mbps(12_500_000, 1.0) == pytest.approx(100.0)
    assert stats.busbw_mbps("allreduce", 12_500_000, 1.0, 4) == pytest.approx(150.0)
    assert stats.busbw_mbps("broadcast", 12_500_000, 0.5, 4) == pytest.approx(200.0)
    with pytest.raises(ValueError, match="positive"):
        stats.algbw_mbps(1024, 0.0)


def test_a_row_has_best_and_median_of_the_slowest_ranks_times():
    row = stats.summarize(
        "allreduce", "mpi", 1_000_000, 4, [0.004, 0.001, 0.002, 0.010], warmup=5, capped=True
    )
    assert row["latency_best_us"] == pytest.approx(1000.0)
    assert row["latency_median_us"] == pytest.approx(3000.0)  # median of an even count
    assert row["algbw_best_mbps"] == pytest.approx(8000.0)
    assert row["busbw_best_mbps"] == pytest.approx(12000.0)  # x 2(4-1)/4
    assert row["busbw_median_mbps"] == pytest.approx(8000.0 / 3 * 1.5)
    assert (row["repeats"], row["warmup"], row["capped"]) == (4, 5, True)
    with pytest.raises(ValueError, match="no repeat"):
        stats.summarize("allreduce", "mpi", 1024, 2, [], warmup=0, capped=False)


def test_options_accept_every_flag_the_master_passes():
    args = parse_args(
        ["--backend", "mpi,GLOO", "--threads", "1", "--device", "cpu", "--target", "standard",
         "--dataset", "auto", "--time-budget", "60"]
    )  # fmt: skip
    assert args.backends == ["mpi", "gloo"]
    assert args.time_budget == 60 and args.threads == 1
    assert args.sizes == sizes.size_list(KiB, 64 * MiB, 2)
    assert args.ops == ["allreduce", "broadcast"]
    plain = parse_args([])
    assert plain.backends is None  # every backend of the device, decided when it is known


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--target", "light"], "--target light: backend-benchmark measures communication"),
        (["--dataset", "cifar10"], "it reads no data set"),
        (["--max-epochs", "3"], "--max-epochs: backend-benchmark"),
        (["--checkpoint-dir", "/tmp/x"], "keeps no checkpoints"),
        (["--resume"], "--resume: backend-benchmark"),
        (["--backend", "carrier-pigeon"], "carrier-pigeon is not a backend"),
        (["--backend", "nccl", "--device", "cpu"], "nccl needs --device cuda"),
        (["--device", "tpu"], "unknown value 'tpu'"),
        (["--ops", "scatter"], "scatter is not an op"),
        (["--min-size", "1MiB", "--max-size", "1KiB"], "above the largest"),
        (["--min-size", "3"], "float32 elements"),
        (["--repeats", "2", "--min-repeats", "5"], "--min-repeats (5) is more than"),
        (["--size-factor", "3"], "invalid choice"),
        (["--master-url", "http://x"], "--master-url needs --run-id"),
    ],
)
def test_bad_options_exit_2_naming_the_problem(argv, words, capsys, monkeypatch):
    monkeypatch.delenv("MLBENCH_RUN_ID", raising=False)
    with pytest.raises(SystemExit) as raised:
        parse_args(argv)
    assert raised.value.code == 2
    assert words in capsys.readouterr().err


def test_the_command_line_is_parsed_without_torch():
    code = (
        "import sys; from mlbench_worker.backend_benchmark.options import parse_args; "
        "parse_args(['--backend', 'gloo']); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _outcome():
    rows = [
        stats.summarize(op, b, s, 2, [s / 1e8, s / 2e8], warmup=1, capped=s > KiB)
        for s in (KiB, 4 * KiB)
        for op in stats.OPS
        for b in ("mpi", "gloo")
    ]
    return Outcome(
        rows=rows,
        not_measured=[{"op": "allreduce", "backend": "mpi", "size": 16 * KiB}],
        budget_spent=True,
        elapsed=1.5,
    )


def test_summary_and_table_say_what_was_measured_and_what_was_not():
    plan = Plan([KiB, 4 * KiB, 16 * KiB], list(stats.OPS), ["mpi", "gloo"], 1, 2, 1, 1.0, 1.0)
    versions = {"python": "3.11", "torch": "2", "mpi": "Open MPI", "mlbench": "x"}
    summary = records.summary_record(
        plan, _outcome(), workers=2, device="cpu", threads=1, versions=versions,
        hardware={}, run_id="7",
    )  # fmt: skip
    assert summary["backend"] == "mpi,gloo" and summary["kind"] == "measurement"
    assert summary["measured"] == 8 and len(summary["not_measured"]) == 1
    assert summary["stop_reason"].startswith("time budget spent: 1 ")
    # the peak is the highest median bus bandwidth (every row takes 0.75e-8 s per byte at
    # the median; all-reduce's bus factor is 1 at 2 ranks, like broadcast's)
    assert summary["busbw_mbps"] == pytest.approx(8 / 0.75e-8 / 1e6)
    text = records.table(summary)
    assert "all-reduce" in text and "broadcast" in text and "4 KiB" in text
    assert "stopped because: time budget spent" in text
    assert text.count("\n") > 8


def test_each_row_becomes_three_points_with_the_cell_in_their_metadata():
    class Collect(records.Reporter):
        def __init__(self):
            super().__init__("7")
            self.points = []

        def emit(self, point):
            self.points.append(point)

    reporter = Collect()
    row = _outcome().rows[0]
    records.post_row(reporter, row, 0.25)
    assert [p["name"] for p in reporter.points] == ["latency_us", "busbw_mbps", "algbw_mbps"]
    bus = reporter.points[1]
    assert bus["value"] == row["busbw_median_mbps"]
    assert bus["metadata"]["best"] == row["busbw_best_mbps"]
    assert {k: bus["metadata"][k] for k in ("op", "backend", "size", "elapsed")} == {
        "op": "allreduce", "backend": "mpi", "size": KiB, "elapsed": 0.25,
    }  # fmt: skip
