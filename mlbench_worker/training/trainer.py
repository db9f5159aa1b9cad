# Over 400 lines: the Trainer is one loop, read top to bottom (steps, reports, evaluation).
"""The training loop of every task: data-parallel SGD, ranks combined by the run's algorithm.

Read `Trainer.fit` top to bottom: epochs of `train_one_epoch`, each ending with `evaluate`,
goal tracking and a checkpoint, until the target accuracy is reached, the time budget is
spent or the last epoch is done.

The benchmark clock starts at the first training step (after data loading and model set-up,
behind a barrier so all ranks start together) and runs through evaluation and checkpoints.
Each step's time is split into data (batch gathered, augmented, on the device), compute
(forward, backward, optimizer step) and communication (the algorithm's messages: the
gradient all-reduce by default; algorithms/ has the others, behind one interface,
`self.exchange`, that the step calls after backward and after the optimizer's step).
Each step also records `comm_bytes`, the bytes this rank sent (algorithms/interface.py defines
them), posted like the timings.

With overlap (the default, allreduce_exchange.BucketedAllreduce), most of the all-reduce runs during
backward, so two communication times are kept:

- ``time_comm``: the EXPOSED communication, the wait after backward until every bucket is
  summed (what overlap could not hide; the step is this much longer than its computation);
- ``time_comm_total``: the time during which at least one bucket was in flight: the
  exposed wait plus the in-flight time during backward. A bucket counts as in flight from
  its start until its completion is seen, which is checked at every parameter's gradient
  hook, so it may be over-counted by up to one parameter's backward.

Without overlap both are the flat all-reduce's time. The data/compute/exposed split still
adds up to the step time; the total overlaps compute.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker import algorithms
from mlbench_worker.algorithms.interface import Exchange, Parts
from mlbench_worker.algorithms.registry import Loaded
from mlbench_worker.algorithms.wire import Wire
from mlbench_worker.data.loader import Batches, shard_indices
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation.predictions import CLASS
from mlbench_worker.training.algorithm_guard import Guard
from mlbench_worker.training.comm import Communicator, FlatGradients, average_buffers
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.prediction_sink import PredictionSink, Shard
from mlbench_worker.training.progress import (  # the step's bookkeeping, shared with TensorFlow's
    CORRECT,
    IMAGES,
    LOG_SECONDS,
    LOSS,
    REPORT,
    STOP,
    Progress,
    post_report,
    record_evaluation,
    run_epochs,
)
from mlbench_worker.training.progress import Interval as _Interval
from mlbench_worker.training.recipe import (  # where they lived first: still importable here
    Goal,
    Schedule,
)


class Trainer:
    """Holds everything one rank needs to train; `fit()` runs the benchmark.

    A task with another kind of model or data overrides the hooks `epoch_indices`,
    `forward_backward` and `evaluate` (task 2's linear models: mlbench_worker/tasks/epsilon/), and
    names its catalogue entry in `task`, whose throughput metric and unit it reports.
    """

    task = catalogue.DEFAULT_TASK  # task 1a: every ResNet task counts images
    # Why a trainer sums its gradients with one flat all-reduce whatever is asked (None: it
    # may overlap). Overlap needs gradients that autograd accumulates, one backward a step.
    flat_only: str | None = None

    @property
    def throughput_metric(self) -> str:
        return catalogue.get(self.task).throughput_metric

    @property
    def throughput_unit(self) -> str:
        return catalogue.get(self.task).throughput_unit

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: Schedule,
        goal: Goal,
        comm: Communicator,
        train_data: Batches,
        test_data: Batches,
        reporter: Reporter,
        *,
        seed: int,
        device: torch.device,
        amp: bool = False,
        overlap: bool = True,
        bucket_mb: float | None = None,
        log_every: int = 50,
        checkpoint: Callable[[Trainer], None] | None = None,
        print_fn: Callable[[str], None] = print,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.schedule = schedule
        self.goal = goal
        self.comm = comm
        self.train_data = train_data
        self.test_data = test_data
        self.reporter = reporter
        self.seed = seed
        self.device = device
        self.log_every = log_every
        self.checkpoint = checkpoint
        self.print = print_fn if comm.rank == 0 else (lambda _msg: None)
        self.grads = FlatGradients(list(model.parameters()), extra=5)
        self.amp_dtype = (
            (torch.float16 if device.type == "cuda" else torch.bfloat16) if amp else None
        )
        self.scaler = torch.amp.GradScaler("cuda") if amp and device.type == "cuda" else None
        # The scalar slots as numpy on CPU: setting them costs nanoseconds, not a torch op each.
        self.extra_host = self.grads.extra.numpy() if device.type == "cpu" else None
        self.exchange: Exchange | None = None
        # The counted communicator every algorithm talks through: the trainer's, so the
        # trainer counts the bytes (for an outside algorithm, `measured` is what is reported).
        self.wire = Wire(comm)
        self.wire.exempt = self.grads.extra
        self.guard: Guard | None = None  # set_algorithm's (outside algorithms, or asked for)
        self.algorithm_options: dict = {"precision": "fp32"}
        self.set_algorithm("allreduce", self.algorithm_options, overlap, bucket_mb)
        # Cross-entropy label smoothing (task 1b's option; 0 is the plain loss of task 1a).
        self.label_smoothing = 0.0
        self.hit_rates: list[float] = []  # the last evaluation's accuracies, top-1 first
        # Where each evaluation's predictions go (rank_body.py opens it; None: nowhere), and this
        # rank's part of the last evaluation, handed over once its metrics are reported.
        self.predictions: PredictionSink | None = None
        self.shard: Shard | None = None
        self.progress = Progress()
        self.clock_start: float | None = None
        self.steps_per_epoch = train_data.steps(len(self.epoch_indices(0)))

    @property
    def allreduce(self) -> Exchange:
        """The exchange (its first name, when every run all-reduced its gradients)."""
        assert self.exchange is not None
        return self.exchange

    @property
    def algorithm(self) -> str:
        return self.allreduce.name

    def set_overlap(self, enabled: bool, bucket_mb: float | None = None) -> None:
        """All-reduce gradients in buckets overlapped with backward (`enabled`), or flat, by
        the rules of allreduce_exchange.choose, in the precision already chosen (fp32 after another
        algorithm)."""
        same = self.algorithm == "allreduce"
        options = self.algorithm_options if same else {"precision": "fp32"}
        self.set_algorithm("allreduce", options, enabled, bucket_mb)

    def set_algorithm(
        self,
        name: str | Loaded,
        options: dict,
        overlap: bool = True,
        bucket_mb: float | None = None,
        implementation: str = "reference",
        stall_seconds: float | None = None,
    ) -> None:
        """Combine the ranks' work with algorithm `name` (options checked and complete, as
        algorithm_catalogue.check returns them). For allreduce, `overlap` and `bucket_mb`
        follow allreduce_exchange.choose's rules (its note, CUDA with the mpi backend, printed once);
        other algorithms exchange after backward only and refuse a bucket size.
        `implementation` torch-ddp hands the all-reduce to DistributedDataParallel
        (algorithms/ddp.py), which always overlaps; `bucket_mb` is then its bucket cap.
        `name` may be what algorithms.registry.load returned (an outside algorithm: its
        calls are guarded, algorithm_guard.py, and its bytes are the wire's measured count)."""
        loaded = name if isinstance(name, Loaded) else None
        name = loaded.name if loaded else name
        if name != "allreduce" and bucket_mb is not None:
            raise WorkerError(
                f"--bucket-mb sets the all-reduce's buckets: it does not apply to --algorithm {name}"
            )
        if name != "allreduce" and self.scaler is not None:
            raise WorkerError(
                f"--algorithm {name} cannot be combined with float16 loss scaling (--amp on "
                "CUDA): the scaler's factor changes between steps and ranks; use allreduce or "
                "--amp-dtype bfloat16"
            )
        parts = Parts(self.model, self.grads, self.comm, self.seed, self.optimizer, self.wire)
        self.wire.strict = self.outside = loaded is not None and not loaded.builtin
        if implementation == "torch-ddp":
            from mlbench_worker.algorithms import ddp

            self.exchange = ddp.replace(self.exchange, parts, name, options, overlap,
                                        bucket_mb, self.flat_only)  # fmt: skip
        else:
            self.exchange = algorithms.make(
                loaded or name, parts, options, overlap=overlap, bucket_mb=bucket_mb,
                flat_only=self.flat_only, task=self.task, previous=self.exchange,
                note=self._note_once,
            )  # fmt: skip
        self.algorithm_options = dict(options)
        if self.guard is not None:
            self.guard.close()
        watch = self.outside or stall_seconds is not None
        self.guard = Guard(self.algorithm, self.comm.rank, self.comm.world.Abort, stall_seconds,
                           loaded.path if loaded else None) if watch else None  # fmt: skip

    def _note_once(self, message: str) -> None:
        if not getattr(self, "_noted", False):  # once, not at every call
            self.print(message)
            self._noted = True

    def allreduce_config(self) -> dict:
        """How gradients are summed, for the run's recorded configuration."""
        a = self.allreduce
        return {
            "overlap": a.overlap,
            "bucket_mb": round(a.bucket_bytes / 2**20, 4) if a.overlap else None,
            "buckets": len(a.buckets) if a.buckets else None,
        }

    def full_allreduce_bytes(self) -> int:
        """What one fp32 all-reduce of this model's gradients counts: the compression
        ratio's numerator."""
        return self.grads.numel * 4

    # --- the clock --------------------------------------------------------------------
    def elapsed(self) -> float:
        """Seconds on the benchmark clock (0 before the first training step)."""
        if self.clock_start is None:
            return self.progress.elapsed_before
        return self.progress.elapsed_before + time.perf_counter() - self.clock_start

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # --- the benchmark ------------------------------------------------------------------
    def fit(self) -> Progress:
        """Train until the goal; always ends with an evaluation of the final model."""
        self.comm.barrier()
        self.clock_start = time.perf_counter()
        save = (lambda: self.checkpoint(self)) if self.checkpoint is not None else None
        return run_epochs(
            self.progress, self.goal.max_epochs, self.train_one_epoch, self.evaluate_and_track, save
        )

    def train_one_epoch(self, epoch: int) -> bool:
        """One pass over this rank's shard; False when the time budget stopped it early."""
        p = self.progress
        model, grads, comm, exchange = self.model, self.grads, self.comm, self.allreduce
        model.train()
        indices = self.epoch_indices(epoch)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch * 1_009 + comm.rank)
        batches = self.train_data.iterate(indices, gen)
        interval = _Interval()
        budget = self.goal.time_budget
        host = self.extra_host
        guard = self.guard
        call = guard.call if guard is not None else (lambda fn, *args: fn(*args))
        for i in range(self.steps_per_epoch):
            t0 = time.perf_counter()
            x, y = next(batches)
            self._sync()
            t1 = time.perf_counter()

            if guard is not None:
                guard.step = p.step + 1
            self.wire.reset()  # the harness's count, whatever the algorithm's begin does
            call(exchange.begin)  # zeroes the gradients (and arms the bucket hooks)
            self.forward_backward(x, y)
            # The step's rate, set after forward_backward (a task's schedule may depend on
            # the batch) and before the exchange (EF-SignSGD and top-k scale by it).
            lr = self.schedule(p.step)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            n = y.shape[0]
            stop_now = 1.0 if budget is not None and self.elapsed() >= budget else 0.0
            report_now = 1.0 if comm.rank == 0 and t1 - interval.start >= LOG_SECONDS else 0.0
            if host is not None:
                host[IMAGES], host[STOP], host[REPORT] = n, stop_now, report_now
            else:
                grads.extra[IMAGES] = n
                grads.extra[STOP] = stop_now
                grads.extra[REPORT] = report_now
            self._sync()
            t2 = time.perf_counter()

            hidden = call(exchange.finish)  # gradients (and the scalar slots) exchanged
            self._sync()
            t3 = time.perf_counter()

            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                call(exchange.step, self.optimizer)  # the optimizer's step, or the algorithm's own
            totals = grads.extra.tolist()  # global sums; also waits for the step on CUDA
            t4 = time.perf_counter()
            call(exchange.after_step, p.step + 1)  # model averaging (local SGD)
            self._sync()
            t5 = time.perf_counter()

            p.step += 1
            p.images += int(totals[IMAGES])
            p.train_seconds += t5 - t0
            interval.steps += 1
            interval.sums += totals[:3]
            interval.data += t1 - t0
            waited = exchange.waited_in_backward  # torch-ddp: its all-reduce ends in backward
            interval.compute += (t2 - t1) - waited + (t4 - t3)
            interval.comm += (t3 - t2) + waited + (t5 - t4)
            interval.comm_total += (t3 - t2) + waited + (t5 - t4) + hidden
            interval.bytes += self.wire.measured if self.outside else exchange.comm_bytes
            if guard is not None:
                guard.step_done(t5 - t0, exchange.claimed_bytes)
            stop = totals[STOP] > 0
            last = i == self.steps_per_epoch - 1 or stop
            if interval.steps and (p.step % self.log_every == 0 or last or totals[REPORT] > 0):
                p.epochs_done = epoch + (i + 1) / self.steps_per_epoch
                self._report_interval(interval, lr)
            if stop:
                p.stop_reason = "time budget spent"
                return i == self.steps_per_epoch - 1
        return True

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """This rank's training indices for `epoch`, in the order they are visited."""
        return shard_indices(len(self.train_data), self.comm.rank, self.comm.size, self.seed, epoch)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One batch: gradients (scaled by 1/K) into the flat buffer, and the batch's loss sum
        and correct predictions into the LOSS and CORRECT slots that ride along."""
        with torch.autocast(
            self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
        ):
            out = (self.allreduce.train_module or self.model)(x)
            loss = F.cross_entropy(out, y, label_smoothing=self.label_smoothing)
        # Scaling the loss by 1/K makes the all-reduced sum the average gradient (an
        # algorithm whose ranks step on their own gradients asks for 1).
        scale = self.allreduce.grad_scale
        scaled = loss * scale if scale != 1.0 else loss
        (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        extra = self.grads.extra
        extra[LOSS] = loss.detach().float() * y.shape[0]
        extra[CORRECT] = (out.argmax(1) == y).sum()

    def _report_interval(self, interval: _Interval, lr: float) -> None:
        """Post the interval's global training metrics and every rank's timings (rank 0)."""
        p = self.progress
        now = time.perf_counter()
        mine = (interval.data, interval.compute, interval.comm, interval.comm_total)
        p.time_data += mine[0]
        p.time_compute += mine[1]
        p.time_comm += mine[2]
        p.time_comm_total += mine[3]
        p.comm_bytes += interval.bytes
        claim = self.guard.claimed if self.guard is not None else 0.0
        per_step = [t / interval.steps for t in (*mine, interval.bytes, claim)]
        per_rank = self.comm.gather_object(per_step)
        if self.comm.rank == 0:
            assert per_rank is not None
            meta = {
                "epoch": round(p.epochs_done, 4),
                "step": p.step,
                "elapsed": round(self.elapsed(), 3),
            }
            loss_sum, correct, images = interval.sums
            means = np.mean(per_rank, axis=0)
            post_report(
                self.reporter, meta, loss=loss_sum / images, accuracy=correct / images, lr=lr,
                epochs=p.epochs_done,
                throughput=(self.throughput_metric, images / max(now - interval.start, 1e-9)),
                timings=means[:4], comm_bytes=means[4], per_rank=per_rank,  # means: per step
            )  # fmt: skip
            if self.exchange.claimed_bytes is not None and self.guard is not None:
                self.guard.report_claim(self.reporter, meta, means[5], means[4], self.print)
            step_time = float(sum(means[:3]))  # the total overlaps compute: not part of it
            self.print(
                f"step {p.step:6d}  epoch {p.epochs_done:7.3f}  loss {loss_sum / images:.4f}  "
                f"acc {correct / images:.4f}  lr {lr:.4f}  "
                f"{images / max(now - interval.start, 1e-9):8.1f} {self.throughput_unit}  "
                f"comm {100 * means[2] / max(step_time, 1e-12):4.1f}% "
                f"(total {100 * means[3] / max(step_time, 1e-12):4.1f}%)  "
                f"elapsed {self.elapsed():8.1f}s"
            )
        interval.reset(time.perf_counter())
        if self.guard is not None:
            self.guard.claimed = 0.0

    # How many kinds of hits `hits` counts per batch (task 1b adds top-5 to top-1).
    HIT_KINDS = 1

    def predict(self, out: torch.Tensor) -> dict[str, torch.Tensor]:
        """This batch's predictions in the format's fields. The hits are counted from them
        (`hits`), so the evaluator grades exactly what the trainer counted."""
        return {CLASS: out.argmax(1)}

    def hits(self, predicted: dict[str, torch.Tensor], y: torch.Tensor) -> list[torch.Tensor]:
        """This batch's hits, HIT_KINDS counts; the first is top-1 (the goal's accuracy)."""
        return [(predicted[CLASS] == y).sum()]

    def keeps_predictions(self) -> list | None:
        """A list to collect an evaluation's batches in when the run writes predictions."""
        return [] if self.predictions is not None and self.predictions.enabled else None

    def keep_shard(self, indices: np.ndarray, kept: list | None) -> None:
        """This rank's part of the evaluation, from its (labels, predictions) batches; on the
        host once, at the end, not a copy per batch."""
        if kept is None:
            return
        labels = [y for y, _ in kept]
        names = kept[0][1] if kept else {}
        self.shard = Shard(
            np.asarray(indices),
            torch.cat(labels).cpu().numpy() if labels else np.zeros(0, np.int64),
            {n: torch.cat([p[n] for _, p in kept]).cpu().numpy() for n in names},
        )

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Global validation loss and accuracy: each rank a disjoint part of the test set.

        Every kind of hit's accuracy is kept in `hit_rates` (top-1 first)."""
        average_buffers(self.model, self.comm)  # the same batch-norm statistics everywhere
        self.model.eval()
        n = len(self.test_data)
        idx = np.arange(self.comm.rank, n, self.comm.size)
        sums = torch.zeros(2 + self.HIT_KINDS, dtype=torch.float64, device=self.device)
        kept = self.keeps_predictions()
        for x, y in self.test_data.iterate(idx):
            with torch.autocast(
                self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
            ):
                out = self.model(x).float()
            sums[0] += F.cross_entropy(out, y, reduction="sum")
            predicted = self.predict(out)
            for k, count in enumerate(self.hits(predicted, y), start=1):
                sums[k] += count
            sums[-1] += y.shape[0]
            if kept is not None:
                kept.append((y, predicted))
        loss_sum, *hits, count = self.comm.allreduce_sums(sums.tolist())
        self.model.train()
        self.keep_shard(idx, kept)
        self.hit_rates = [float(h / max(count, 1)) for h in hits]
        return float(loss_sum / max(count, 1)), self.hit_rates[0]

    def evaluate_and_track(self) -> None:
        """Evaluate, post epoch metrics, and record the first time the target is reached;
        then the evaluation's predictions go to the sink, with the same step and clock."""
        with self.allreduce.evaluation():  # the replicas' average, for algorithms whose differ
            val_loss, val_acc = self.evaluate()
        record_evaluation(
            self.progress, val_loss, val_acc, self.elapsed(), self.goal, self.reporter,
            self.comm.rank, self.print,
        )  # fmt: skip
        if self.predictions is not None and self.shard is not None:
            self.predictions.submit(self.shard, self.progress.history[-1])
            self.shard = None

    def final_onnx(self) -> bytes:
        """Rank 0, in the evaluation context: the final model in ONNX as the evaluator audits
        it (torch_export.py: raw test inputs in, scores out); task 3's trainers export their
        own contract."""
        from mlbench_worker.training.torch_export import exportable, onnx_bytes

        module, example = exportable(self.model, self.test_data)
        return onnx_bytes(module, example)

    def comm_share(self) -> float:
        """Exposed communication's share of this rank's step time, 0..1."""
        p = self.progress
        total = p.time_data + p.time_compute + p.time_comm
        return p.time_comm / total if total > 0 else 0.0

    def comm_share_total(self) -> float:
        """All communication (hidden or not) relative to this rank's step time (may exceed
        comm_share by up to the compute it overlapped)."""
        p = self.progress
        total = p.time_data + p.time_compute + p.time_comm
        return p.time_comm_total / total if total > 0 else 0.0

    def throughput(self) -> float:
        """Training throughput of all ranks together (evaluation excluded), in the task's
        unit (images or samples per second: `throughput_metric` names it)."""
        p = self.progress
        return p.images / p.train_seconds if p.train_seconds > 0 else math.nan
