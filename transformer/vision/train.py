"""Train chapter 10's vision Transformer on the 8 x 8 digits, and the small CNN it is measured against.

    python -m transformer.vision train --preset cpu            the ViT, then the CNN: runs/vision-cpu/{vit,cnn}
    python -m transformer.vision train --preset cpu --model vit             one of them alone
    python -m transformer.vision train --resume runs/vision-cpu/vit        continue a stopped run
    python -m transformer.vision evaluate runs/vision-cpu/vit runs/vision-cpu/cnn    their test accuracy
    python -m transformer.vision export runs/vision-cpu/vit checkpoints/vit-digits-cpu

Both models run on the course's one training loop (:mod:`transformer.loop`) with the settings of one preset:
the same steps, the same batches in the same order (drawn from the seed and the epoch, not from the model),
the same Adam and the same schedule (equation 3's warm-up, then a linear cool-down). Only the model differs,
so the gap in accuracy is the model's. That is why one command trains both, one after the other: a baseline
trained by another command, with settings of its own, would measure the settings as much as the model.

The data is :mod:`transformer.vision.data`: 1,264 training images, 178 dev images measured while training,
355 test images measured once, at the end, into ``results.json``. With ``shift`` > 0, each training image is
moved by up to that many pixels in x and in y, a fresh draw at every step, the pixels shifted in being 0.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..checkpoint import final_weights
from ..loop import (
    Batch,
    LoopConfig,
    RunResult,
    Task,
    TrainingError,
    choose_device,
    command_line,
    export_command,
    export_run,
    launch,
    read_checkpoint,
    run_training,
    save_json,
)
from ..model import count_parameters, positive_integers
from ..parts import EXERCISES, NEEDED, VISION, learner_parts, uses
from . import data
from .model import SmallCNN, VisionTransformer, ViTConfig, forward_flops

MODELS = ("vit", "cnn")
#: with --parts mine, the ViT's encoder must be the learner's (chapters 2 to 4: the CNN has no part of theirs) ...
ENCODER_PARTS = {stem: NEEDED[stem] for stem in ("attention", "multihead", "encoder")}
#: ... and its patches are the learner's where written (chapter 10's patchify and PatchEmbedding)
VISION_PARTS = uses(VISION)
#: the ViT's constructor arguments, and the part each one is built from
BUILT_FROM = {"embedding": "PatchEmbedding", "encoder": "Encoder", "norm": "LayerNorm"}


@dataclass(frozen=True)
class VisionTrainConfig(LoopConfig):
    """Every setting of a run: the loop's (:class:`LoopConfig`), then the models' and the data's."""

    model: str = "vit"  # vit, or cnn: the convolutional baseline
    # the ViT
    patch: int = 2  # pixels on a side of a patch: 2 cuts an 8 x 8 digit into 16 patches
    d_model: int = 64
    h: int = 4  # attention heads
    N: int = 3  # encoder layers
    d_ff: int = 128  # width of the feed-forward network's hidden layer
    dropout: float = 0.1  # dropout rate (the paper's P_drop), in both models
    # the CNN: 42 gives it 99,214 parameters, the ViT of the same preset 102,666
    cnn_width: int = 42  # channels of the CNN's first convolution (its next two have twice as many)
    # the data
    batch_size: int = 128  # images per batch
    shift: int = 0  # augmentation: each training image moved by up to this many pixels in x and in y (0: none)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("batch_size", "cnn_width"))
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {self.model!r}")
        if self.model == "cnn" and self.parts == "mine":
            raise ValueError("the CNN is made of no part of the chapters: --parts mine applies to the ViT")
        if self.shift < 0:
            raise ValueError(f"shift must be 0 (no augmentation) or more pixels, got {self.shift}")
        self.vit_config()  # the ViT's own rules (the patch divides the image), at once

    def vit_config(self) -> ViTConfig:
        return ViTConfig(**self.shape(), patch=self.patch)


_TINY = dict(d_model=16, h=2, N=1, d_ff=32, cnn_width=4, batch_size=32, peak_lr=3e-3, warmup=5, max_steps=12,
             eval_every=6, checkpoint_every=6, threads=1)

PRESETS: dict[str, VisionTrainConfig] = {
    # seconds: what the tests run
    "tiny": VisionTrainConfig(**_TINY),
    "cpu": VisionTrainConfig(peak_lr=3e-3, warmup=100, max_steps=800, cooldown=0.4, eval_every=200,
                             checkpoint_every=200, threads=1),
}


def build_model(config: VisionTrainConfig, parts: dict[str, Any] | None = None) -> torch.nn.Module:
    """The model a config describes; the ViT made of ``parts`` where it names them (the learner's, with --parts
    mine), of the course's own otherwise."""
    if config.model == "cnn":
        return SmallCNN(config.cnn_width, dropout=config.dropout)
    parts = parts or {}
    chosen = {argument: parts[name] for argument, name in BUILT_FROM.items() if name in parts}
    return VisionTransformer(config.vit_config(), **chosen)


def shifted(images: torch.Tensor, most: int, generator: torch.Generator) -> torch.Tensor:
    """Each image of (B, C, H, W) moved by its own draw of -most .. most pixels in y and in x, zeros shifted in."""
    B, C, H, W = images.shape
    padded = F.pad(images, (most, most, most, most))  # (B, C, H + 2 most, W + 2 most)
    dy, dx = torch.randint(2 * most + 1, (2, B, 1), generator=generator)  # (B, 1) each: where each crop starts
    rows, cols = dy + torch.arange(H), dx + torch.arange(W)  # (B, H), (B, W)
    batch, channel = torch.arange(B)[:, None, None, None], torch.arange(C)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]  # (B, C, H, W)


@torch.no_grad()
def logits(model: torch.nn.Module, images: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """The model's logits for each image (n, classes), in eval mode, on the CPU."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        return torch.cat([model(images[i : i + batch_size].to(device)).float().cpu()
                          for i in range(0, len(images), batch_size)])
    finally:
        model.train(was_training)


def predict(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The digit the model gives each image (n,)."""
    return logits(model, images).argmax(-1)


def accuracy(model: torch.nn.Module, split: data.Split) -> float:
    return (predict(model, split.images) == split.labels).double().mean().item()


def measure(model: torch.nn.Module, split: data.Split) -> dict[str, float]:
    """Accuracy, and the mean cross-entropy, which still moves when a small split's accuracy no longer does."""
    scores = logits(model, split.images)  # (n, classes)
    return {"accuracy": (scores.argmax(-1) == split.labels).double().mean().item(),
            "loss": F.cross_entropy(scores, split.labels).item()}


class VisionTask(Task):
    """Digits from pixels for :func:`transformer.loop.run_training`: the ViT or the CNN, by ``config.model``."""

    config: VisionTrainConfig
    curves = (("accuracy", "dev accuracy"),)
    curves_axis = "share of dev digits right"
    loss_axis = "training loss (cross-entropy)"

    def __init__(self, config: VisionTrainConfig, splits: dict[str, data.Split] | None = None) -> None:
        if config.model == "vit":
            self.MODEL_PARTS, self.PARTS = ENCODER_PARTS, VISION_PARTS
        super().__init__(config)
        self.splits = splits
        self.flops_per_image = 0.0

    def prepare(self) -> None:
        self.splits = data.load() if self.splits is None else self.splits
        if len(self.splits["train"]) < self.config.batch_size:
            raise TrainingError(f"{len(self.splits['train'])} training images do not fill one batch of "
                                f"{self.config.batch_size}: lower --batch-size")

    def build_model(self) -> torch.nn.Module:
        model = build_model(self.config, self.parts.functions)
        self.flops_per_image = forward_flops(model, torch.zeros(1, 1, data.SIDE, data.SIDE))
        return model

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        assert self.splits is not None
        size = self.config.batch_size
        generator = torch.Generator().manual_seed(1_000_003 * self.config.seed + epoch)
        order = torch.randperm(len(self.splits["train"]), generator=generator).tolist()
        return [order[i : i + size] for i in range(0, len(order) - size + 1, size)]  # full batches only

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        assert self.splits is not None
        train = self.splits["train"]
        index = torch.tensor(indices)
        images = train.images[index]  # (B, 1, 8, 8)
        if self.config.shift:
            # Drawn from torch's global generator, which the checkpoint saves: a resumed run shifts as an
            # uninterrupted one would.
            generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())))
            images = shifted(images, self.config.shift, generator)
        B = len(indices)
        # tokens/s counts images, so that the two models' rates compare
        return Batch(inputs=(images.to(device),), targets=train.labels[index].to(device), count=B, tokens=B,
                     flops=3 * B * self.flops_per_image)

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(output.float(), batch.targets)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        assert self.splits is not None
        return measure(model, self.splits["dev"])

    def report(self, measured: dict[str, float]) -> str:
        return f"dev accuracy {100 * measured['accuracy']:.1f} %, loss {measured['loss']:.3f}"

    def finish(self, model: torch.nn.Module, run_dir: Path) -> None:
        assert self.splits is not None
        metrics = read_json(run_dir / "metrics.json")
        last = metrics["dev"][-1]
        test = self.splits["test"]
        save_json(run_dir / "results.json", {
            "model": self.config.model, "parameters": count_parameters(model), "steps": last["step"],
            "train_seconds": round(last["elapsed_s"], 1), "threads": self.config.threads,
            "dev_accuracy": last["accuracy"], "test_accuracy": accuracy(model, test), "test_images": len(test),
        })


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def train(config: VisionTrainConfig, resume: bool = False, splits: dict[str, data.Split] | None = None,
          progress: bool = True) -> RunResult:
    """Train (or, with ``resume``, continue) the run ``config`` describes, in ``config.run_dir``."""
    return run_training(VisionTask(config, splits), resume=resume, progress=progress)


def load_trained(path: str | Path, device: str = "cpu") -> tuple[torch.nn.Module, VisionTrainConfig]:
    """A trained ViT or CNN from a run folder or its checkpoint file, in eval mode."""
    saved, config, file = read_checkpoint(path, VisionTrainConfig)
    assert isinstance(config, VisionTrainConfig)
    parts = None
    if config.parts == "mine":  # a ViT trained on your parts is made of them again
        parts = learner_parts(Path(config.parts_dir or EXERCISES), ENCODER_PARTS, VISION_PARTS).functions
    model = build_model(config, parts)
    try:
        model.load_state_dict(final_weights(saved))
    except (KeyError, RuntimeError) as exc:
        raise TrainingError(f"{file} does not hold this {config.model.upper()}'s weights ({exc})") from None
    return model.to(choose_device(device)).eval(), config


def export(run: str | Path, destination: str | Path) -> Path:
    """The shippable form of a finished run (see :func:`transformer.loop.export_run`), checked to load."""
    load_trained(run)  # refuses what this code cannot load before anything is written
    return export_run(run, destination, VisionTrainConfig, ("config.json", "metrics.json", "curves.png", "results.json"))


def export_main(argv: Sequence[str]) -> int:
    return export_command(argv, export, "python -m transformer.vision export")


def summary_line(name: str, results: dict[str, Any]) -> str:
    return (f"{name:<4} {results['parameters']:>9,} parameters, {results['steps']} steps in "
            f"{results['train_seconds']:.0f} s: dev {100 * results['dev_accuracy']:.1f} %, "
            f"test {100 * results['test_accuracy']:.1f} %")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m transformer.vision train [options]``: the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    config, resume, quiet = command_line(VisionTrainConfig, PRESETS, "python -m transformer.vision train",
                                         "Train chapter 10's vision Transformer on 8 x 8 digits, then the CNN "
                                         "baseline with the same settings (--model picks one).", argv,
                                         run_prefix="vision-")
    assert isinstance(config, VisionTrainConfig)
    chosen = resume or any(a == "--model" or a.startswith("--model=") for a in argv)
    configs = [config] if chosen else [
        # one folder per model in the command's run folder; the CNN has no part of the learner's
        replace(config, model=model, run_dir=str(Path(config.run_dir) / model),
                parts="reference" if model == "cnn" else config.parts)
        for model in MODELS
    ]
    lines = []
    for each in configs:
        result = launch(VisionTask(each), resume, quiet, errors=(data.DigitsError,))
        if isinstance(result, int):
            return result
        lines.append(summary_line(each.model, read_json(result.run_dir / "results.json")))
        print(f"{each.model}: run folder {result.run_dir}")
    print("\n".join(lines))
    return 0
