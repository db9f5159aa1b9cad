# Over 400 lines: every GPU check in one file, so that one command runs them all in one short lease.
"""The GPU checks of the worker (shared/GPU.md), made to fit one short lease of a GPU machine.

A GPU is lent rarely and for minutes, so every check is prepared here and run in one go:
each section runs in a child process with a time limit of its own, and its result (or its
failure, with the end of its output) is added to `--out`/gpu-results.json the moment it
ends, so a lease that runs out still returns what was measured. Sections:

1. loop1a: task 1a (ResNet-20, batch 128), 1 rank: our Trainer against a plain PyTorch loop
   of the same model and batch, in fp32, with --channels-last, and with --amp in float16
   (with the gradient scaler) and bfloat16. Images/s, best round of each, interleaved.
   Also checks that the batches the loader makes on the device are the ones it makes on
   the host (same crops and flips from the same generator).
2. imagenet: task 1b (ResNet-50, 224 px, generated JPEG files), 1 rank, bfloat16 and
   channels_last: images/s of the model alone on ready-made batches, and of our loop with
   1, 4, 8 and 12 loader processes (--data-workers).
3. nccl: a short training run of each implementation through --backend nccl, and the
   communication benchmark on 2 ranks sharing the GPU (mpi and gloo).
4. algorithms: a short run of every algorithm and implementation, 2 ranks sharing the GPU
   over mpi (one rank would send nothing): that it runs on CUDA tensors, and its images/s
   and step time beside allreduce/reference.
5. target: time to task 1a's light target on the generated set, one device.

Nothing is asserted; targets are printed next to the measurements.
Usage: python tests/benchmarks/bench_gpu.py [--device cuda] [--quick] [--out DIR]
       [--only SECTION,...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

SECTIONS = ("loop1a", "imagenet", "nccl", "algorithms", "target")
# Each section's share of a lease (seconds): what it may take before it is stopped.
# They sum to 440 s, which leaves the lease's 600 s room for the installs and the embedded
# master's run; each section's own runs fit inside its limit.
LIMITS = {"loop1a": 80, "imagenet": 80, "nccl": 70, "algorithms": 165, "target": 45}


# --- 1. task 1a: our loop against a plain loop -------------------------------------------
VARIANTS = {
    "fp32": {"amp": None, "channels_last": False},
    "fp32 channels_last": {"amp": None, "channels_last": True},
    "amp float16": {"amp": "float16", "channels_last": False},
    "amp float16 channels_last": {"amp": "float16", "channels_last": True},
    "amp bfloat16": {"amp": "bfloat16", "channels_last": False},
    "amp bfloat16 channels_last": {"amp": "bfloat16", "channels_last": True},
}


def same_batches_on_device(device: str) -> bool:
    """The loader's augmented batches on `device` equal the host's, bit for bit."""
    import numpy as np
    import torch

    from mlbench_worker.data.loader import Batches
    from mlbench_worker.tasks.cifar10.synthetic import generate

    data = generate(3, 512, 10)
    batches = {}
    for where in ("cpu", device):
        b = Batches(data.train_x, data.train_y, 128, device=where)
        gen = torch.Generator().manual_seed(11)
        batches[where] = [(x.cpu(), y.cpu()) for x, y in b.iterate(np.arange(512)[::-1], gen)]
    return all(
        torch.equal(x1, x2) and torch.equal(y1, y2)
        for (x1, y1), (x2, y2) in zip(batches["cpu"], batches[device], strict=True)
    )


def loop_variant(device_name: str, amp: str | None, channels_last: bool, steps: int, rounds: int):
    import torch
    from common import interleaved, plain_loop

    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.models import build_model
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.comm import Communicator
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    device = torch.device(device_name)
    batch = 128
    data = generate(0, batch * steps, 100)
    mean, std = channel_stats(data.train_x)
    comm = Communicator("mpi", device=device)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    torch.manual_seed(0)
    model = build_model("resnet20").to(device, memory_format=memory_format)
    trainer = Trainer(
        model, sgd(model), Schedule(0.1, 0.1, 0, (), 1.0), Goal("paper", 0.91, 1), comm,
        Batches(data.train_x, data.train_y, batch, mean, std, device=device,
                channels_last=channels_last),
        Batches(data.test_x, data.test_y, 100, mean, std, device=device, augment=False,
                channels_last=channels_last),
        Reporter(), seed=0, device=device, amp=amp is not None, log_every=10**9,
        print_fn=lambda _m: None,
    )  # fmt: skip
    if amp == "bfloat16":  # as task 1b's set-up chooses it: float32's range, no scaler
        trainer.amp_dtype, trainer.scaler = torch.bfloat16, None
    trainer.clock_start = time.perf_counter()

    torch.manual_seed(0)
    plain_model = build_model("resnet20").to(device, memory_format=memory_format)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(batch, 3, 32, 32, generator=g) for _ in range(steps)]
    xs = [x.to(device).contiguous(memory_format=memory_format) for x in xs]
    ys = [torch.randint(0, 10, (batch,), generator=g).to(device) for _ in range(steps)]
    plain = plain_loop(
        plain_model, sgd(plain_model), xs, ys, amp_dtype=_dtype(amp), scaler=amp == "float16"
    )

    def ours() -> float:
        start = time.perf_counter()
        trainer.train_one_epoch(0)
        return batch * steps / (time.perf_counter() - start)

    a, b = interleaved(ours, plain, rounds)
    p = trainer.progress
    total = p.time_data + p.time_compute + p.time_comm
    return {
        "ours": a,
        "plain": b,
        "ratio": max(a) / max(b),
        "data_share": p.time_data / total if total else None,
    }


def _dtype(amp: str | None):  # noqa: ANN202
    import torch

    return {None: None, "float16": torch.float16, "bfloat16": torch.bfloat16}[amp]


def section_loop1a(device: str, quick: bool) -> dict:
    import torch

    torch.backends.cudnn.benchmark = True
    steps, rounds = (20, 2) if quick else (100, 5)
    out: dict = {"batch": 128, "steps_per_round": steps, "rounds": rounds}
    out["same_batches_on_device"] = same_batches_on_device(device)
    for label, v in VARIANTS.items():
        if device == "cpu" and v["amp"] == "float16":
            continue  # its scaler is CUDA's
        out[label] = loop_variant(device, v["amp"], v["channels_last"], steps, rounds)
        print(f"{label}: ratio {out[label]['ratio']:.3f}", flush=True)
    return out


# --- 2. task 1b: the model alone and the loader processes ----------------------------------
def section_imagenet(device_name: str, quick: bool) -> dict:
    import torch
    import torch.nn.functional as F

    from mlbench_worker.models import build_imagenet_model
    from mlbench_worker.tasks.imagenet import synthetic
    from mlbench_worker.tasks.imagenet.pipeline import ImageBatches
    from mlbench_worker.tasks.imagenet.setup import eval_resize
    from mlbench_worker.tasks.imagenet.train import ImageNetTrainer
    from mlbench_worker.training.comm import Communicator
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule

    device = torch.device(device_name)
    torch.backends.cudnn.benchmark = True
    crop = 64 if quick else 224
    batch = 4 if quick else 128
    steps = 2 if quick else 12
    worker_counts = (1, 2) if quick else (1, 4, 8, 12)
    out: dict = {"model": "resnet50", "crop": crop, "batch": batch, "amp": "bfloat16",
                 "channels_last": True, "cpu_count": os.cpu_count()}  # fmt: skip

    def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def make_model() -> torch.nn.Module:
        torch.manual_seed(0)
        model = build_imagenet_model("resnet50", zero_init_residual=True)
        return model.to(device, memory_format=torch.channels_last)

    # The model alone: ready-made batches on the device.
    model = make_model()
    opt = sgd(model)
    x = torch.randn(batch, 3, crop, crop, device=device).contiguous(
        memory_format=torch.channels_last
    )
    y = torch.randint(0, 1000, (batch,), device=device)

    def model_steps(n: int) -> float:
        _sync(device)
        start = time.perf_counter()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        _sync(device)
        return batch * n / (time.perf_counter() - start)

    model_steps(3)
    out["model_alone"] = max(model_steps(steps) for _ in range(3))
    print(f"model alone: {out['model_alone']:.0f} images/s", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="bench-gpu-imagenet-"))
    images = batch * steps
    start = time.perf_counter()
    synthetic.ensure(tmp, images, batch, say=lambda _m: None)
    out["generate_seconds"] = time.perf_counter() - start
    train = synthetic.split(tmp, "train", images)
    val = synthetic.split(tmp, "val", batch)
    comm = Communicator("mpi", device=device)
    loops = {}
    for workers in worker_counts:
        common = {"crop": crop, "resize": eval_resize(crop), "workers": workers,
                  "device": device, "channels_last": True}  # fmt: skip
        model = make_model()
        trainer = ImageNetTrainer(
            model, sgd(model), Schedule(0.1, 0.1, 0, (), 1.0), Goal("standard", 0.759, 1),
            comm, ImageBatches(train, batch, train=True, **common),
            ImageBatches(val, batch, train=False, **common), Reporter(),
            task="resnet50-imagenet", seed=0, device=device, amp=True, log_every=10**9,
            print_fn=lambda _m: None,
        )  # fmt: skip
        trainer.amp_dtype, trainer.scaler = torch.bfloat16, None
        trainer.clock_start = time.perf_counter()
        trainer.train_one_epoch(0)  # warm-up: loader processes start, cudnn picks kernels
        rates = []
        for epoch in (1, 2):
            t = time.perf_counter()
            trainer.train_one_epoch(epoch)
            rates.append(trainer.steps_per_epoch * batch / (time.perf_counter() - t))
        p = trainer.progress
        total = p.time_data + p.time_compute + p.time_comm
        loops[str(workers)] = {"images_per_sec": max(rates), "data_share": p.time_data / total}
        print(f"{workers} loader process(es): {max(rates):.0f} images/s", flush=True)
    out["loop"] = loops
    return out


def _sync(device) -> None:  # noqa: ANN001
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- 3., 4., 5.: the worker command itself -------------------------------------------------
def worker(args: list[str], timeout: float, ranks: int = 1) -> dict:
    """`python -m mlbench_worker ARGS` with a metrics file; its summary, or what failed."""
    from common import bounded, launcher_prefix, mpi_env

    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        argv = [sys.executable, "-m", "mlbench_worker", *args, "--metrics-file", str(metrics)]
        if ranks > 1:
            argv = [*launcher_prefix(ranks), *argv]
        start = time.perf_counter()
        # The data folder through the environment: the backend benchmark has no --data-dir.
        code, output = bounded(argv, timeout, env=mpi_env(MLBENCH_DATA_DIR=str(Path(tmp))))
        wall = time.perf_counter() - start
        if code != 0:
            return {"ok": False, "exit": code, "tail": _tail(output)}
        lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        summary = next((x for x in reversed(lines) if x.get("type") == "summary"), None)
        return {"ok": True, "wall_seconds": wall, "summary": summary}


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-1500:]


SHORT = ["resnet20-cifar10", "--dataset", "synthetic", "--max-epochs", "1", "--log-every", "1000"]


def section_nccl(device: str, quick: bool) -> dict:
    """NCCL on the device: one rank of each implementation through --backend nccl (the
    process group's set-up and the all-reduce path; NCCL refuses two ranks on one GPU), and
    the communication benchmark's 2 ranks sharing the GPU over mpi and gloo, which stage
    device tensors through the host."""
    if device != "cuda":
        return {"skipped": "nccl needs --device cuda"}
    out = {}
    for implementation in ("torch-ddp", "reference"):
        out[f"{implementation} nccl"] = worker(
            [*SHORT, "--device", "cuda", "--implementation", implementation, "--backend",
             "nccl", "--train-images", "2560", "--test-images", "500"],
            timeout=20,
        )  # fmt: skip
    out["backend_benchmark mpi,gloo (2 ranks, 1 GPU)"] = worker(
        ["backend-benchmark", "--device", "cuda", "--backend", "mpi,gloo", "--max-size",
         "64MiB", "--time-budget", "12"],
        timeout=28,
        ranks=2,
    )  # fmt: skip
    return out


# 2 ranks sharing the one GPU over mpi (device tensors staged through the host): one rank
# would send nothing, and the algorithms' CUDA paths (compression, memories) would not run.
RUNS = {
    "allreduce": [],
    "powersgd": ["--algorithm", "powersgd"],
    "topk": ["--algorithm", "topk"],
    "signsgd": ["--algorithm", "signsgd"],
    "localsgd": ["--algorithm", "localsgd"],
    "decentralized": ["--algorithm", "decentralized"],
    "torch-ddp (gloo)": ["--implementation", "torch-ddp", "--backend", "gloo"],
}


def section_algorithms(device: str, quick: bool) -> dict:
    images = "1280" if quick else "5120"
    out = {}
    for label, extra in RUNS.items():
        r = worker(
            [*SHORT, "--device", device, "--train-images", images, "--test-images", "500",
             *extra],
            timeout=22,
            ranks=2,
        )  # fmt: skip
        if r["ok"] and r["summary"]:
            s = r["summary"]
            r = {"ok": True, "images_per_sec": s.get("images_per_sec"),
                 "step_seconds": _step(s), "comm_share": s.get("comm_share"),
                 "wall_seconds": r["wall_seconds"]}  # fmt: skip
        out[label] = r
        print(f"{label}: {json.dumps(r)[:300]}", flush=True)
    out["tensorflow"] = {"skipped": "not installed on the GPU image (an optional extra)"}
    return out


def _step(summary: dict) -> float | None:
    ips = summary.get("images_per_sec")
    return 128 / ips if ips else None


def section_target(device: str, quick: bool) -> dict:
    # A budget, so that a run that misses the target still ends with its summary.
    args = ["resnet20-cifar10", "--dataset", "synthetic", "--target", "light", "--device", device,
            "--log-every", "1000", "--time-budget", "25"]  # fmt: skip
    if quick:
        args += ["--train-images", "1280", "--test-images", "500", "--max-epochs", "2"]
    r = worker(args, timeout=LIMITS["target"] - 10)
    if r["ok"] and r["summary"]:
        s = r["summary"]
        keep = ("time_to_target", "reached", "epochs", "images_per_sec", "final_val_accuracy",
                "dataset", "comm_share", "target", "target_accuracy", "elapsed", "device")  # fmt: skip
        r["summary"] = {k: v for k, v in s.items() if k in keep or "target" in k}
    return r


# --- the driver ----------------------------------------------------------------------------
def environment(device: str) -> dict:
    import platform

    import torch

    info: dict = {"python": platform.python_version(), "torch": torch.__version__}
    if device == "cuda" and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, capability=f"{p.major}.{p.minor}",
                    memory_gib=round(p.total_memory / 2**30, 1), cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())  # fmt: skip
    try:
        from mpi4py import MPI

        info["mpi"] = MPI.Get_library_version().splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - reported, the other sections go on
        info["mpi"] = f"unavailable: {exc}"
    info["cpus"] = os.cpu_count()
    return info


def run_section(name: str, device: str, quick: bool, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--device", device]
    if quick:
        cmd.append("--quick")
    start = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MLBENCH_MASTER_URL", None)
    from common import bounded

    code, text = bounded(cmd, LIMITS[name], env=env, cwd=REPO)
    result_line = next((x for x in text.splitlines() if x.startswith("RESULT ")), None)
    result = json.loads(result_line[7:]) if result_line else {"failed": code, "tail": _tail(text)}
    result["section_seconds"] = round(time.perf_counter() - start, 1)
    _record(out, name, result)
    print(f"== {name} ({result['section_seconds']} s)\n{text[-1200:]}", flush=True)
    return result


def _record(out: Path, name: str, result: dict) -> None:
    """Add a section's result to OUT/gpu-results.json, rewritten whole each time (a lent
    machine sends back only a few files, so every section shares this one)."""
    path = out / "gpu-results.json"
    everything = json.loads(path.read_text()) if path.exists() else {}
    everything[name] = result
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(everything, indent=1))
    partial.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes: a check of the script")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-results"))
    parser.add_argument("--only", help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        fn = globals()[f"section_{args.child}"]
        print("RESULT " + json.dumps(fn(args.device, args.quick)), flush=True)
        return
    if args.device == "cuda" and not _cuda_available():
        # `make bench` runs every bench_*.py; on a machine without a GPU this one has nothing
        # to measure.
        print("no CUDA device here: the GPU checks run on a lent GPU (tests/benchmarks/"
              "gpu_lease.sh); --device cpu --quick checks the script itself")  # fmt: skip
        return summary_table({}, {}, "no CUDA device on this machine")  # ratios: not measured
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(args.device)
    _record(out, "environment", env)
    print(json.dumps(env), flush=True)
    results = {}
    for name in args.only.split(",") if args.only else SECTIONS:
        results[name] = run_section(name, args.device, args.quick, out)
    summary_table(env, results)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def summary_table(env: dict, results: dict, why: str = "") -> None:
    """The headline numbers and ratios as one table beside the other benchmarks' (common.
    write_results); a section that failed (details in its JSON) or no GPU (`why`) says so."""
    from common import ratio, write_results

    def rate(x: object) -> str:
        return f"{x:,.0f}" if isinstance(x, (int, float)) else "-"

    rows = []
    loop = results.get("loop1a", {})
    for label in VARIANTS:
        if isinstance(loop.get(label), dict):
            v = loop[label]
            rows.append([f"task 1a loop, {label}", rate(max(v["ours"])), rate(max(v["plain"])),
                         f"{v['ratio']:.3f} (goal >= 0.97)"])  # fmt: skip
    imagenet = results.get("imagenet", {})
    if "model_alone" in imagenet:
        rows.append(["task 1b ResNet-50, model alone", rate(imagenet["model_alone"]), "-", "-"])
        for workers, v in imagenet.get("loop", {}).items():
            rows.append([f"task 1b loop, {workers} loader process(es)",
                         rate(v["images_per_sec"]), "-", f"data {v['data_share']:.0%}"])  # fmt: skip
    for label, v in results.get("algorithms", {}).items():
        if isinstance(v, dict) and v.get("ok"):
            rows.append([f"1 rank, {label}", rate(v["images_per_sec"]), "-", "-"])
    for name, v in results.items():
        if "failed" in v:
            rows.append([f"section {name}", "failed", "-", str(v["failed"])])

    def judged(measure: str, value: float | None, section: str) -> dict:
        fate = "failed" if "failed" in results.get(section, {}) else "gave no result"
        return ratio(measure, value, ">= 0.97",
                     "" if value is not None else why or f"section {section} {fate}")  # fmt: skip

    ratios = [judged(f"task 1a loop, {label}: ours / plain PyTorch loop, images/s",
                     v["ratio"] if isinstance(v := loop.get(label), dict) else None, "loop1a")
              for label in VARIANTS]  # fmt: skip
    best = max((v["images_per_sec"] for v in imagenet.get("loop", {}).values()), default=0)
    ratios.append(judged("task 1b ResNet-50 loop (best loader count) / the model alone, images/s",
                         best / imagenet["model_alone"] if best else None, "imagenet"))  # fmt: skip
    write_results("gpu", f"GPU checks on {env.get('gpu', 'no GPU')}",
                  ["measure", "ours (images/s)", "plain loop", "note"], rows, results,
                  ratios=ratios)  # fmt: skip


if __name__ == "__main__":
    main()
