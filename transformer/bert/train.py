"""Pre-train a small BERT on English spellings, then fine-tune it to count syllables or find the stress.

    python -m transformer.bert pretrain --preset cpu
    python -m transformer.bert finetune --preset cpu --task syllables --labels 1000 --init runs/bert-pretrain-cpu
    python -m transformer.bert finetune --preset cpu --task stress                 (from scratch, every label)
    python -m transformer.bert finetune --resume runs/bert-stress-all-scratch-cpu  (continue a stopped run)
    python -m transformer.bert export RUN DESTINATION    the weights and results of a finished run, to ship

Both run on the course's one training loop (:mod:`transformer.loop`): its schedule (equation 3
of the paper), Adam, checkpoints, ``--resume``, progress bar and metrics. This module is the two
tasks that plug into it.

* **pretrain**: masked-language modelling (:mod:`transformer.bert.data`) on the spellings of the
  capstone's G2P training words; the dev words measure the masked letters' accuracy.
* **finetune**: a classifier on [CLS] (:mod:`transformer.bert.model`) for one of the labels of
  :mod:`transformer.bert.syllables`, trained on ``--labels N`` training words (0: all), drawn by
  ``--labels-seed``. ``--init RUN`` starts the encoder from a pre-training run's final weights;
  without it the encoder starts from random weights. The dev split is measured while training;
  at the end the test split is, beside the baselines, in ``results.json``.

Every option of the configuration can be set (``--max-steps 50``, ``--d-model 64``); ``--help``
lists them. A fine-tuning run must have the encoder shape of the run it starts from, which using
the same ``--preset`` gives.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from course.layout import runs

from ..checkpoint import final_weights
from ..g2p.data import G2PData
from ..g2p.data import load as load_cmudict
from ..loop import (
    Batch,
    LoopConfig,
    RunResult,
    Task,
    TrainingError,
    command_line,
    export_command,
    export_run,
    launch,
    read_checkpoint,
    run_training,
    save_json,
)
from ..model import positive_integers
from ..parts import BERT_PARTS
from . import syllables
from .data import copy_encoder, labelled_batch, masked_batch, masked_lm_loss, masked_lm_scores, predict
from .model import BertClassifier, BertConfig, BertForMaskedLM, CharVocabulary

#: the fields that decide the encoder's shape: a fine-tuning run must share them with its --init run
ENCODER_FIELDS = ("d_model", "h", "N", "d_ff", "max_len")


@dataclass(frozen=True)
class PretrainConfig(LoopConfig):
    """The loop's settings (:class:`LoopConfig`), then the model's and the data's."""

    d_model: int = 128
    h: int = 4  # attention heads
    N: int = 4  # encoder layers
    d_ff: int = 512  # width of the feed-forward network's hidden layer
    dropout: float = 0.1  # dropout rate (the paper's P_drop)
    max_len: int = 32  # longest word, in tokens, the model takes
    batch_size: int = 128  # words per batch
    peak_lr: float = 1e-3
    warmup: int = 300
    eval_words: int = 2000  # dev words measured at each evaluation (0: all)

    RESUMABLE = LoopConfig.RESUMABLE | {"eval_words"}

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("batch_size", "max_len"))
        if self.eval_words < 0:
            raise ValueError(f"eval_words must be 0 (all) or more, got {self.eval_words}")

    def model_config(self) -> BertConfig:
        return BertConfig(**self.shape(), vocab_size=len(CharVocabulary()), max_len=self.max_len)


@dataclass(frozen=True)
class FinetuneConfig(PretrainConfig):
    task: str = "syllables"  # syllables or stress
    labels: int = 0  # labelled training words to keep (0: all of them)
    labels_seed: int = 0  # which ones: a fixed draw, the same for every run that keeps as many
    init: str = ""  # a pre-training run (folder or checkpoint) to start the encoder from; "": random
    batch_size: int = 64
    peak_lr: float = 5e-4
    warmup: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task not in syllables.TASKS:
            raise ValueError(f"task must be one of {', '.join(syllables.TASKS)}, got {self.task!r}")
        if self.labels < 0:
            raise ValueError(f"labels must be 0 (every training word) or more, got {self.labels}")


_TINY = dict(d_model=32, h=2, N=1, d_ff=64, warmup=10, max_steps=20, eval_every=10, checkpoint_every=10, eval_words=200)
_GPU = dict(d_model=256, h=4, N=6, d_ff=1024, precision="bf16")

# The CPU presets take one thread. On a 2-core machine that other work kept busy (load average
# about 6), pre-training ran 2.05 steps/s with one thread and 0.28 with two, which then wait on
# each other; fine-tuning ran 4.7 steps/s with one. Step counts, not time limits, end the runs,
# so that their results do not depend on the machine's load; they are sized from those rates:
# 750 pre-training steps in about 6 minutes, 300 fine-tuning steps in about one.
PRETRAIN_PRESETS: dict[str, PretrainConfig] = {
    # seconds: what the tests run
    "tiny": PretrainConfig(**_TINY, batch_size=32),
    "cpu": PretrainConfig(max_steps=750, eval_every=250, checkpoint_every=250, threads=1),
    # one GPU: wider, deeper, larger batches, many more steps
    "gpu": PretrainConfig(**_GPU, batch_size=1024, peak_lr=1e-3, warmup=1000, max_steps=20000, eval_every=2000,
                          checkpoint_every=2000, eval_words=0),
}

FINETUNE_PRESETS: dict[str, FinetuneConfig] = {
    "tiny": FinetuneConfig(**_TINY, batch_size=16),
    "cpu": FinetuneConfig(max_steps=300, eval_every=150, checkpoint_every=150, threads=1, eval_words=1000),
    "gpu": FinetuneConfig(**_GPU, batch_size=256, warmup=200, max_steps=3000, eval_every=500, checkpoint_every=1000,
                          eval_words=0),
}


def _epoch_order(n: int, seed: int, epoch: int, batch_size: int) -> list[list[int]]:
    """All n indices in an order fixed by (seed, epoch), cut into batches; a short last one is dropped."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
    return [order[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]


def encoder_flops(config: BertConfig, batch: int, length: int, head: int) -> float:
    """Matrix FLOPs of one training step (three forward passes): the encoder, plus ``head``
    multiply-adds per position for the output head (as :mod:`transformer.flops` counts)."""
    d, N = config.d_model, config.N
    weights = 2 * length * (N * (4 * d * d + 2 * d * config.d_ff) + head)
    attention = 4 * d * N * length**2
    return 3.0 * batch * (weights + attention)


class _BertTask(Task):
    config: PretrainConfig

    def __init__(self, config: PretrainConfig, data: G2PData | None = None) -> None:
        super().__init__(config)
        self.data = data
        self.vocab = CharVocabulary()
        self.model_config = config.model_config()

    def _load(self) -> G2PData:
        if self.data is None:
            self.data = load_cmudict(stress=True)
        return self.data

    def checkpoint_extra(self) -> dict[str, Any]:
        return {"vocabulary": list(self.vocab.tokens)}


class PretrainTask(_BertTask):
    """Masked-language modelling on the spellings of the G2P training words."""

    PARTS = BERT_PARTS  # with --parts mine: your mask_tokens masks the words
    curves = (("accuracy", "masked letters right"),)
    curves_axis = "dev (share)"
    loss_axis = "training loss (masked letters)"

    def prepare(self) -> None:
        data = self._load()
        self.words = list(data.train.words)  # the dev words are not in it, and no test word is
        if len(self.words) < self.config.batch_size:
            raise TrainingError(f"{len(self.words)} training words do not fill one batch of {self.config.batch_size}")
        self.dev_words = list(data.dev.words[: self.config.eval_words or None])

    def build_model(self) -> BertForMaskedLM:
        return BertForMaskedLM(self.model_config)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        return _epoch_order(len(self.words), self.config.seed, epoch, self.config.batch_size)

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        # The mask's generator is seeded from torch's global one, which the checkpoint saves, so a
        # resumed run draws the masks an uninterrupted one would.
        generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())))
        inputs, labels = masked_batch([self.words[i] for i in indices], self.vocab, self.model_config.max_len, generator,
                                      masking=self.parts["mask_tokens"])
        chosen = int((labels != -100).sum())
        tokens = int((inputs != self.vocab.pad_id).sum())
        flops = encoder_flops(self.model_config, *inputs.shape, head=self.model_config.d_model * (self.model_config.d_model
                                                                                              + len(self.vocab)))
        return Batch(inputs=(inputs.to(device),), targets=labels.to(device), count=max(chosen, 1), tokens=tokens,
                     flops=flops)

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        total, _ = masked_lm_loss(output, batch.targets)
        return total / batch.count

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        # The same masks at every evaluation (seed 0), so that the points of a curve compare.
        return masked_lm_scores(model, self.dev_words, self.vocab, seed=0, device=_device_of(model))

    def report(self, measured: dict[str, float]) -> str:
        return f"dev masked letters: {100 * measured['accuracy']:.1f} % right, loss {measured['loss']:.3f}"


class FinetuneTask(_BertTask):
    """A label of :mod:`transformer.bert.syllables`, read from the [CLS] state."""

    config: FinetuneConfig
    curves = (("accuracy", "accuracy"),)
    curves_axis = "dev accuracy (share)"
    loss_axis = "training loss (cross-entropy)"

    def prepare(self) -> None:
        config = self.config
        self.splits = syllables.load(config.task, self._load())
        try:
            self.train_words = self.splits["train"].subset(config.labels, config.labels_seed)
        except ValueError as exc:
            raise TrainingError(str(exc)) from None
        if len(self.train_words) < config.batch_size:
            raise TrainingError(f"{len(self.train_words)} labelled words do not fill one batch of {config.batch_size}: "
                                "lower --batch-size or raise --labels")
        self.dev = self.splits["dev"]
        if config.eval_words:
            self.dev = self.dev.subset(min(config.eval_words, len(self.dev)), seed=0)
        self.pretrained = load_pretrained(config.init, self.model_config) if config.init else None

    def build_model(self) -> BertClassifier:
        model = BertClassifier(self.model_config, self.splits["train"].classes)
        if self.pretrained is not None:
            copy_encoder(self.pretrained, model)
        return model

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        return _epoch_order(len(self.train_words), self.config.seed, epoch, self.config.batch_size)

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        ids, targets = labelled_batch(self.train_words, indices, self.vocab, self.model_config.max_len)
        tokens = int((ids != self.vocab.pad_id).sum())
        flops = encoder_flops(self.model_config, *ids.shape, head=0)
        return Batch(inputs=(ids.to(device),), targets=targets.to(device), count=len(indices), tokens=tokens, flops=flops)

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(output.float(), batch.targets)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        predictions = predict(model, self.dev.words, self.vocab, device=_device_of(model))
        return {"accuracy": syllables.accuracy(predictions, self.dev)}

    def report(self, measured: dict[str, float]) -> str:
        return f"dev accuracy {100 * measured['accuracy']:.1f} %"

    def finish(self, model: torch.nn.Module, run_dir: Path) -> None:
        test = self.splits["test"]
        predictions = predict(model, test.words, self.vocab, device=_device_of(model))
        save_json(run_dir / "results.json", {
            "task": self.config.task, "labels": len(self.train_words), "init": self.config.init or None,
            "split": "test", "words": len(test), "accuracy": syllables.accuracy(predictions, test),
            "baselines": syllables.baselines(self.splits, "test"),
        })


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def load_pretrained(path: str | Path, expected: BertConfig | None = None) -> BertForMaskedLM:
    """The final model of a pre-training run (its averaged weights when it averaged), on the CPU."""
    saved, config, file = read_checkpoint(path, PretrainConfig)
    if saved.get("vocabulary") != list(CharVocabulary().tokens):
        raise TrainingError(f"{file} was trained with another vocabulary than this code builds")
    model_config = config.model_config()
    if expected is not None:
        differ = [f"{name}: {getattr(model_config, name)} there, {getattr(expected, name)} here"
                  for name in ENCODER_FIELDS if getattr(model_config, name) != getattr(expected, name)]
        if differ:
            raise TrainingError(f"the encoder of {file} has another shape ({', '.join(differ)}): fine-tune with the "
                                "--preset it was pre-trained with, or set these options to match")
    model = BertForMaskedLM(model_config)
    model.load_state_dict(final_weights(saved))
    return model.eval()


def load_finetuned(path: str | Path) -> tuple[BertClassifier, FinetuneConfig]:
    """The final model of a fine-tuning run (or its export) and its config, on the CPU, in eval mode."""
    saved, config, file = read_checkpoint(path, FinetuneConfig)
    assert isinstance(config, FinetuneConfig)
    if "task" not in saved["config"]:
        raise TrainingError(f"{file} is a pre-training run, not a fine-tuned classifier")
    weights = final_weights(saved)
    # The number of classes is fixed by the training words' labels; the output layer records it.
    model = BertClassifier(config.model_config(), classes=weights["out.weight"].shape[0])
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        raise TrainingError(f"{file} does not hold this classifier's weights ({exc})") from None
    return model.eval(), config


def export(run: str | Path, destination: str | Path) -> Path:
    """The shippable form of a finished pre-training or fine-tuning run (see
    :func:`transformer.loop.export_run`), checked to load before anything is written."""
    saved, _, _ = read_checkpoint(run, FinetuneConfig)
    if "task" in saved["config"]:
        load_finetuned(run)
        config_class: type[LoopConfig] = FinetuneConfig
    else:
        load_pretrained(run)
        config_class = PretrainConfig
    del saved
    return export_run(run, destination, config_class, ("config.json", "metrics.json", "curves.png", "results.json"))


def pretrain(config: PretrainConfig, resume: bool = False, data: G2PData | None = None,
             progress: bool = True) -> RunResult:
    return run_training(PretrainTask(config, data), resume=resume, progress=progress)


def finetune(config: FinetuneConfig, resume: bool = False, data: G2PData | None = None,
             progress: bool = True) -> RunResult:
    return run_training(FinetuneTask(config, data), resume=resume, progress=progress)


def run_name(config: FinetuneConfig, preset: str) -> str:
    """bert-syllables-1000-pretrained-cpu: the task, the labels kept, the start and the preset."""
    start = "pretrained" if config.init else "scratch"
    return f"bert-{config.task}-{config.labels or 'all'}-{start}-{preset}"


COMMANDS = {
    "pretrain": (PretrainConfig, PRETRAIN_PRESETS, PretrainTask, "bert-pretrain-",
                 "Pre-train a small BERT by masked-language modelling on English spellings (CMUdict)."),
    "finetune": (FinetuneConfig, FINETUNE_PRESETS, FinetuneTask, "bert-finetune-",
                 "Fine-tune the small BERT to count syllables or find the stressed one (CMUdict)."),
}


def export_main(argv: Sequence[str]) -> int:
    return export_command(argv, export, "python -m transformer.bert export")


def main(command: str, argv: Sequence[str] | None = None) -> int:
    """``python -m transformer.bert pretrain|finetune [options]``: the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    config_class, presets, task_class, prefix, description = COMMANDS[command]
    config, resume, quiet = command_line(config_class, presets, f"python -m transformer.bert {command}", description,
                                         argv, run_prefix=prefix)
    if isinstance(config, FinetuneConfig) and not resume and not any(a.startswith("--run-dir") for a in argv):
        # one folder per experiment, so that runs of one preset do not collide
        preset = Path(config.run_dir).name.removeprefix(prefix)  # the loop named it runs/<prefix><preset>
        config = replace(config, run_dir=str(runs() / run_name(config, preset)))
    result = launch(task_class(config), resume, quiet)
    if isinstance(result, int):
        return result
    dev = result.metrics["dev"][-1] if result.metrics["dev"] else {}
    print(f"{sum(p.numel() for p in result.model.parameters()):,} parameters, {result.step} steps; "
          f"run folder: {result.run_dir}")
    if "accuracy" in dev:
        print(f"dev accuracy ({'masked letters' if command == 'pretrain' else config.task}): "
              f"{100 * dev['accuracy']:.1f} %")
    results = Path(result.run_dir) / "results.json"
    if command == "finetune" and results.is_file():
        print(f"test accuracy and baselines: {results}")
    return 0
