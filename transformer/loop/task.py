"""What one kind of model brings to the loop: a :class:`Task`, and the :class:`Batch` it makes.

The loop knows nothing of the model. It owns the steps, the optimiser and equation 3's schedule, when to stop,
the checkpoint and exact resume, averaging, DDP, bf16 and compilation; everything that depends on the model it
asks of the task. A new model (a chapter's, say) brings two things.

A config: a frozen dataclass that extends :class:`~transformer.loop.config.LoopConfig` with the model's and the
data's settings, each with a comment on its line (the comment becomes the option's ``--help``), and a dict of
presets. Settings that may change when a run is resumed go in ``RESUMABLE``; a setting that swaps a course
part for a fused kernel goes in ``KERNEL_PATHS``.

A task: a subclass of :class:`Task`. It must fill in

* ``build_model()``: a freshly initialised model, on the CPU (torch's seed is already ``config.seed``);
* ``epoch_batches(epoch)``: the epoch's batches as lists of example indices, the same for the same
  (seed, epoch), so that a resumed run finds its place;
* ``make_batch(indices, device)``: those examples as a :class:`Batch`: the model's positional inputs, what the
  loss needs besides the model's output, and the counts the loop weighs processes and reports speed by;
* ``loss(output, batch)``: a float32 scalar, the mean over ``batch.count`` units.

and may fill in ``prepare()`` (load and check the data; raise :class:`TrainingError` with what to do),
``evaluate(model)`` and ``evaluate_final(model)`` (held-out measures; ``curves`` names those drawn),
``report`` (the progress bar's line), ``checkpoint_extra()`` (a vocabulary, saved with the weights),
``finish(model, run_dir)`` (pictures), ``course_attention()`` (whether the model computes attention with the
chapters' code), and, for ``--parts mine``, ``MODEL_PARTS`` and ``PARTS`` (see :mod:`transformer.parts`)::

    @dataclass(frozen=True)
    class MyConfig(LoopConfig):             # the loop's settings, then the task's own
        vocab: int = 100  # symbols the model reads

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
``launch(MyTask(config), resume, quiet)``. ``tests/models/test_loop_task.py`` trains a task that fills in
only what it must. The course's three tasks are :class:`transformer.g2p.train.G2PTask`,
:class:`transformer.gpt.train.GPTTask` and the two of :mod:`transformer.bert.train`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from reference.capstone import noam_rate

from ..parts import EXERCISES, check_parts, course_parts, learner_parts
from .config import LoopConfig


class TrainingError(RuntimeError):
    """A run cannot start or continue; the message says why and what to do."""


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
        # lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), scaled by lr_factor so that it peaks at peak_lr
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

    def course_attention(self) -> bool:
        """Whether the model computes attention with the chapters' code, which torch.compile with bf16 on a CPU
        differentiates wrongly (the loop then refuses to start). Yes unless the task's model takes a fused
        kernel in its place."""
        return True
