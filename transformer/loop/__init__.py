"""One training loop for every model of the course: the capstone's G2P Transformer, the GPT and the BERT.

What a model needs from training and what does not depend on the model are kept apart. The loop
owns the steps, the optimiser and its schedule, when to stop (a step count, a time limit, Ctrl-C or
SIGTERM), the checkpoint that ``--resume`` continues from exactly (random state included), the
paper's checkpoint averaging, the progress bar, the metrics and the curves, and the ways to run
(several processes with DistributedDataParallel, bf16 autocast, ``torch.compile``). A small *task*
object supplies the rest: the model, the batches, the loss and the evaluation.

What a new model must provide, with an example: :mod:`transformer.loop.task`, the seam a new chapter's
model builds on.

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

The package, in the order a run meets it:

* :mod:`~transformer.loop.config`: :class:`LoopConfig`, the loop's settings, which a task's config extends;
* :mod:`~transformer.loop.task`: :class:`Task` and :class:`Batch`, what a model brings to the loop;
* :mod:`~transformer.loop.run`: the loop itself, :func:`run_training` and the :class:`Run` it drives;
* :mod:`~transformer.loop.files`: the run's files (JSON, the checkpoint read back, the exported form, curves);
* :mod:`~transformer.loop.cli`: a task's command line and the exit statuses.

Everything a task or a script needs is importable from ``transformer.loop`` itself.
"""
from __future__ import annotations

from .cli import command_line, exit_status, export_command, launch
from .config import LoopConfig, native_bf16
from .files import check_same_run, copy_present, draw_curves, export_run, identity, read_checkpoint, save_json
from .run import (
    Processes,
    RunResult,
    StopRequest,
    already_holds_a_run,
    average_weights,
    choose_device,
    make_optimizer,
    refuse_compiled_bf16_course_attention,
    run_folder,
    run_training,
    snapshot,
    uses_cuda_graphs,
)
from .task import Batch, Task, TrainingError

__all__ = [
    "Batch", "LoopConfig", "Processes", "RunResult", "StopRequest", "Task", "TrainingError",
    "already_holds_a_run", "average_weights", "check_same_run", "choose_device", "command_line", "copy_present",
    "draw_curves", "exit_status", "export_command", "export_run", "identity", "launch", "make_optimizer",
    "native_bf16", "read_checkpoint", "refuse_compiled_bf16_course_attention", "run_folder", "run_training",
    "save_json", "snapshot", "uses_cuda_graphs",
]
