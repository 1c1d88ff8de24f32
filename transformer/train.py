"""Train the course's Transformer on English spelling to sound.

    python -m transformer.train --preset cpu                 the CPU configuration
    python -m transformer.train --preset tiny --max-steps 50 any setting can be overridden
    python -m transformer.train --resume runs/cpu            continue an interrupted run exactly

The recipe is the paper's (section 5): Adam with beta = (0.9, 0.98) and eps = 1e-9, the
warm-up schedule of equation 3, label smoothing 0.1, dropout, shared embeddings, and batches by
length under a token budget. The schedule, the loss and the batching are the chapter 8
exercises' reference versions; the model is built from chapters 2 to 6.

A run folder holds ``config.json``, ``metrics.json`` (training loss, learning rate, throughput
and dev WER/PER over time), ``curves.png``, ``attention.png`` (cross-attention of a few dev
words) and ``checkpoint.pt``, written atomically, which ``--resume`` continues from.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from reference.capstone import label_smoothed_cross_entropy, length_batches, noam_rate

from . import data as g2p_data
from .attention_paths import PATHS, attention_path, use_attention
from .baseline import TorchTransformer
from .flops import peak_flops, training_flops
from .g2p import EncodedPairs, Vocabularies, encode_pairs, make_batch, predict
from .metrics import count_errors
from .model import Transformer, TransformerConfig, count_parameters
from .parts import EXERCISES, LearnerTransformer, PartsError, load_parts

REPO = Path(__file__).resolve().parent.parent


@dataclass
class TrainConfig:
    """Every setting of a run. The model's fields are those of :class:`TransformerConfig`."""

    # the model
    d_model: int = 128
    h: int = 4
    N: int = 2
    d_ff: int = 512
    dropout: float = 0.0
    share_embeddings: bool = True
    attention: str = "course"  # course (the chapters' code) or fused (F.scaled_dot_product_attention)
    implementation: str = "course"  # course (the chapters' parts), or torch (nn.Transformer, for comparison)
    parts: str = "reference"  # reference, or mine: the parts of your own exercise notebooks
    parts_dir: str = ""  # where your notebooks are (default: exercises/)
    # the data
    stress: bool = False
    train_words: int = 0  # use only the first n training words (0: all of them)
    # the optimisation
    max_tokens: int = 1024  # padded tokens per batch (the larger of source and target length)
    peak_lr: float = 3e-3  # the rate at the end of the warm-up: sets the factor of equation 3
    warmup: int = 500
    label_smoothing: float = 0.1
    max_steps: int = 100_000
    time_limit: float = 0.0  # seconds of training before stopping (0: no limit)
    seed: int = 0
    # the paper's checkpoint averaging (section 6.1): the model kept at the end is the mean of the
    # weights at the last `average_last` multiples of `average_every` steps and at the final step
    average_last: int = 0  # snapshots averaged (0: keep the final weights as they are)
    average_every: int = 200
    # measuring
    eval_every: int = 500  # steps between dev evaluations
    eval_words: int = 1000  # dev words decoded at each evaluation (0: the whole dev split)
    checkpoint_every: int = 500
    # where and how
    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    threads: int = 1  # CPU threads; benchmarks/capstone.py measures 1 against 2 (see the CPU preset)
    precision: str = "fp32"  # fp32, or bf16 (autocast)
    compile: bool = False  # torch.compile the model
    run_dir: str = ""  # default: runs/<preset>

    def __post_init__(self) -> None:
        positive = ("d_model", "h", "N", "d_ff", "max_tokens", "warmup", "max_steps", "eval_every", "checkpoint_every", "threads",
                    "average_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.attention not in PATHS:
            raise ValueError(f"attention must be one of {', '.join(PATHS)}, got {self.attention!r}")
        if self.implementation not in ("course", "torch"):
            raise ValueError(f"implementation must be course or torch, got {self.implementation!r}")
        if self.implementation == "torch" and (self.parts != "reference" or self.attention != "course"):
            raise ValueError("implementation=torch is PyTorch's nn.Transformer: it takes neither --parts mine nor --attention")
        if self.parts not in ("reference", "mine"):
            raise ValueError(f"parts must be reference or mine, got {self.parts!r}")
        if self.parts == "mine" and self.attention != "course":
            raise ValueError("attention=fused replaces the reference attention layer; with parts=mine use attention=course")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.average_last < 0:
            raise ValueError(f"average_last must be 0 (no averaging) or more, got {self.average_last}")
        if self.peak_lr <= 0:
            raise ValueError(f"peak_lr must be positive, got {self.peak_lr}")
        self.model_config(vocab_size=70)  # the model's own checks, early

    def model_config(self, vocab_size: int, target_vocab_size: int | None = None) -> TransformerConfig:
        return TransformerConfig(
            src_vocab_size=vocab_size, tgt_vocab_size=target_vocab_size or vocab_size, d_model=self.d_model,
            h=self.h, N=self.N, d_ff=self.d_ff, dropout=self.dropout, max_len=64,
            share_embeddings=self.share_embeddings, pad_id=g2p_data.Vocabulary.pad_id,
        )

    @property
    def lr_factor(self) -> float:
        """The factor of equation 3 that makes its peak, at step = warmup, equal peak_lr."""
        return self.peak_lr * math.sqrt(self.d_model * self.warmup)


#: settings that may change when a run is resumed: they decide when to stop, what to measure and
#: where to run, not what the next training step computes
RESUMABLE = frozenset({"max_steps", "time_limit", "eval_every", "eval_words", "checkpoint_every", "device", "threads", "run_dir"})

PRESETS: dict[str, TrainConfig] = {
    # seconds on a laptop: what the tests run
    "tiny": TrainConfig(d_model=32, h=2, N=1, d_ff=64, train_words=400, max_tokens=256, peak_lr=3e-3, warmup=10,
                        max_steps=30, eval_every=15, eval_words=40, checkpoint_every=15),
    # ten minutes on two CPU cores; two threads trained 1.7 times faster than one on an idle 2-core
    # machine (benchmarks/RESULTS.md), so the preset takes both cores
    "cpu": TrainConfig(d_model=128, h=4, N=2, d_ff=512, dropout=0.0, max_tokens=1024, peak_lr=3e-3, warmup=500, threads=2,
                       time_limit=600.0, eval_every=1000, eval_words=500, checkpoint_every=500, average_last=5,
                       average_every=200),
    # one GPU: a wider, deeper model, large batches, bf16
    "gpu": TrainConfig(d_model=256, h=4, N=3, d_ff=1024, dropout=0.1, max_tokens=16384, peak_lr=2e-3, warmup=1000,
                       time_limit=600.0, eval_every=500, eval_words=0, checkpoint_every=1000, precision="bf16",
                       average_last=5, average_every=500),
}


class TrainingError(RuntimeError):
    """A run cannot start or continue; the message says why and what to do."""


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


def atomic_write(path: Path, write) -> None:
    """Write to a temporary file beside ``path`` and rename it: a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def save_json(path: Path, value: Any) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8"))


def identity(config: TrainConfig) -> dict[str, Any]:
    """The settings that make two runs the same run."""
    return {k: v for k, v in asdict(config).items() if k not in RESUMABLE}


def check_same_run(saved: dict[str, Any], config: TrainConfig, where: Path) -> None:
    ours = identity(config)
    theirs = {k: v for k, v in saved.items() if k not in RESUMABLE}
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    if differ:
        details = ", ".join(f"{k}: {theirs.get(k)!r} there, {ours.get(k)!r} here" for k in differ[:6])
        raise TrainingError(
            f"the checkpoint in {where} belongs to another configuration ({details}). Resume it with its own "
            "settings (only " + ", ".join(sorted(RESUMABLE)) + " may change), or train in a new --run-dir."
        )


# ---------------------------------------------------------------------------------------------
# evaluation and pictures
# ---------------------------------------------------------------------------------------------


def evaluate(model: Transformer, split: g2p_data.Split, vocabs: Vocabularies, device: torch.device,
             limit: int = 0) -> dict[str, float]:
    """Greedy WER and PER (percent) on the first ``limit`` words of a split (all when 0)."""
    words = list(split.words[:limit] if limit else split.words)
    references = list(split.references[: len(words)])
    predictions = predict(model, words, vocabs, device)
    counts = count_errors(predictions, references, ignore_stress=False)
    return {"wer": counts.wer, "per": counts.per, "words": counts.words}


def draw_curves(metrics: dict[str, list[dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    train, dev = metrics["train"], metrics["dev"]
    if train:
        axes[0].plot([r["step"] for r in train], [r["loss"] for r in train])
        axes[1].plot([r["step"] for r in train], [r["lr"] for r in train])
    if dev:
        axes[2].plot([r["step"] for r in dev], [r["wer"] for r in dev], "o-", label="WER")
        axes[2].plot([r["step"] for r in dev], [r["per"] for r in dev], "s-", label="PER")
        axes[2].legend()
    axes[0].set(xlabel="step", ylabel="training loss (label-smoothed)")
    axes[1].set(xlabel="step", ylabel="learning rate")
    axes[2].set(xlabel="step", ylabel="dev error rate (%)")
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, dpi=90, format="png"))
    plt.close(fig)


@torch.no_grad()
def draw_attention(model: Transformer, words: Sequence[str], vocabs: Vocabularies, device: torch.device, path: Path) -> None:
    """The last decoder layer's cross-attention, averaged over heads, for the greedy pronunciation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not hasattr(getattr(model, "decoder", None), "layers"):
        return  # nn.Transformer keeps no attention weights to draw
    predictions = predict(model, words, vocabs, device)
    was_training, kind = model.training, attention_path(model)
    if kind == "fused":
        use_attention(model, "course")  # the fused kernel keeps no weights to draw
    model.eval()
    fig, axes = plt.subplots(1, len(words), figsize=(3.2 * len(words), 3.2), squeeze=False)
    for ax, word, phonemes in zip(axes[0], words, predictions):
        src = torch.tensor([vocabs.source.encode(word, eos=True)], device=device)
        ys = torch.tensor([vocabs.target.encode(phonemes, bos=True)], device=device)
        model(src, ys)
        weights = model.decoder.layers[-1].cross_attn.attn_weights[0].mean(0).float().cpu().numpy()  # (T, S)
        ax.imshow(weights, cmap="Greys", vmin=0, vmax=1)
        ax.set_xticks(range(len(word) + 1), [*word, "</s>"])
        ax.set_yticks(range(len(phonemes) + 1), ["<s>", *phonemes])
        ax.set_title(word)
    model.train(was_training)
    if kind == "fused":
        use_attention(model, kind)
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, dpi=90, format="png"))
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------


class StopRequest:
    """Ctrl-C asks the loop to stop at the end of the current step, so that the checkpoint it then
    writes is exactly the state between two steps; a second Ctrl-C stops at once, unsaved."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # only there can signals be caught
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


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

    def share(self, indices: list[int]) -> list[int]:
        if len(indices) < self.world:
            raise TrainingError(f"a batch of {len(indices)} examples cannot be shared by {self.world} processes: "
                                "raise --max-tokens")
        return indices[self.rank :: self.world]

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
class RunResult:
    run_dir: Path
    model: Transformer
    step: int
    metrics: dict[str, list[dict[str, float]]]


def build_model(config: TrainConfig, vocabs: Vocabularies) -> Transformer:
    model_config = config.model_config(len(vocabs.source), len(vocabs.target))
    if config.implementation == "torch":
        return TorchTransformer(model_config)
    if config.parts == "mine":
        return LearnerTransformer(model_config, load_parts(Path(config.parts_dir or EXERCISES)))
    return use_attention(Transformer(model_config), config.attention)


def train(config: TrainConfig, resume: bool = False, data: g2p_data.G2PData | None = None,
          progress: bool = True) -> RunResult:
    """Train (or, with ``resume``, continue) the run described by ``config`` in ``config.run_dir``."""
    if not config.run_dir:
        raise TrainingError("no run folder: set run_dir (--run-dir)")
    run_dir = Path(config.run_dir)
    checkpoint_path = run_dir / "checkpoint.pt"
    processes = Processes()
    device = choose_device(config.device)
    if processes.distributed and device.type == "cuda":
        device = torch.device("cuda", processes.local_rank)  # one GPU per process
    checkpoint = None
    if resume:
        if not checkpoint_path.is_file():
            raise TrainingError(f"nothing to resume: {checkpoint_path} does not exist")
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
        check_same_run(checkpoint["config"], config, run_dir)
    elif checkpoint_path.exists():
        raise TrainingError(
            f"{run_dir} already holds a run: continue it with --resume {run_dir}, or choose another --run-dir"
        )

    data = g2p_data.load(stress=config.stress) if data is None else data
    vocabs = Vocabularies.make(config.share_embeddings, config.stress)
    pairs = data.train.pairs
    if config.train_words:
        kept = set(data.train.words[: config.train_words])
        pairs = [p for p in pairs if p[0] in kept]
    if not pairs:
        raise TrainingError("the training split is empty: check the data files and --train-words")
    if not len(data.dev):
        raise TrainingError("the dev split is empty: there is nothing to measure the model on")
    examples: EncodedPairs = encode_pairs(pairs, vocabs)
    lengths = examples.lengths
    if max(lengths) > config.max_tokens:
        raise TrainingError(f"max_tokens={config.max_tokens} is below the longest example ({max(lengths)} tokens)")

    processes.start(device)
    torch.manual_seed(config.seed)
    model = build_model(config, vocabs).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    step, epoch, position = 0, 0, 0  # position: batches of this epoch already trained on
    metrics: dict[str, list[dict[str, float]]] = {"train": [], "dev": []}
    elapsed = 0.0
    snapshots: list[dict[str, torch.Tensor]] = []  # for averaging: the weights at the last multiples of average_every
    if checkpoint is not None:
        if "optimizer" not in checkpoint:
            raise TrainingError(f"{checkpoint_path} is an exported model, not a run: it cannot be resumed")
        model.load_state_dict(checkpoint["model"])
        snapshots = checkpoint.get("snapshots", [])
        optimizer.load_state_dict(checkpoint["optimizer"])
        step, epoch, position = checkpoint["step"], checkpoint["epoch"], checkpoint["position"]
        metrics, elapsed = checkpoint["metrics"], checkpoint["elapsed"]
        torch.set_rng_state(checkpoint["rng"])
        if device.type == "cuda" and checkpoint.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(checkpoint["cuda_rng"], device)
    if processes.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_json(run_dir / "config.json", asdict(config))
    forward: torch.nn.Module = model
    if processes.distributed:
        forward = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if config.compile:
        forward = torch.compile(forward)

    averaged: dict[str, torch.Tensor] | None = None  # set when training ends

    def save_checkpoint() -> None:
        if not processes.main:
            return
        state = {
            "config": asdict(config), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "step": step, "epoch": epoch, "position": position, "metrics": metrics, "elapsed": elapsed,
            "snapshots": snapshots, "averaged": averaged,
            "rng": torch.get_rng_state(), "vocabulary": list(vocabs.target.tokens),
            "source_vocabulary": list(vocabs.source.tokens),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        }
        atomic_write(checkpoint_path, lambda p: torch.save(state, p))
        save_json(run_dir / "metrics.json", metrics)

    bar = tqdm(
        total=config.max_steps, initial=step, desc="training", unit="step",
        disable=not (progress and processes.main), dynamic_ncols=True,
    )
    window_loss, window_tokens, window_flops, window_start = 0.0, 0, 0.0, time.perf_counter()
    peak = peak_flops(device)
    started = time.perf_counter() - elapsed
    model.train()
    with StopRequest() as stop_request:
        try:
            out_of_time, interrupted = bool(config.time_limit and elapsed >= config.time_limit), False
            while step < config.max_steps and not out_of_time:
                batches = length_batches(lengths, config.max_tokens, seed=config.seed, epoch=epoch)
                while position < len(batches) and step < config.max_steps:
                    mine = processes.share(batches[position])
                    src, tgt_in, tgt_out = (t.to(device) for t in make_batch(examples, mine, vocabs))
                    real = int((tgt_out != vocabs.target.pad_id).sum())
                    tokens = real + int((src != vocabs.source.pad_id).sum())
                    flops = training_flops(model.config, src.shape[0], src.shape[1], tgt_in.shape[1])
                    all_real, all_tokens, all_flops = processes.total(real, tokens, flops, device=device)
                    step += 1
                    lr = noam_rate(step, config.d_model, config.warmup, config.lr_factor)
                    for group in optimizer.param_groups:
                        group["lr"] = lr
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16"):
                        logits = forward(src, tgt_in)  # (B, T, V)
                    loss = label_smoothed_cross_entropy(logits.float(), tgt_out, config.label_smoothing, vocabs.target.pad_id)
                    # The mean over this share's tokens, reweighted so that the processes' average is
                    # the mean over the whole batch's tokens.
                    scaled = loss * (real * processes.world / all_real) if processes.distributed else loss
                    optimizer.zero_grad(set_to_none=True)
                    scaled.backward()
                    optimizer.step()
                    position += 1
                    if config.average_last and step % config.average_every == 0:
                        snapshots = [*snapshots, snapshot(model)][-config.average_last :]
                    elapsed = time.perf_counter() - started
                    out_of_time = bool(config.time_limit and elapsed >= config.time_limit)
                    loss_sum, stop, interrupted = processes.total(loss.item() * real, float(out_of_time),
                                                                  float(stop_request.requested), device=device)
                    out_of_time, interrupted = stop > 0, interrupted > 0  # every process stops at the same step

                    window_loss += loss_sum / all_real
                    window_tokens += int(all_tokens)
                    window_flops += all_flops
                    log_every = max(1, min(50, config.eval_every))
                    if step % log_every == 0:
                        seconds = time.perf_counter() - window_start
                        record = {"step": step, "loss": window_loss / log_every, "lr": lr,
                                  "tokens_per_s": window_tokens / max(seconds, 1e-9),
                                  "tflops_per_s": window_flops / max(seconds, 1e-9) / 1e12, "elapsed_s": elapsed}
                        if peak:  # model FLOPs utilisation: the matrix products' share of the devices' peak
                            record["mfu"] = record["tflops_per_s"] * 1e12 / (peak * processes.world)
                        metrics["train"].append(record)
                        shown = {"loss": f"{record['loss']:.3f}", "lr": f"{lr:.2e}", "tok/s": f"{record['tokens_per_s']:.0f}"}
                        if peak:
                            shown["MFU"] = f"{record['mfu']:.1%}"
                        bar.set_postfix(shown)
                        window_loss, window_tokens, window_flops, window_start = 0.0, 0, 0.0, time.perf_counter()
                    bar.update(1)
                    if step % config.eval_every == 0 and processes.main:
                        metrics["dev"].append({"step": step, "elapsed_s": elapsed,
                                               **evaluate(model, data.dev, vocabs, device, config.eval_words)})
                        model.train()
                        bar.write(
                            f"step {step}: dev WER {metrics['dev'][-1]['wer']:.1f} %, PER {metrics['dev'][-1]['per']:.2f} %"
                        )
                    if step % config.checkpoint_every == 0:
                        save_checkpoint()
                    if out_of_time or interrupted:
                        break
                if position >= len(batches):
                    epoch, position = epoch + 1, 0
                if interrupted:
                    break
        finally:
            bar.close()
    if interrupted and not out_of_time:
        save_checkpoint()
        if processes.main:
            print(f"interrupted after step {step}: `--resume {run_dir}` continues from here", file=sys.stderr)
        raise KeyboardInterrupt
    final_model: torch.nn.Module = model
    if config.average_last:
        # the final weights are one of the averaged; they are already the last snapshot at a multiple of average_every
        last = snapshots if snapshots and step % config.average_every == 0 else [*snapshots, snapshot(model)]
        last = last[-config.average_last :]
        averaged = average_weights(last)
        with torch.random.fork_rng(devices=[]):  # a fresh model's initialisation must not move the saved random state
            final_model = build_model(config, vocabs).to(device)
        final_model.load_state_dict(averaged)
    if processes.main:
        if config.average_last or not metrics["dev"] or metrics["dev"][-1]["step"] != step:  # the final model is measured
            measured = evaluate(final_model, data.dev, vocabs, device, config.eval_words)
            if config.average_last:
                measured["averaged"] = len(last)
            metrics["dev"].append({"step": step, "elapsed_s": elapsed, **measured})
        save_checkpoint()
        draw_curves(metrics, run_dir / "curves.png")
        draw_attention(final_model, list(data.dev.words[:3]), vocabs, device, run_dir / "attention.png")
    processes.wait()
    return RunResult(run_dir, final_model, step, metrics)


def load_trained(path: str | Path, device: str = "auto") -> tuple[Transformer, TrainConfig, Vocabularies]:
    """A trained model from a run folder or its checkpoint file, in eval mode."""
    path = Path(path)
    file = path / "checkpoint.pt" if path.is_dir() else path
    if not file.is_file():
        raise TrainingError(f"no checkpoint at {file}")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch.load raises several kinds for a file that is not one of its own
        raise TrainingError(f"{file} is not a checkpoint: {type(exc).__name__}: {exc}") from None
    try:
        config = TrainConfig(**checkpoint["config"])
    except (KeyError, TypeError) as exc:
        raise TrainingError(f"{file} is not a checkpoint of this training loop ({exc})") from None
    vocabs = Vocabularies.make(config.share_embeddings, config.stress)
    if list(vocabs.target.tokens) != checkpoint["vocabulary"] or list(vocabs.source.tokens) != checkpoint["source_vocabulary"]:
        raise TrainingError(f"{file} was trained with other vocabularies than this code builds")
    target = choose_device(device)
    model = build_model(config, vocabs)
    weights = checkpoint.get("averaged")
    model.load_state_dict(weights if weights is not None else checkpoint["model"])
    return model.to(target).eval(), config, vocabs


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m transformer.train", description="Train the Transformer on English spelling to sound (CMUdict).",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="the starting configuration (default: cpu)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = type(getattr(PRESETS["cpu"], f.name))
        if kind is bool:
            parser.add_argument(flag, dest=f.name, type=_boolean, metavar="true|false", default=None)
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None)
    return parser


def _boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def config_from_args(argv: Sequence[str] | None = None) -> tuple[TrainConfig, bool, bool]:
    """(config, resume, quiet) from the command line: a preset, or a run's saved config, plus overrides."""
    parser = _parser()
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name) is not None}
    if args.resume:
        saved = Path(args.resume) / "config.json"
        if not saved.is_file():
            parser.error(f"nothing to resume: {saved} does not exist")
        base = json.loads(saved.read_text(encoding="utf-8"))
        base["run_dir"] = args.resume
    else:
        base = asdict(PRESETS[args.preset])
        base["run_dir"] = base["run_dir"] or str(REPO / "runs" / args.preset)
    try:
        config = TrainConfig(**{**base, **overrides})
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return config, bool(args.resume), args.quiet


def main(argv: Sequence[str] | None = None) -> int:
    config, resume, quiet = config_from_args(argv)
    torch.set_num_threads(config.threads)
    try:
        result = train(config, resume=resume, progress=not quiet)
    except (TrainingError, PartsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    dev = result.metrics["dev"][-1] if result.metrics["dev"] else None
    print(f"{count_parameters(result.model):,} parameters, {result.step} steps; run folder: {result.run_dir}")
    if dev:
        print(f"dev ({dev['words']} words): WER {dev['wer']:.1f} %, PER {dev['per']:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
