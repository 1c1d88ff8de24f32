"""The loop itself: :func:`run_training` starts (or resumes) a :class:`Run`, trains it step by step, and
finishes it (averaging, the final measure, the last checkpoint, the curves).

Besides the steps: where it runs (:func:`choose_device`, :class:`Processes` for DDP), when it stops
(:class:`StopRequest`), the optimiser (:func:`make_optimizer`), the paper's averaging (:func:`average_weights`),
what it measures (:class:`Throughput`) and how it compiles (:func:`compiled`).
"""
from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
from tqdm import tqdm

from .. import checkpoint
from ..flops import peak_flops
from .config import CUDA_GRAPH_MODES, LoopConfig
from .files import check_same_run, draw_curves, save_json
from .task import Task, TrainingError


@dataclass
class RunResult:
    run_dir: Path
    model: torch.nn.Module
    step: int
    metrics: dict[str, list[dict[str, float]]]


def choose_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise TrainingError(f"{name!r} is not a device: use auto, cpu, cuda or cuda:<index>") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TrainingError(f"device {name!r} was asked for, but this machine has no CUDA GPU: use --device cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise TrainingError(f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s)")
    elif device.type != "cpu":
        raise TrainingError(f"device {name!r} is not supported: use auto, cpu, cuda or cuda:<index>")
    return device


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks the loop to stop at the end of the current step, so that the
    checkpoint it then writes is exactly the state between two steps; a second one stops at once,
    unsaved."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # only there can signals be caught
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, previous)


def make_optimizer(model: torch.nn.Module, weight_decay: float = 0.0, lr: float = 0.0,
                   fused: bool = False) -> torch.optim.Optimizer:
    """The paper's Adam (beta = (0.9, 0.98), eps = 1e-9); with weight decay, the same steps plus the decoupled
    shrinking of AdamW, which the paper does not use and the G2P CPU preset measured better with. The loop
    sets the rate at every step; ``lr`` is where it starts. ``fused``: PyTorch's one-pass kernel for the
    same update."""
    settings = {"lr": lr, "betas": (0.9, 0.98), "eps": 1e-9, "fused": fused or None}
    if weight_decay:
        return torch.optim.AdamW(model.parameters(), weight_decay=weight_decay, **settings)
    return torch.optim.Adam(model.parameters(), **settings)


class Processes:
    """This process's place among those ``torchrun`` started (one process, rank 0, without it).

    Each process trains on its share of every global batch; DistributedDataParallel averages the
    gradients, and the loss is scaled so that the average is the gradient of the global batch's
    loss, the mean over all of its tokens. Only rank 0 measures, draws and writes files.
    """

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def start(self, device: torch.device) -> None:
        if self.distributed and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")

    def share(self, indices: Sequence[int]) -> list[int]:
        if len(indices) < self.world:
            raise TrainingError(f"a batch of {len(indices)} examples cannot be shared by {self.world} processes: "
                                "raise the batch size")
        return list(indices[self.rank :: self.world])

    def total(self, *values: float, device: torch.device) -> list[float]:
        """Sums over the processes (the values themselves with one process)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        return t.tolist()

    def wait(self) -> None:
        if self.distributed:
            torch.distributed.barrier()


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def average_weights(snapshots: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of several state dicts; tensors that are not weights (integers) come
    from the last one."""
    last = snapshots[-1]
    out = {}
    for name, value in last.items():
        if value.is_floating_point():
            out[name] = (sum(s[name].double() for s in snapshots) / len(snapshots)).to(value.dtype)
        else:
            out[name] = value.clone()
    return out


@dataclass
class Progress:
    """Where a run stands between two steps: what its checkpoint holds besides the weights, the
    optimiser and the random state."""

    step: int = 0
    epoch: int = 0
    position: int = 0  # batches of this epoch already trained on
    metrics: dict[str, list[dict[str, float]]] = field(default_factory=lambda: {"train": [], "dev": []})
    elapsed: float = 0.0  # seconds trained, over every session of the run
    #: for averaging: the weights at the last multiples of average_every
    snapshots: list[dict[str, torch.Tensor]] = field(default_factory=list)


class Throughput:
    """The training measures of a window of steps: mean loss, tokens/s, TFLOP/s and, where the
    device's peak is known, model FLOPs utilisation (the matrix products' share of the peak)."""

    def __init__(self, every: int, peak: float | None, world: int) -> None:
        self.every, self.peak, self.world = every, peak, world
        self._open()

    def _open(self) -> None:
        self.loss, self.tokens, self.flops, self.start = 0.0, 0, 0.0, time.perf_counter()

    def add(self, loss: float, tokens: float, flops: float) -> None:
        self.loss += loss
        self.tokens += int(tokens)
        self.flops += flops

    def close(self, step: int, lr: float, elapsed: float) -> dict[str, float] | None:
        """The window's record at a multiple of ``every`` steps (then a new window opens), else None."""
        if step % self.every:
            return None
        seconds = max(time.perf_counter() - self.start, 1e-9)
        record = {"step": step, "loss": self.loss / self.every, "lr": lr, "tokens_per_s": self.tokens / seconds,
                  "tflops_per_s": self.flops / seconds / 1e12, "elapsed_s": elapsed}
        if self.peak:
            record["mfu"] = record["tflops_per_s"] * 1e12 / (self.peak * self.world)
        self._open()
        return record


def shown(record: dict[str, float]) -> dict[str, str]:
    """A training record as the progress bar shows it."""
    out = {"loss": f"{record['loss']:.3f}", "lr": f"{record['lr']:.2e}", "tok/s": f"{record['tokens_per_s']:.0f}"}
    if "mfu" in record:
        out["MFU"] = f"{record['mfu']:.1%}"
    return out


def compiled(module: torch.nn.Module, config: LoopConfig) -> torch.nn.Module:
    """``module`` under torch.compile with the config's backend and mode. The loop keeps the
    uncompiled module for its checkpoints, so that their keys carry no ``_orig_mod.`` prefix."""
    if config.compile_backend != "inductor":  # the other backends take no mode
        return torch.compile(module, backend=config.compile_backend)
    return torch.compile(module, mode=None if config.compile_mode == "default" else config.compile_mode)


def run_folder(config: LoopConfig) -> Path:
    if not config.run_dir:
        raise TrainingError("no run folder: set run_dir (--run-dir)")
    return Path(config.run_dir)


def already_holds_a_run(run_dir: Path) -> TrainingError:
    return TrainingError(f"{run_dir} already holds a run: continue it with --resume {run_dir}, or choose another --run-dir")


def refuse_compiled_bf16_course_attention(task: Task, device: torch.device, bf16: bool) -> None:
    """torch.compile's inductor, on a CPU, with bf16 autocast, computes NaN gradients through the chapters'
    attention (measured with torch 2.13: the backward of the max that the course's softmax subtracts), so
    such a run would train nothing for its whole budget. F.scaled_dot_product_attention compiles correctly,
    and fp32 does too. Whether the model computes the chapters' attention is the task's to say."""
    config = task.config
    if (config.compile and config.compile_backend == "inductor" and bf16 and device.type == "cpu"
            and task.course_attention()):
        offers_fused = "attention" in config.KERNEL_PATHS and config.parts != "mine"
        fused = ", or --attention fused" if offers_fused else ""
        raise TrainingError("torch.compile with bf16 on the CPU computes NaN gradients through the chapters' "
                            f"attention (a fault of the compiler's CPU code): use --precision fp32{fused}, "
                            "or train uncompiled")


def uses_cuda_graphs(config: LoopConfig, device: torch.device) -> bool:
    """Whether the compiled steps are replayed as CUDA graphs (inductor captures them on CUDA only)."""
    return (config.compile and device.type == "cuda" and config.compile_backend == "inductor"
            and config.compile_mode in CUDA_GRAPH_MODES)


class Run:
    """One session of a run: the task, where it trains, its model and optimiser, and its progress.

    :func:`run_training` reads top-down: start (or resume) the run, train until the last step, the
    time limit or a stop request, then finish: average, measure, save and draw.
    """

    def __init__(self, task: Task, resume: bool) -> None:
        config = self.config = task.config
        self.task = task
        self.run_dir = run_folder(config)
        self.checkpoint_path = self.run_dir / checkpoint.FILE
        self.processes = Processes()
        self.device = choose_device(config.device)
        if self.processes.distributed and self.device.type == "cuda":
            self.device = torch.device("cuda", self.processes.local_rank)  # one GPU per process
        self.bf16 = config.bf16(self.device)
        refuse_compiled_bf16_course_attention(task, self.device, self.bf16)
        saved = self._saved_run() if resume else self._no_run_yet()
        if config.parts == "mine":
            task.use_learner_parts(print if self.processes.main else lambda line: None)
        task.prepare()
        self.processes.start(self.device)
        torch.manual_seed(config.seed)
        self.model = task.build_model().to(self.device)
        self.optimizer = make_optimizer(self.model, config.weight_decay, fused=config.fused_adam)
        self.progress = Progress()
        self.averaged: dict[str, torch.Tensor] | None = None  # set when training ends
        if saved is not None:
            self._restore(saved)
        if self.processes.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            save_json(self.run_dir / "config.json", asdict(config))
        self.forward = self._forward()
        self.graphs = uses_cuda_graphs(config, self.device)
        self.saved_step = self.progress.step if saved is not None else None  # what the run folder holds

    def _saved_run(self) -> dict[str, Any]:
        if not self.checkpoint_path.is_file():
            raise TrainingError(f"nothing to resume: {self.checkpoint_path} does not exist")
        try:
            saved = checkpoint.load(self.checkpoint_path)
        except checkpoint.CheckpointError as exc:
            raise TrainingError(str(exc)) from None
        check_same_run(saved[checkpoint.CONFIG], self.config, self.run_dir)
        return saved

    def _no_run_yet(self) -> None:
        if self.checkpoint_path.exists():
            raise already_holds_a_run(self.run_dir)

    def _restore(self, saved: dict[str, Any]) -> None:
        if not checkpoint.resumable(saved):
            raise TrainingError(f"{self.checkpoint_path} is an exported model, not a run: it cannot be resumed")
        self.model.load_state_dict(saved[checkpoint.MODEL])
        self.optimizer.load_state_dict(saved[checkpoint.OPTIMIZER])
        self.progress = Progress(saved[checkpoint.STEP], saved[checkpoint.EPOCH], saved[checkpoint.POSITION],
                                 saved[checkpoint.METRICS], saved[checkpoint.ELAPSED], saved.get(checkpoint.SNAPSHOTS, []))
        torch.set_rng_state(saved[checkpoint.RNG])
        if self.device.type == "cuda" and saved.get(checkpoint.CUDA_RNG) is not None:
            torch.cuda.set_rng_state(saved[checkpoint.CUDA_RNG], self.device)

    def _forward(self) -> torch.nn.Module:
        """The model as the steps call it: wrapped for DDP and compiled where asked."""
        forward: torch.nn.Module = self.model
        if self.processes.distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            forward = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=device_ids)
        if self.config.compile:
            forward = compiled(forward, self.config)
        return forward

    # -- training ------------------------------------------------------------------------------

    def train(self, show_progress: bool) -> bool:
        """Train until the last step, the time limit or a stop request; True when a request stopped it
        before either limit (the run is then saved to be resumed)."""
        config, progress = self.config, self.progress
        bar = tqdm(total=config.max_steps, initial=progress.step, desc="training", unit="step",
                   disable=not (show_progress and self.processes.main), dynamic_ncols=True)
        window = Throughput(max(1, min(50, config.eval_every)), peak_flops(self.device), self.processes.world)
        if config.precision == "auto" and show_progress and self.processes.main:
            print(f"precision auto: {'bf16' if self.bf16 else 'fp32'} on {self.device}", file=sys.stderr)
        self.started = time.perf_counter() - progress.elapsed
        self.model.train()
        out_of_time, interrupted = bool(config.time_limit and progress.elapsed >= config.time_limit), False
        with StopRequest() as stop_request:
            try:
                while progress.step < config.max_steps and not (out_of_time or interrupted):
                    batches = self.task.epoch_batches(progress.epoch)
                    if not batches:
                        raise TrainingError("an epoch has no batches: the training data is empty or smaller than one batch")
                    while progress.position < len(batches) and progress.step < config.max_steps:
                        out_of_time, interrupted = self.step(batches[progress.position], window, bar, stop_request)
                        if out_of_time or interrupted:
                            break
                    if progress.position >= len(batches):
                        progress.epoch, progress.position = progress.epoch + 1, 0
            finally:
                bar.close()
        return interrupted and not out_of_time

    def step(self, indices: Sequence[int], window: Throughput, bar: tqdm, stop_request: StopRequest) -> tuple[bool, bool]:
        """One optimiser step on one batch, then what is due after it (a record, an evaluation, a
        checkpoint); (out of time, stop requested), agreed by every process."""
        config, progress, processes, device = self.config, self.progress, self.processes, self.device
        batch = self.task.make_batch(processes.share(indices), device)
        all_count, all_tokens, all_flops = processes.total(batch.count, batch.tokens, batch.flops, device=device)
        progress.step += 1
        lr = self.task.rate(progress.step) * config.cooldown_scale(progress.step, progress.elapsed)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.graphs:  # a new step: the previous step's graph outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
            output = self.forward(*batch.inputs)
        loss = self.task.loss(output, batch)
        # The mean over this share's units, reweighted so that the processes' average is the mean
        # over the whole batch's.
        scaled = loss * (batch.count * processes.world / all_count) if processes.distributed else loss
        self.optimizer.zero_grad(set_to_none=True)
        scaled.backward()
        self.optimizer.step()
        progress.position += 1
        if config.average_last and progress.step % config.average_every == 0:
            progress.snapshots = [*progress.snapshots, snapshot(self.model)][-config.average_last :]
        progress.elapsed = time.perf_counter() - self.started
        out_of_time = bool(config.time_limit and progress.elapsed >= config.time_limit)
        loss_sum, stop, interrupted = processes.total(loss.item() * batch.count, float(out_of_time),
                                                      float(stop_request.requested), device=device)
        if not math.isfinite(loss_sum):  # the same total in every process: they all stop here
            raise TrainingError(self.diverged(loss_sum / all_count))
        window.add(loss_sum / all_count, all_tokens, all_flops)
        record = window.close(progress.step, lr, progress.elapsed)
        if record is not None:
            progress.metrics["train"].append(record)
            bar.set_postfix(shown(record))
        bar.update(1)
        if progress.step % config.eval_every == 0 and processes.main:
            progress.metrics["dev"].append({"step": progress.step, "elapsed_s": progress.elapsed, **self.measure(self.model)})
            bar.write(f"step {progress.step}: {self.task.report(progress.metrics['dev'][-1])}")
        if progress.step % config.checkpoint_every == 0:
            self.save_checkpoint()
        return stop > 0, interrupted > 0  # every process stops at the same step

    def diverged(self, loss: float) -> str:
        """Why the run stops when its loss is no longer a number: the weights that gave it are not saved."""
        kept = (f"{self.checkpoint_path} keeps step {self.saved_step}" if self.saved_step is not None
                else "nothing was saved before it")
        return (f"the training loss became {loss} at step {self.progress.step}, so the weights are no longer "
                f"numbers and training stops without saving them ({kept}). The usual causes: a rate too high "
                f"(--peak-lr), or a part that computes inf or NaN (with --parts mine, check your parts)")

    def measure(self, which: torch.nn.Module) -> dict[str, float]:
        measured = self.task.evaluate(which)
        self.model.train()
        return measured

    def save_checkpoint(self) -> None:
        if not self.processes.main:
            return
        progress = self.progress
        checkpoint.write(self.checkpoint_path, {
            **self.task.checkpoint_extra(),
            checkpoint.CONFIG: asdict(self.config), checkpoint.MODEL: self.model.state_dict(),
            checkpoint.OPTIMIZER: self.optimizer.state_dict(), checkpoint.STEP: progress.step,
            checkpoint.EPOCH: progress.epoch, checkpoint.POSITION: progress.position,
            checkpoint.METRICS: progress.metrics, checkpoint.ELAPSED: progress.elapsed,
            checkpoint.SNAPSHOTS: progress.snapshots, checkpoint.AVERAGED: self.averaged,
            checkpoint.RNG: torch.get_rng_state(),
            checkpoint.CUDA_RNG: torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
        })
        save_json(self.run_dir / "metrics.json", progress.metrics)
        self.saved_step = progress.step

    # -- the end -------------------------------------------------------------------------------

    def stop_interrupted(self) -> NoReturn:
        self.save_checkpoint()
        if self.processes.main:
            print(f"interrupted after step {self.progress.step}: `--resume {self.run_dir}` continues from here",
                  file=sys.stderr)
        raise KeyboardInterrupt

    def final_model(self) -> tuple[torch.nn.Module, int]:
        """The model the run ends with (the average of the last snapshots where it averages) and how
        many weights it averages (0: none)."""
        config, progress = self.config, self.progress
        if not config.average_last:
            return self.model, 0
        # the final weights are one of the averaged; they are already the last snapshot at a multiple of average_every
        at_snapshot = progress.snapshots and progress.step % config.average_every == 0
        last = (progress.snapshots if at_snapshot else [*progress.snapshots, snapshot(self.model)])[-config.average_last :]
        self.averaged = average_weights(last)
        with torch.random.fork_rng(devices=[]):  # a fresh model's initialisation must not move the saved random state
            final = self.task.build_model().to(self.device)
        final.load_state_dict(self.averaged)
        return final, len(last)

    def finish(self) -> RunResult:
        """Average, measure the final model, save, draw the curves and let the task finish."""
        config, progress = self.config, self.progress
        final, averaged = self.final_model()
        if self.processes.main:
            measured = self.task.evaluate_final(final)
            dev = progress.metrics["dev"]
            if measured is None and (config.average_last or not dev or dev[-1]["step"] != progress.step):
                measured = self.measure(final)  # the final model is measured
            if measured is not None:
                if config.average_last:
                    measured["averaged"] = averaged
                dev.append({"step": progress.step, "elapsed_s": progress.elapsed, **measured})
            self.save_checkpoint()
            draw_curves(progress.metrics, self.run_dir / "curves.png", self.task)
            self.task.finish(final, self.run_dir)
        self.processes.wait()
        return RunResult(self.run_dir, final, progress.step, progress.metrics)


def run_training(task: Task, resume: bool = False, progress: bool = True) -> RunResult:
    """Train (or, with ``resume``, continue) ``task``'s run in ``task.config.run_dir``, on ``threads`` CPU
    threads (the caller's count is restored afterwards)."""
    before = torch.get_num_threads()
    torch.set_num_threads(task.config.threads)
    try:
        run = Run(task, resume)
        if run.train(show_progress=progress):
            run.stop_interrupted()
        return run.finish()
    finally:
        torch.set_num_threads(before)
