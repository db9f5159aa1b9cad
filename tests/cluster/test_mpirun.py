"""The mpirun command builder and output parser, including a real 2-rank mpirun."""

import os
import subprocess
import sys

import pytest

from mlbench_master.cluster import mpirun
from mlbench_master.cluster.base import OutputLine, RunSpec


def make_run(**overrides):
    fields = dict(
        id=7,
        task="resnet20-cifar10",
        backend="mpi",
        num_workers=2,
        num_cpus=2.0,
        max_bandwidth=1000,
        gpu_enabled=False,
        target="standard",
        dataset="auto",
        time_budget=None,
        max_epochs=None,
        custom_image_command="",
        run_all_nodes=False,
    )
    fields.update(overrides)
    return RunSpec(**fields)


def test_local_command_has_no_binding_and_all_ranks():
    argv = mpirun.mpirun_argv(make_run(), mpirun="/v/bin/mpirun", python="/v/bin/python")
    assert argv[:8] == [
        "/v/bin/mpirun",
        "-n",
        "2",
        "--bind-to",
        "none",
        "--output",
        "tag",
        "--oversubscribe",
    ]
    assert "--host" not in argv
    tail = argv[argv.index("/v/bin/python") :]
    assert tail[:4] == ["/v/bin/python", "-m", "mlbench_worker", "resnet20-cifar10"]
    assert tail[tail.index("--threads") + 1] == "2"
    assert tail[tail.index("--device") + 1] == "cpu"


def test_the_launcher_part_alone_as_the_benchmarks_use_it():
    local = mpirun.launcher_argv(2, mpirun="/v/bin/mpirun", tag_output=False, forward=())
    assert local == ["/v/bin/mpirun", "-n", "2", "--bind-to", "none", "--oversubscribe"]
    slots = mpirun.launcher_argv(
        2, ["s-0", "s-1", "s-2"], agent="sh /a", tag_output=False, forward=()
    )
    assert slots == [
        "mpirun", "-n", "2", "--bind-to", "none", "--host", "s-0:1,s-1:1",
        "--mca", "plm_rsh_agent", "sh /a", "--prtemca", "plm_ssh_no_tree_spawn", "1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"custom_image_command": "python train.py"},
        {"custom_image_command": "x", "run_all_nodes": True},
    ],
)
def test_the_full_command_is_the_launcher_then_the_worker(overrides):
    run = make_run(**overrides)
    hosts = ["w-0", "w-1"]
    argv = mpirun.mpirun_argv(run, hosts, mpirun="/m", python="/p", agent="sh /a")
    launcher = mpirun.launcher_argv(mpirun.rank_count(run), hosts, mpirun="/m", agent="sh /a")
    assert argv == launcher + mpirun.RANK_WATCH + mpirun.worker_argv(run, python="/p", hosts=hosts)
    assert launcher[launcher.index("--output") + 1] == "tag"
    assert [launcher[i + 1] for i, a in enumerate(launcher) if a == "-x"] == list(
        mpirun.FORWARDED_ENV
    )


def test_environment_is_forwarded_by_name():
    argv = mpirun.mpirun_argv(make_run())
    forwarded = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert set(mpirun.rank_environment(make_run(), "http://m", "t")) <= set(forwarded)


def test_hosts_get_one_slot_each():
    argv = mpirun.mpirun_argv(make_run(num_workers=2), hosts=["w-0.svc", "w-1.svc", "w-2.svc"])
    assert argv[argv.index("--host") + 1] == "w-0.svc:1,w-1.svc:1"
    assert "--oversubscribe" not in argv


def test_goal_options():
    argv = mpirun.worker_argv(
        make_run(target="light", time_budget=90.0, max_epochs=3, gpu_enabled=True)
    )
    assert argv[argv.index("--target") + 1] == "light"
    assert argv[argv.index("--time-budget") + 1] == "90"
    assert argv[argv.index("--max-epochs") + 1] == "3"
    assert argv[argv.index("--device") + 1] == "cuda"


def test_checkpoint_folder_and_resume_come_from_the_spec():
    fresh = mpirun.worker_argv(make_run(checkpoint_dir="/ckpt/run-7"))
    assert fresh[fresh.index("--checkpoint-dir") + 1] == "/ckpt/run-7"
    assert "--resume" not in fresh and "--resume-from" not in fresh
    resumed = mpirun.worker_argv(make_run(checkpoint_dir="/ckpt/run-8", resume_dir="/ckpt/run-7"))
    assert resumed[resumed.index("--checkpoint-dir") + 1] == "/ckpt/run-8"
    assert "--resume" in resumed
    assert resumed[resumed.index("--resume-from") + 1] == "/ckpt/run-7"
    # Nothing is invented: a spec without folders gets no checkpoint options at all.
    assert "--checkpoint-dir" not in mpirun.worker_argv(make_run())


def test_the_open_division_gets_no_budget_or_checkpoint_options():
    argv = mpirun.worker_argv(
        make_run(custom_image_command="python train.py", checkpoint_dir="/ckpt/run-7")
    )
    assert argv == ["python", "train.py"]


def test_fractional_cpus_still_get_one_thread():
    assert mpirun.threads_per_rank(0.5) == 1
    assert mpirun.threads_per_rank(3.9) == 3


def test_open_division_command_runs_on_rank_zero_unless_all_nodes():
    one = mpirun.mpirun_argv(make_run(custom_image_command="python train.py --lr 0.1"))
    assert one[one.index("-n") + 1] == "1"
    assert one[-4:] == ["python", "train.py", "--lr", "0.1"]
    every = mpirun.mpirun_argv(make_run(custom_image_command="python train.py", run_all_nodes=True))
    assert every[every.index("-n") + 1] == "2"


def test_the_original_platforms_placeholders_are_filled_in():
    template = (
        "/conda/bin/python /codes/main.py --run_id {run_id} --hosts {hosts} --backend {backend}"
    )
    run = make_run(custom_image_command=template, custom_backend="horovod ring")
    argv = mpirun.mpirun_argv(run, ["w-0.svc", "w-1.svc"])
    assert argv[-6:] == [
        "--run_id",
        str(run.id),
        "--hosts",
        "w-0.svc,w-1.svc",
        "--backend",
        "horovod ring",
    ]
    assert mpirun.custom_argv(make_run(custom_image_command="echo {hosts} {x}"))[-2:] == [
        "localhost",
        "{x}",
    ]


def test_a_command_with_rank_reads_it_from_mpirun(tmp_path):
    import subprocess

    run = make_run(custom_image_command=f"echo rank={{rank}} run={{run_id}} > {tmp_path}/out")
    argv = mpirun.custom_argv(run)
    assert argv[:2] == ["sh", "-c"]
    subprocess.run(argv, env={"OMPI_COMM_WORLD_RANK": "3", "PATH": "/usr/bin:/bin"}, check=True)
    assert (tmp_path / "out").read_text() == f"rank=3 run={run.id}\n"


@pytest.mark.parametrize(
    "line, expected",
    [
        ("[1,0]<stdout>: epoch 1", OutputLine(0, "stdout", "epoch 1")),
        (
            "[12,3]<stderr>: Traceback (most recent call last):\n",
            OutputLine(3, "stderr", "Traceback (most recent call last):"),
        ),
        ("[1,1]<stdout>:", OutputLine(1, "stdout", "")),
        (
            "prterun noticed that process rank 1 ...",
            OutputLine(None, "stderr", "prterun noticed that process rank 1 ..."),
        ),
        # Open MPI's abort message ends in a NUL when a remote daemon forwards it: dropped
        ("[1,0]<stderr>:\x00", OutputLine(0, "stderr", "")),
        (
            "[1,0]<stderr>: MPI_ABORT\x00 was invoked",
            OutputLine(0, "stderr", "MPI_ABORT was invoked"),
        ),
    ],
)
def test_parse_line(line, expected):
    assert mpirun.parse_line(line, stream="stderr" if "prterun" in line else "stdout") == expected


@pytest.mark.mpi
def test_real_mpirun_output_is_attributed_to_ranks(tmp_path):
    """The builder's flags against the installed Open MPI: tags parse, exit codes come back."""
    script = tmp_path / "rank.py"
    script.write_text(
        "import os, sys\n"
        "from mpi4py import MPI\n"
        "r = MPI.COMM_WORLD.Get_rank()\n"
        "print('hello', r, os.environ['MLBENCH_RUN_ID'], flush=True)\n"
        "print('oops', r, file=sys.stderr, flush=True)\n"
        "sys.exit(3 if r == 1 else 0)\n"
    )
    run = make_run(custom_image_command=f"{sys.executable} {script}", run_all_nodes=True)
    mpirun_bin = os.path.join(os.path.dirname(sys.executable), "mpirun")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(mpirun.rank_environment(run, "http://127.0.0.1:1", "secret"))
    proc = subprocess.run(
        mpirun.mpirun_argv(run, mpirun=mpirun_bin),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    out = [mpirun.parse_line(x, "stdout") for x in proc.stdout.splitlines()]
    err = [mpirun.parse_line(x, "stderr") for x in proc.stderr.splitlines()]
    assert OutputLine(0, "stdout", "hello 0 7") in out
    assert OutputLine(1, "stdout", "hello 1 7") in out
    assert OutputLine(1, "stderr", "oops 1") in err + out
