"""The loop's settings: one frozen dataclass, :class:`LoopConfig`, that a task's config extends.

It holds what the loop reads (the optimisation, the schedule's budget, averaging, measuring, where and how to
run, whose code), checks each value when it is made, and answers the questions the loop asks of it: bf16 or not
on a device, the cool-down's scale at a step, the factor of equation 3.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..fused import PATHS
from ..model import ModelShape


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
