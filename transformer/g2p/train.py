"""Train the course's Transformer on English spelling to sound.

    python -m transformer.g2p train --preset cpu                 the CPU configuration
    python -m transformer.g2p train --preset tiny --max-steps 50 any setting can be overridden
    python -m transformer.g2p train --resume runs/cpu            continue an interrupted run exactly

The recipe is the paper's (section 5): Adam with beta = (0.9, 0.98) and eps = 1e-9, the
warm-up schedule of equation 3, label smoothing 0.1, dropout, shared embeddings, and batches by
length under a token budget. The CPU preset adds what measurement chose for a ten-minute budget
(benchmarks/RESULTS.md): a cool-down, bf16 matrix products, checkpoint averaging, AdamW's
weight decay, and two models trained at once and decoded as one (``members``, see
:mod:`transformer.g2p.ensemble`). The schedule, the loss and the batching are the chapter 8
exercises' reference versions, and the model is built from chapters 2 to 6; with ``--parts mine``
all of them are the learner's (see :mod:`transformer.parts`).

The loop itself (steps, schedule, checkpoints, resume, averaging, DDP, bf16) is the course's
one training loop, :mod:`transformer.loop`; this module is its G2P task.

A run folder holds ``config.json``, ``metrics.json`` (training loss, learning rate, throughput
and dev WER/PER over time), ``curves.png``, ``attention.png`` (cross-attention of a few dev
words) and ``checkpoint.pt``, written atomically, which ``--resume`` continues from.
"""
from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from course.files import atomic_write

from .. import checkpoint
from ..checkpoint import final_weights
from ..flops import training_flops
from ..fused import attention_path, use_attention, use_norm
from ..loop import (
    Batch,
    LoopConfig,
    Processes,
    RunResult,
    Task,
    TrainingError,
    already_holds_a_run,
    choose_device,
    command_line,
    draw_curves,
    exit_status,
    launch,
    read_checkpoint,
    run_folder,
    run_training,
    save_json,
)
from ..model import Transformer, TransformerConfig, count_parameters
from ..parts import EXERCISES, G2P_PARTS, NEEDED, LearnerTransformer, PartsError, load_parts
from .baseline import TorchTransformer
from .data import G2PData, Split, Vocabulary, load
from .encoding import EncodedPairs, Vocabularies, bucket_length, encode_pairs, predict, resident_examples
from .ensemble import Ensemble, Members, member_config, member_dir
from .metrics import count_errors


@dataclass(frozen=True)
class TrainConfig(LoopConfig):
    """Every setting of a run: the loop's (:class:`LoopConfig`), then the model's and the data's.
    The model's fields are those of :class:`TransformerConfig`."""

    # the model
    d_model: int = 128
    h: int = 4  # attention heads
    N: int = 2  # layers (of the encoder and of the decoder)
    d_ff: int = 512  # width of the feed-forward network's hidden layer
    dropout: float = 0.0  # dropout rate (the paper's P_drop)
    share_embeddings: bool = True  # one embedding matrix for letters and phonemes, also used by the output layer
    attention: str = "course"  # course (the chapters' code) or fused (F.scaled_dot_product_attention)
    norm: str = "course"  # course (chapter 4's LayerNorm) or fused (F.layer_norm): the same function, faster
    implementation: str = "course"  # course (the chapters' parts), or torch (nn.Transformer, for comparison)
    # the data
    stress: bool = False  # keep the stress digits of the vowels (AH0, AH1) in the targets
    train_words: int = 0  # use only the first n training words (0: all of them)
    # the optimisation
    max_tokens: int = 1024  # padded tokens per batch (the larger of source and target length)
    # >0: batches padded to multiples of this length, with max_tokens // length rows, cut from the
    # training split kept on the device: a few fixed shapes, which torch.compile and CUDA graphs reuse
    bucket: int = 0  # 0: each batch padded to its own longest example, made on the CPU
    label_smoothing: float = 0.1  # the label smoothing epsilon of the loss (the paper's 0.1)
    # measuring
    eval_words: int = 1000  # dev words decoded at each evaluation (0: the whole dev split)
    # models trained at once from seeds seed, seed + 1, ..., one process each with `threads` threads, and
    # decoded as one (the mean of their probabilities): on a small CPU two processes of one thread train
    # 1.6 times the steps of one process of two (see transformer/g2p/ensemble.py)
    members: int = 1  # models in the ensemble (1: one model)
    # at the end of an ensemble's run, each model alone and the models as one decode the same dev words: the
    # comparison that says what the ensemble adds, on more words than the evaluations during training
    compare_words: int = 0  # with members > 1: dev words of that final comparison (0: the whole dev split)

    RESUMABLE = LoopConfig.RESUMABLE | {"eval_words", "compare_words"}
    KERNEL_PATHS = {"attention": "the reference attention layer", "norm": "the reference LayerNorm"}

    @classmethod
    def fused_kernels_apply(cls, settings: dict) -> bool:
        """Not for the learner's parts, nor for PyTorch's nn.Transformer, which has its own kernels."""
        return super().fused_kernels_apply(settings) and settings.get("implementation", "course") == "course"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.bucket < 0:
            raise ValueError(f"bucket must be 0 (no buckets) or a length, got {self.bucket}")
        if self.implementation not in ("course", "torch"):
            raise ValueError(f"implementation must be course or torch, got {self.implementation!r}")
        if self.implementation == "torch" and (self.parts != "reference" or self.attention != "course"
                                               or self.norm != "course"):
            raise ValueError("implementation=torch is PyTorch's nn.Transformer: it takes neither --parts mine nor "
                             "--attention nor --norm")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.members < 1:
            raise ValueError(f"members must be at least 1, got {self.members}")
        if self.compare_words < 0:
            raise ValueError(f"compare_words must be 0 (the whole dev split) or more, got {self.compare_words}")

    def model_config(self, vocab_size: int, target_vocab_size: int | None = None) -> TransformerConfig:
        return TransformerConfig(
            **self.shape(), src_vocab_size=vocab_size, tgt_vocab_size=target_vocab_size or vocab_size, max_len=64,
            share_embeddings=self.share_embeddings, pad_id=Vocabulary.pad_id,
        )


#: settings that may change when a run is resumed
RESUMABLE = TrainConfig.RESUMABLE

PRESETS: dict[str, TrainConfig] = {
    # seconds on a laptop: what the tests run
    "tiny": TrainConfig(d_model=32, h=2, N=1, d_ff=64, train_words=400, max_tokens=256, peak_lr=3e-3, warmup=10,
                        max_steps=30, eval_every=15, eval_words=40, checkpoint_every=15, compare_words=40),
    # ten minutes on two CPU cores; why each setting: benchmarks/RESULTS.md, "The G2P presets, setting by setting"
    "cpu": TrainConfig(d_model=128, h=4, N=2, d_ff=512, dropout=0.0, max_tokens=2048, peak_lr=4e-3, warmup=300, threads=1,
                       members=2, norm="fused", fused_adam=True,
                       time_limit=600.0, cooldown=0.3, precision="auto", weight_decay=0.1, eval_every=1000,
                       eval_words=500, checkpoint_every=500, average_last=5, average_every=200),
    # one GPU, five minutes (benchmarks/gpu.py); why each setting: benchmarks/RESULTS.md, "The G2P presets, setting by setting"
    "gpu": TrainConfig(d_model=256, h=4, N=3, d_ff=1024, dropout=0.1, max_tokens=16384, peak_lr=2e-3, warmup=1000,
                       time_limit=300.0, eval_every=2000, eval_words=0, checkpoint_every=5000, precision="bf16",
                       average_last=5, average_every=500, attention="fused", bucket=8, compile=True,
                       compile_mode="reduce-overhead"),
}


# ---------------------------------------------------------------------------------------------
# evaluation and pictures
# ---------------------------------------------------------------------------------------------


def evaluate(model: Transformer, split: Split, vocabs: Vocabularies, device: torch.device,
             limit: int = 0, distance: Callable[[list, list], int] | None = None) -> dict[str, float]:
    """Greedy WER and PER (percent) on the first ``limit`` words of a split (all when 0), measured with
    ``distance`` (the course's edit_distance unless given)."""
    words = list(split.words[:limit] if limit else split.words)
    references = list(split.references[: len(words)])
    predictions = predict(model, words, vocabs, device)
    counts = count_errors(predictions, references, ignore_stress=False, distance=distance)
    return {"wer": counts.wer, "per": counts.per, "words": counts.words}


@torch.no_grad()
def draw_attention(model: Transformer, words: Sequence[str], vocabs: Vocabularies, device: torch.device, path: Path) -> None:
    """The last decoder layer's cross-attention, averaged over heads, for the greedy pronunciation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(model, Ensemble):
        model = model.members[0]  # each model attends on its own: the first one's, on its own predictions
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
# the task
# ---------------------------------------------------------------------------------------------


def build_model(config: TrainConfig, vocabs: Vocabularies, parts: dict | None = None) -> Transformer:
    """The model a config describes; with parts=mine, made of ``parts`` (the learner's modules, loaded when
    not given)."""
    model_config = config.model_config(len(vocabs.source), len(vocabs.target))
    if config.members > 1:
        return Ensemble([build_model(member_config(config, i), vocabs, parts) for i in range(config.members)])
    if config.implementation == "torch":
        return TorchTransformer(model_config)
    if config.parts == "mine":
        return LearnerTransformer(model_config, parts or load_parts(Path(config.parts_dir or EXERCISES)))
    return use_norm(use_attention(Transformer(model_config), config.attention), config.norm)


class G2PTask(Task):
    """Spelling to sound for :func:`transformer.loop.run_training`: words in, phonemes out, teacher forcing."""

    config: TrainConfig
    MODEL_PARTS = NEEDED
    PARTS = G2P_PARTS
    curves = (("wer", "WER"), ("per", "PER"))
    curves_axis = "dev error rate (%)"
    loss_axis = "training loss (label-smoothed)"

    def __init__(self, config: TrainConfig, data: G2PData | None = None) -> None:
        if config.members > 1:
            raise TrainingError(f"a task trains one model; members={config.members} trains each in its own process: "
                                "use train(), or member_config(config, i) for one of them")
        super().__init__(config)
        self.data = data
        self.vocabs = Vocabularies.make(config.share_embeddings, config.stress)
        self.model_config = config.model_config(len(self.vocabs.source), len(self.vocabs.target))

    def prepare(self) -> None:
        config = self.config
        self.data = load(stress=config.stress) if self.data is None else self.data
        pairs = self.data.train.pairs
        if config.train_words:
            kept = set(self.data.train.words[: config.train_words])
            pairs = [p for p in pairs if p[0] in kept]
        if not pairs:
            raise TrainingError("the training split is empty: check the data files and --train-words")
        if not len(self.data.dev):
            raise TrainingError("the dev split is empty: there is nothing to measure the model on")
        self.examples: EncodedPairs = encode_pairs(pairs, self.vocabs)
        self.lengths = self.examples.lengths
        if config.bucket:  # batched by their padded lengths, so that a batch's rows fit max_tokens once padded
            self.lengths = [bucket_length(n, config.bucket) for n in self.lengths]
        self.resident: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        if max(self.lengths) > config.max_tokens:
            padded = f", padded to a multiple of bucket={config.bucket}" if config.bucket else ""
            raise TrainingError(f"max_tokens={config.max_tokens} is below the longest example ({max(self.lengths)} "
                                f"tokens{padded})")

    def build_model(self) -> Transformer:
        return build_model(self.config, self.vocabs, self.parts.modules)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        return self.parts["length_batches"](self.lengths, self.config.max_tokens, seed=self.config.seed, epoch=epoch)

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        """The batch each padded to its own longest source and target: what :func:`encoding.make_batch` makes,
        cut from the whole training split, encoded once (made row by row, a batch cost some 770 small copies)."""
        if self.config.bucket:
            return self.bucketed_batch(indices, device)
        src_all, tgt_in_all, tgt_out_all = self.resident_on(device)
        index = torch.tensor(indices, device=device)
        source_lengths = [len(self.examples.sources[i]) for i in indices]
        target_lengths = [len(self.examples.targets[i]) for i in indices]
        S, T = max(source_lengths), max(target_lengths)
        src, tgt_in, tgt_out = src_all[index, :S], tgt_in_all[index, :T], tgt_out_all[index, :T]  # (B, S), (B, T), (B, T)
        real = sum(target_lengths)  # counted on the host: no wait for the device
        flops = training_flops(self.model_config, len(indices), S, T)
        return Batch(inputs=(src, tgt_in), targets=tgt_out, count=real, tokens=real + sum(source_lengths), flops=flops)

    def resident_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every training example, padded to the longest, on ``device`` (made at the first batch)."""
        if str(device) not in self.resident:
            self.resident = {str(device): resident_examples(self.examples, self.vocabs, max(self.lengths), device)}
        return self.resident[str(device)]

    def bucketed_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        """The batch at its bucket's fixed shape (rows, L): L its longest bucketed length, rows this process's
        share of max_tokens // L, the rows beyond its examples filled with the empty example, which the loss
        ignores. Cut on the device from the whole training split, encoded once."""
        resident = self.resident_on(device)
        length = max(self.lengths[i] for i in indices)
        rows = -(-(self.config.max_tokens // length) // Processes().world)
        if len(indices) > rows:
            raise TrainingError(f"a batch of {len(indices)} examples of {length} tokens does not fit max_tokens="
                                f"{self.config.max_tokens}: length_batches must keep a batch's padded size within it")
        empty = len(self.examples)  # the empty example's row
        index = torch.tensor([*indices, *[empty] * (rows - len(indices))], device=device)
        src, tgt_in, tgt_out = (t[index, :length] for t in resident)  # (rows, L) each
        real = sum(len(self.examples.targets[i]) for i in indices)  # counted on the host: no wait for the device
        tokens = real + sum(len(self.examples.sources[i]) for i in indices)
        flops = training_flops(self.model_config, rows, length, length)
        return Batch(inputs=(src, tgt_in), targets=tgt_out, count=real, tokens=tokens, flops=flops)

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        return self.parts["label_smoothed_cross_entropy"](output.float(), batch.targets, self.config.label_smoothing,
                                                          self.vocabs.target.pad_id)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        assert self.data is not None
        return evaluate(model, self.data.dev, self.vocabs, _device_of(model), self.config.eval_words,
                        self.parts["edit_distance"])

    def report(self, measured: dict[str, float]) -> str:
        return dev_line(measured)

    def checkpoint_extra(self) -> dict[str, list[str]]:
        return {"vocabulary": list(self.vocabs.target.tokens), "source_vocabulary": list(self.vocabs.source.tokens)}

    def finish(self, model: torch.nn.Module, run_dir: Path) -> None:
        assert self.data is not None
        draw_attention(model, list(self.data.dev.words[:3]), self.vocabs, _device_of(model), run_dir / "attention.png")

    def course_attention(self) -> bool:
        return self.config.attention == "course"


def dev_line(measured: dict[str, float]) -> str:
    """The dev figures as printed, with a word on a PER above 100 %, which early in training is right."""
    line = f"dev WER {measured['wer']:.1f} %, PER {measured['per']:.2f} %"
    if measured["per"] > 100:
        line += (" (over 100 %: the predictions are longer than the references, often running on to the length "
                 "limit early in training, and every extra phoneme counts as one more edit)")
    return line


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def train(config: TrainConfig, resume: bool = False, data: G2PData | None = None,
          progress: bool = True) -> RunResult:
    """Train (or, with ``resume``, continue) the run described by ``config`` in ``config.run_dir``."""
    if config.members > 1:
        return train_ensemble(config, resume, progress)
    return run_training(G2PTask(config, data), resume=resume, progress=progress)


def train_ensemble(config: TrainConfig, resume: bool = False, progress: bool = True) -> RunResult:
    """Train ``config.members`` models at once, one process each, then measure and save them as one
    (:mod:`transformer.g2p.ensemble`). Raises KeyboardInterrupt when stopped, after every member has saved."""
    run_dir = run_folder(config)
    if Processes().distributed:
        raise TrainingError("members > 1 starts one process for each model; torchrun's processes train one model "
                            "together (DDP): use members=1 under torchrun")
    folders = [member_dir(run_dir, i) for i in range(config.members)]
    started = [(folder / checkpoint.FILE).exists() for folder in folders]
    if resume and not any(started) and (run_dir / checkpoint.FILE).exists():
        raise TrainingError(f"{run_dir} holds an exported model, not a run: it cannot be resumed")
    if not resume and (any(started) or (run_dir / checkpoint.FILE).exists()):
        raise already_holds_a_run(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_json(run_dir / "config.json", asdict(config))
    if progress:
        print(f"{config.members} models at once (seeds {config.seed} to {config.seed + config.members - 1}), one "
              f"process of {config.threads} thread(s) each; {folders[0]} shows its progress here, the others write "
              "train.log in their folders", flush=True)
    codes = Members(config, resume, quiet=not progress, train_member=train_member).run()
    if any(code in (None, 130, -signal.SIGINT, -signal.SIGTERM) for code in codes):
        print(f"interrupted: `--resume {run_dir}` continues every model from its last checkpoint", file=sys.stderr)
        raise KeyboardInterrupt
    failed = [f"{folder} stopped with exit code {code}" + (f" (its output: {folder / 'train.log'})" if i else "")
              for i, (folder, code) in enumerate(zip(folders, codes)) if code != 0]
    if failed:
        raise TrainingError("; ".join(failed))
    return finish_ensemble(config)


def train_member(settings: dict, index: int, resume: bool, quiet: bool) -> int:
    """The ``index``-th member of the run ``settings`` describe, trained in the process :class:`Members` started
    for it: its exit status."""
    result = launch(G2PTask(member_config(TrainConfig(**settings), index)), resume, quiet, errors=(PartsError,))
    return result if isinstance(result, int) else 0


def finish_ensemble(config: TrainConfig) -> RunResult:
    """The trained members as one model: measured on the dev split beside each member alone, saved as the
    run folder's checkpoint (in the exported form: the final weights of every member), with the members' curves
    and the first one's attention."""
    task = G2PTask(member_config(config, 0))  # the members' task: its vocabularies, measurement and pictures
    run_dir, device = Path(config.run_dir), choose_device(config.device)
    model = build_model(config, task.vocabs).to(device)
    steps, elapsed, metrics = [], [], []
    for i, member in enumerate(model.members):
        saved, _, file = read_checkpoint(member_dir(run_dir, i), TrainConfig)
        _check_vocabularies(saved, task.vocabs, file)
        member.load_state_dict(final_weights(saved))
        steps.append(saved[checkpoint.STEP])
        elapsed.append(saved[checkpoint.ELAPSED])
        metrics.append(saved[checkpoint.METRICS])
    model.eval()
    # Each model alone and the models as one, on compare_words dev words (the whole split unless it says fewer):
    # the few hundred words measured during training move by points from one run to the next
    task.data = load(stress=config.stress)
    dev, distance = task.data.dev, task.parts["edit_distance"]
    words = config.compare_words
    alone = [evaluate(member, dev, task.vocabs, device, words, distance) for member in model.members]
    measured = evaluate(model, dev, task.vocabs, device, words, distance)
    record = {"step": max(steps), "elapsed_s": max(elapsed), **measured, "member_steps": steps, "alone": alone}
    ensemble_metrics = {"train": [], "dev": [record], "members": metrics}
    checkpoint.write(run_dir / checkpoint.FILE, {
        **task.checkpoint_extra(), checkpoint.CONFIG: asdict(config), checkpoint.MODEL: model.state_dict(),
        checkpoint.AVERAGED: None, checkpoint.STEP: max(steps), checkpoint.ELAPSED: max(elapsed),
    })
    save_json(run_dir / "metrics.json", ensemble_metrics)
    draw_curves(metrics, run_dir / "curves.png", task, labels=[f"model {i + 1}" for i in range(config.members)])
    task.finish(model, run_dir)
    return RunResult(run_dir, model, max(steps), ensemble_metrics)


def _check_vocabularies(saved: dict, vocabs: Vocabularies, file: Path) -> None:
    if list(vocabs.target.tokens) != saved["vocabulary"] or list(vocabs.source.tokens) != saved["source_vocabulary"]:
        raise TrainingError(f"{file} was trained with other vocabularies than this code builds")


def load_trained(path: str | Path, device: str = "auto") -> tuple[Transformer, TrainConfig, Vocabularies]:
    """A trained model from a run folder or its checkpoint file, in eval mode: an :class:`Ensemble` when the run
    trained several (``members``)."""
    if Path(path).is_dir() and not (Path(path) / checkpoint.FILE).exists() and member_dir(path, 0).is_dir():
        raise TrainingError(f"{path} is the run of several models that has not finished: each model's checkpoint is "
                            f"in {member_dir(path, 0)} and beside it; when all have finished (--resume {path} "
                            f"continues them), {Path(path) / checkpoint.FILE} holds them as one")
    saved, config, file = read_checkpoint(path, TrainConfig)
    vocabs = Vocabularies.make(config.share_embeddings, config.stress)
    _check_vocabularies(saved, vocabs, file)
    target = choose_device(device)
    model = build_model(config, vocabs)
    model.load_state_dict(final_weights(saved))
    return model.to(target).eval(), config, vocabs


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------


def config_from_args(argv: Sequence[str] | None = None) -> tuple[TrainConfig, bool, bool]:
    """(config, resume, quiet) from the command line: a preset, or a run's saved config, plus overrides."""
    config, resume, quiet = command_line(
        TrainConfig, PRESETS, "python -m transformer.g2p train",
        "Train the Transformer on English spelling to sound (CMUdict).", argv,
    )
    assert isinstance(config, TrainConfig)
    return config, resume, quiet


def main(argv: Sequence[str] | None = None) -> int:
    config, resume, quiet = config_from_args(argv)
    if config.members > 1:
        result = exit_status(lambda: train_ensemble(config, resume, progress=not quiet))
    else:
        result = launch(G2PTask(config), resume, quiet, errors=(PartsError,))
    if isinstance(result, int):
        return result
    dev = result.metrics["dev"][-1] if result.metrics["dev"] else None
    if isinstance(result.model, Ensemble):
        steps = " and ".join(f"{n:,}" for n in dev["member_steps"])
        print(f"{config.members} models of {count_parameters(result.model.members[0]):,} parameters, {steps} steps; "
              f"run folder: {result.run_dir}")
        for i, measured in enumerate(dev["alone"]):
            print(f"model {i + 1} alone, {measured['words']} words: {dev_line(measured)}")
        print(f"the {config.members} as one, ", end="")
    else:
        print(f"{count_parameters(result.model):,} parameters, {result.step} steps; run folder: {result.run_dir}")
    if dev:
        print(f"{dev['words']} words: {dev_line(dev)}")
    return 0

