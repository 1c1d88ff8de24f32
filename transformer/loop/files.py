"""The files of a run: its JSON, its checkpoint read back and checked, its exported form, its curves.

Every file is written atomically (:func:`course.files.atomic_write`): a run stopped at any moment
leaves either the previous file or the new one, never half of one.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

from course.files import atomic_write

from .. import checkpoint
from .config import LoopConfig
from .task import Task, TrainingError


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
