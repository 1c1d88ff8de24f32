"""One training loop for every model of the course: the capstone's G2P Transformer, the GPT and the BERT.

What a model needs from training and what does not depend on the model are kept apart. The loop
owns the steps, the optimiser and its schedule, when to stop (a step count, a time limit, Ctrl-C or
SIGTERM), the checkpoint that ``--resume`` continues from exactly (random state included), the
paper's checkpoint averaging, the progress bar, the metrics and the curves, and the ways to run
(several processes with DistributedDataParallel, bf16 autocast, ``torch.compile``). A small *task*
object supplies the rest: the model, the batches, the loss and the evaluation.

Writing a new task::

    @dataclass(frozen=True)
    class MyConfig(LoopConfig):             # the loop's settings, then the task's own
        vocab: int = 100

    class MyTask(Task):
        curves = (("accuracy", "accuracy"),)  # dev metrics drawn in curves.png
        def prepare(self): ...                # load and check the data (raise TrainingError)
        def build_model(self): ...            # a fresh model, on the CPU
        def epoch_batches(self, epoch): ...   # lists of example indices, the same for the same (seed, epoch)
        def make_batch(self, indices, device): return Batch(inputs=(x,), targets=y, count=..., tokens=..., flops=...)
        def loss(self, output, batch): ...    # the mean over batch.count units
        def evaluate(self, model): return {"accuracy": ...}

    result = run_training(MyTask(MyConfig(run_dir="runs/mine")))

and a command line with every setting as an option: ``config, resume, quiet = command_line(MyConfig,
PRESETS, "python -m transformer.mine", "what it trains", argv, run_prefix="mine")``, then
``launch(MyTask(config), resume, quiet)``.

One step, in order: the task turns the next batch of the epoch (this process's share of it) into
tensors; the learning rate is set from equation 3 of the paper (:func:`noam_rate`, with its peak
``peak_lr`` reached at step ``warmup``); the model runs under autocast on ``batch.inputs``; the
task's loss is taken in float32 outside autocast; Adam (0.9, 0.98, 1e-9) steps (AdamW with ``weight_decay``). Every
``eval_every`` steps the task evaluates the model (rank 0 only, then the model is put back in
training mode); every ``checkpoint_every`` steps the checkpoint is written, atomically. Random
numbers a task draws while making a batch or in its model come from torch's global generator,
which the checkpoint saves: a resumed run then equals an uninterrupted one.

A run folder holds ``config.json``, ``metrics.json`` (``{"train": [...], "dev": [...]}``: loss,
learning rate, tokens/s, TFLOP/s and MFU every 50 steps; the task's measures at each
evaluation), ``curves.png`` and ``checkpoint.pt``, plus whatever the task's :meth:`Task.finish`
draws.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import torch
from tqdm import tqdm

from course.layout import runs
from reference.capstone import noam_rate

from . import checkpoint
from .checkpoint import atomic_write
from .cli import Parser, field_comments
from .flops import peak_flops
from .kernel_paths import PATHS
from .model import ModelShape
from .parts import EXERCISES, PartsError, check_parts, course_parts, learner_parts

__all__ = [
    "Batch", "LoopConfig", "Processes", "RunResult", "StopRequest", "Task", "TrainingError",
    "average_weights", "check_same_run", "choose_device", "command_line", "draw_curves", "exit_status", "export_run", "identity",
    "launch",
    "read_checkpoint", "run_training", "save_json", "snapshot",
]


class TrainingError(RuntimeError):
    """A run cannot start or continue; the message says why and what to do."""


def native_bf16(device: torch.device) -> bool:
    """A GPU with bf16 arithmetic, or a CPU with AVX-512 BF16 or AMX instructions."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
        return any(probe() for probe in probes if probe is not None)
    return False


#: torch.compile's modes; those that capture CUDA graphs need a mark at the start of every step
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
COMPILE_BACKENDS = ("inductor", "aot_eager")


@dataclass(frozen=True)
class LoopConfig(ModelShape):
    """The settings the loop reads. A task's config is a subclass that adds the model's and the data's.

    It is a :class:`~transformer.model.ModelShape` (d_model, h, N, d_ff, dropout, and their rules)
    because every model the loop trains has one, and equation 3's schedule scales with d_model; a
    task gives the shape its own defaults by declaring the fields again.
    """

    # the optimisation
    peak_lr: float = 3e-3  # the rate at the end of the warm-up: sets the factor of equation 3
    # AdamW (Loshchilov and Hutter 2019): each step also shrinks every weight by lr * weight_decay, apart from the
    # gradient; the paper has no decay
    weight_decay: float = 0.0  # decoupled weight decay, as AdamW applies it (0: the paper's Adam)
    # PyTorch's fused kernel updates each weight in one pass, where the plain one runs a dozen small operations per
    # weight tensor: the same update up to rounding, and fewer operations to launch when steps are small
    fused_adam: bool = False  # Adam(W)'s fused kernel (CPU and CUDA)
    warmup: int = 500  # steps of linear warm-up before the rate decays as 1/sqrt(step) (equation 3)
    max_steps: int = 100_000  # training steps before stopping
    time_limit: float = 0.0  # seconds of training before stopping (0: no limit)
    # a fixed budget is best spent ending at a rate near zero: over its last `cooldown` fraction the
    # rate of equation 3 is scaled down linearly to zero, by steps or by seconds, whichever runs out first
    cooldown: float = 0.0  # fraction of the budget (max_steps or time_limit) that ends the run cooling down (0: none)
    seed: int = 0  # the seed of the weights, the batches and dropout: the same seed gives the same run
    # the paper's checkpoint averaging (section 6.1): the model kept at the end is the mean of the
    # weights at the last `average_last` multiples of `average_every` steps and at the final step
    average_last: int = 0  # snapshots averaged (0: keep the final weights as they are)
    average_every: int = 200  # steps between the snapshots that are averaged
    # measuring
    eval_every: int = 500  # steps between evaluations
    checkpoint_every: int = 500  # steps between checkpoints (what --resume continues from)
    # where and how
    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    threads: int = 1  # CPU threads
    precision: str = "fp32"  # fp32, bf16 (autocast), or auto: bf16 where the device computes it natively, else fp32
    compile: bool = False  # torch.compile the model
    compile_mode: str = "default"  # with compile: torch.compile's mode; reduce-overhead replays each step as CUDA graphs
    compile_backend: str = "inductor"  # with compile: inductor, or aot_eager (traces, generates no code: a quick rehearsal)
    run_dir: str = ""  # the run folder (default: runs/<preset>)
    # whose code
    parts: str = "reference"  # reference, or mine: the parts of your own exercise notebooks
    parts_dir: str = ""  # where your notebooks are (default: exercises/)
    allow_failing_parts: bool = False  # with --parts mine, train even when one of your parts fails its visible check

    #: settings that may change when a run is resumed: they decide when to stop, what to measure
    #: and where to run, not what the next training step computes. A task adds its own.
    RESUMABLE: ClassVar[frozenset[str]] = frozenset(
        {"max_steps", "time_limit", "eval_every", "checkpoint_every", "device", "threads", "run_dir", "parts_dir",
         "allow_failing_parts"}
    )
    #: settings that choose a fused kernel in place of a course part (course or fused), each with the part it
    #: replaces; a preset's choice is dropped where the model has no course part to replace (see
    #: :meth:`fused_kernels_apply`), and asked for by name with --parts mine it is refused
    KERNEL_PATHS: ClassVar[dict[str, str]] = {}

    @classmethod
    def fused_kernels_apply(cls, settings: dict[str, Any]) -> bool:
        """Whether the model these settings describe is made of the course's parts, which a fused kernel can
        replace: not with --parts mine, where the parts are the learner's and run as written."""
        return settings.get("parts", "reference") != "mine"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("warmup", "max_steps", "eval_every", "checkpoint_every", "threads", "average_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise ValueError(f"precision must be fp32, bf16 or auto, got {self.precision!r}")
        if self.average_last < 0:
            raise ValueError(f"average_last must be 0 (no averaging) or more, got {self.average_last}")
        if self.peak_lr <= 0:
            raise ValueError(f"peak_lr must be positive, got {self.peak_lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be 0 (none) or more, got {self.weight_decay}")
        if self.time_limit < 0:
            raise ValueError(f"time_limit must be 0 (no limit) or more seconds, got {self.time_limit}")
        if not 0.0 <= self.cooldown <= 1.0:
            raise ValueError(f"cooldown must be a fraction of the budget in [0, 1], got {self.cooldown}")
        if self.parts not in ("reference", "mine"):
            raise ValueError(f"parts must be reference or mine, got {self.parts!r}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {', '.join(COMPILE_MODES)}, got {self.compile_mode!r}")
        if self.compile_backend not in COMPILE_BACKENDS:
            raise ValueError(f"compile_backend must be one of {', '.join(COMPILE_BACKENDS)}, got {self.compile_backend!r}")
        for path, replaced in self.KERNEL_PATHS.items():
            if getattr(self, path) not in PATHS:
                raise ValueError(f"{path} must be one of {', '.join(PATHS)}, got {getattr(self, path)!r}")
            if self.parts == "mine" and getattr(self, path) != "course":
                raise ValueError(f"{path}=fused replaces {replaced}; with parts=mine use {path}=course")

    def bf16(self, device: torch.device) -> bool:
        """Whether the matrix products run in bf16 (autocast) on ``device``. ``auto`` asks for it only where
        the hardware computes bf16 natively: emulated, it is slower than fp32, not faster."""
        if self.precision != "auto":
            return self.precision == "bf16"
        return native_bf16(device)

    def cooldown_scale(self, step: int, elapsed: float) -> float:
        """What the rate is multiplied by at ``step`` after ``elapsed`` seconds: 1 until the cool-down starts,
        then falling linearly to 0 at the end of the budget."""
        if not self.cooldown:
            return 1.0
        spent = step / self.max_steps
        if self.time_limit:
            spent = max(spent, elapsed / self.time_limit)
        return min(1.0, max(0.0, (1.0 - spent) / self.cooldown))

    @property
    def lr_factor(self) -> float:
        """The factor of equation 3 that makes its peak, at step = warmup, equal peak_lr."""
        return self.peak_lr * math.sqrt(self.d_model * self.warmup)


@dataclass
class Batch:
    """This process's share of one batch, as the task hands it to the loop."""

    inputs: tuple[torch.Tensor, ...]  # the model's positional arguments, on the device
    targets: Any  # whatever the task's loss needs besides the model's output
    count: int  # the units the loss is a mean over (target tokens): weights each process's share
    tokens: int  # tokens the model processed, for tokens/s
    flops: float = 0.0  # matrix FLOPs of the step (forward and backward), for TFLOP/s and MFU


class Task:
    """What one kind of model brings to the loop. Subclass it and fill in the methods that raise.

    The loop calls, in order: :meth:`prepare`; then, with torch's random seed set to
    ``config.seed``, :meth:`build_model`; for each epoch :meth:`epoch_batches`; for each step
    :meth:`make_batch` and :meth:`loss`; every ``eval_every`` steps :meth:`evaluate` (rank 0
    only); at the end :meth:`evaluate_final` (or :meth:`evaluate`) and :meth:`finish`.
    """

    #: the dev measures drawn in curves.png: (key in evaluate's dict, label), and the axis' name
    curves: ClassVar[tuple[tuple[str, str], ...]] = ()
    curves_axis: ClassVar[str] = "dev"
    #: the label of the training loss' axis
    loss_axis: ClassVar[str] = "training loss"

    #: with --parts mine, the model's parts the learner must have written, by notebook (see transformer.parts)
    MODEL_PARTS: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: the other parts the task uses: the learner's where written, else the course's
    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, config: LoopConfig) -> None:
        self.config = config
        self.parts = course_parts(self.PARTS)

    def use_learner_parts(self, say: Callable[[str], None] = print) -> None:
        """Take the parts from the learner's notebooks, say whose each one is, and run their visible checks."""
        self.parts = learner_parts(Path(self.config.parts_dir or EXERCISES), self.MODEL_PARTS, self.PARTS)
        say(self.parts.listing())
        check_parts(self.parts, self.config.allow_failing_parts, say)

    def rate(self, step: int) -> float:
        """The learning rate at ``step`` (from 1): equation 3, with the learner's noam_rate when it is used."""
        config = self.config
        schedule = self.parts.functions.get("noam_rate", noam_rate)
        return schedule(step, config.d_model, config.warmup, config.lr_factor)

    def prepare(self) -> None:
        """Load the data and check that it can be trained on; raise :class:`TrainingError` if not."""

    def build_model(self) -> torch.nn.Module:
        """A freshly initialised model, on the CPU (the loop moves it)."""
        raise NotImplementedError

    def epoch_batches(self, epoch: int) -> Sequence[Sequence[int]]:
        """The batches of one epoch, as lists of example indices. The same (seed, epoch) must give
        the same list: a resumed run finds its place in it. With several processes each trains on
        every world-th index of a batch."""
        raise NotImplementedError

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        raise NotImplementedError

    def loss(self, output: Any, batch: Batch) -> torch.Tensor:
        """The mean loss over ``batch.count`` units, a float32 scalar; ``output`` is the model's."""
        raise NotImplementedError

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        """Measures of ``model`` on held-out data, recorded in metrics.json's "dev" list."""
        return {}

    def evaluate_final(self, model: torch.nn.Module) -> dict[str, float] | None:
        """Measures of the model training ended with, when they differ from :meth:`evaluate`'s (on
        more held-out data, say): then always taken and recorded. None: :meth:`evaluate`'s, taken
        at the end unless the last evaluation was already of the final model."""
        return None

    def report(self, measured: dict[str, float]) -> str:
        """One line for the progress bar after an evaluation."""
        return ", ".join(f"{k} {v:.4g}" for k, v in measured.items())

    def checkpoint_extra(self) -> dict[str, Any]:
        """What else the checkpoint holds, at its top level (a vocabulary, say)."""
        return {}

    def finish(self, model: torch.nn.Module, run_dir: Path) -> None:
        """Pictures or files made from the final model (rank 0, after the last checkpoint)."""


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


# ---------------------------------------------------------------------------------------------
# files of a run
# ---------------------------------------------------------------------------------------------


def save_json(path: Path, value: Any) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8"))


def identity(config: LoopConfig) -> dict[str, Any]:
    """The settings that make two runs the same run."""
    return {k: v for k, v in asdict(config).items() if k not in config.RESUMABLE}


def check_same_run(saved: dict[str, Any], config: LoopConfig, where: Path) -> None:
    ours = identity(config)
    # A setting added since the run was saved is at its default there: what the earlier code did.
    defaults = {f.name: f.default for f in fields(config) if f.default is not MISSING}
    theirs = {k: v for k, v in {**defaults, **saved}.items() if k not in config.RESUMABLE}
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    if differ:
        details = ", ".join(f"{k}: {theirs.get(k)!r} there, {ours.get(k)!r} here" for k in differ[:6])
        raise TrainingError(
            f"the checkpoint in {where} belongs to another configuration ({details}). Resume it with its own "
            "settings (only " + ", ".join(sorted(config.RESUMABLE)) + " may change), or train in a new --run-dir."
        )


def read_checkpoint(path: str | Path, config_class: type[LoopConfig]) -> tuple[dict[str, Any], LoopConfig, Path]:
    """(checkpoint, its config, its file) from a run folder or a checkpoint file, with clear errors."""
    file = checkpoint.file_of(path)
    try:
        saved = checkpoint.load(file)
    except checkpoint.CheckpointError as exc:
        raise TrainingError(str(exc)) from None
    try:
        config = config_class(**saved[checkpoint.CONFIG])
    except (KeyError, TypeError) as exc:
        raise TrainingError(f"{file} is not a checkpoint of this training loop ({exc})") from None
    return saved, config, file


def export_run(run: str | Path, destination: str | Path, config_class: type[LoopConfig],
               files: Sequence[str] = ("config.json", "metrics.json", "curves.png")) -> Path:
    """Write a finished run's shippable form into ``destination``: the checkpoint's exported form
    (:func:`transformer.checkpoint.slim`: the final weights, the config and the task's extras, but
    nothing to resume from) beside copies of ``files``. Returns the checkpoint's path."""
    destination = Path(destination)
    saved, _, source = read_checkpoint(run, config_class)
    if not checkpoint.resumable(saved):
        raise TrainingError(f"{source} is already an exported model")
    destination.mkdir(parents=True, exist_ok=True)
    target = destination / checkpoint.FILE
    checkpoint.write(target, checkpoint.slim(saved))
    copy_present(files, source.parent, destination)
    return target


def copy_present(files: Sequence[str], source: Path, destination: Path) -> None:
    """Copy those of ``files`` that ``source`` holds into ``destination`` (a run may lack a picture)."""
    for name in files:
        if (source / name).is_file():
            shutil.copyfile(source / name, destination / name)


def export_command(argv: Sequence[str], export: Callable[[str, str], Path], prog: str) -> int:
    """``prog RUN_DIR DESTINATION``: write a run's shippable form with ``export``; the exit status."""
    parser = Parser(prog=prog, description="Write the shippable form of a finished run: its weights (averaged when "
                    "it averaged), configuration, metrics and pictures, without the optimiser's state.")
    parser.add_argument("run", help="a run folder (or its checkpoint.pt)")
    parser.add_argument("destination", help="the folder to write (created when missing)")
    args = parser.parse_args(argv)
    try:
        path = export(args.run, args.destination)
    except TrainingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MB")
    return 0


def draw_curves(metrics: dict[str, list[dict[str, float]]] | Sequence[dict[str, list[dict[str, float]]]], path: Path,
                task: Task, labels: Sequence[str] = ()) -> None:
    """A run's training loss, learning rate and measurements against the step; given a list of runs' metrics
    (the models of an ensemble), each run's curves, named by ``labels``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [metrics] if isinstance(metrics, dict) else list(metrics)
    names = list(labels) or [""] * len(runs)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for run, name in zip(runs, names):
        train, dev = run["train"], run["dev"]
        if train:
            axes[0].plot([r["step"] for r in train], [r["loss"] for r in train], label=name or None)
            axes[1].plot([r["step"] for r in train], [r["lr"] for r in train], label=name or None)
        if dev and task.curves:
            for (key, label), style in zip(task.curves, ("o-", "s-", "^-", "v-", "d-")):
                axes[2].plot([r["step"] for r in dev if key in r], [r[key] for r in dev if key in r], style,
                             label=f"{name} {label}".strip())
            axes[2].legend()
    if any(names):
        axes[0].legend()
    axes[0].set(xlabel="step", ylabel=task.loss_axis)
    axes[1].set(xlabel="step", ylabel="learning rate")
    axes[2].set(xlabel="step", ylabel=task.curves_axis)
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, dpi=90, format="png"))
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------


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


def refuse_compiled_bf16_course_attention(config: LoopConfig, device: torch.device, bf16: bool) -> None:
    """torch.compile's inductor, on a CPU, with bf16 autocast, computes NaN gradients through the chapters'
    attention (measured with torch 2.13: the backward of the max that the course's softmax subtracts), so
    such a run would train nothing for its whole budget. F.scaled_dot_product_attention compiles correctly,
    and fp32 does too."""
    if (config.compile and config.compile_backend == "inductor" and bf16 and device.type == "cpu"
            and getattr(config, "attention", "course") == "course"):
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
        refuse_compiled_bf16_course_attention(config, self.device, self.bf16)
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


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------


def _boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parser(config_class: type[LoopConfig], presets: dict[str, LoopConfig], prog: str, description: str,
            default_preset: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--preset", choices=sorted(presets), default=default_preset,
                        help=f"the starting configuration (default: {default_preset})")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    example = presets[default_preset]
    notes = field_comments(config_class)
    for f in fields(config_class):
        flag = "--" + f.name.replace("_", "-")
        kind = type(getattr(example, f.name))
        shown = f"{notes.get(f.name, '')} (preset {default_preset}: {getattr(example, f.name)!r})".lstrip()
        shown = shown.replace("%", "%%")  # argparse formats help with %
        if kind is bool:
            parser.add_argument(flag, dest=f.name, type=_boolean, metavar="true|false", default=None, help=shown)
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None, help=shown)
    return parser


def command_line(config_class: type[LoopConfig], presets: dict[str, LoopConfig], prog: str, description: str,
                 argv: Sequence[str] | None = None, run_prefix: str = "", default_preset: str = "cpu",
                 ) -> tuple[LoopConfig, bool, bool]:
    """(config, resume, quiet) from the command line: a preset, or a run's saved config, plus overrides.

    Every field of ``config_class`` is an option (``--max-steps 50``, ``--compile true``). A new
    run's folder is ``runs/<run_prefix><preset>`` unless ``--run-dir`` says otherwise.
    """
    parser = _parser(config_class, presets, prog, description, default_preset)
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in fields(config_class) if getattr(args, f.name) is not None}
    if args.resume:
        saved = Path(args.resume) / "config.json"
        if not saved.is_file():
            parser.error(f"nothing to resume: {saved} does not exist")
        base = json.loads(saved.read_text(encoding="utf-8"))
        base["run_dir"] = args.resume
    else:
        base = asdict(presets[args.preset])
        base["run_dir"] = base["run_dir"] or str(runs() / f"{run_prefix}{args.preset}")
        if not config_class.fused_kernels_apply({**base, **overrides}):
            # The preset's fused kernels have no course part to replace (with --parts mine the parts are yours,
            # and run as you wrote them). Asked for by name, a fused path is still refused, with the reason.
            base.update({path: "course" for path in config_class.KERNEL_PATHS})
    try:
        config = config_class(**{**base, **overrides})
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return config, bool(args.resume), args.quiet


def launch(task: Task, resume: bool, quiet: bool, errors: tuple[type[Exception], ...] = ()) -> RunResult | int:
    """Run a task from a command line: the result, or the exit status after a clear error (2) or an
    interruption (130)."""
    return exit_status(lambda: run_training(task, resume=resume, progress=not quiet), errors)


def exit_status(train: Callable[[], RunResult], errors: tuple[type[Exception], ...] = ()) -> RunResult | int:
    """What ``train`` returns, or the exit status of a command after a clear error (2), the message printed, or
    an interruption (130)."""
    try:
        return train()
    except (TrainingError, PartsError, *errors) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
