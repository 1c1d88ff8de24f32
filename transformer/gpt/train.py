"""Train a small GPT on Python's standard library, byte by byte.

    python -m transformer.gpt train --preset cpu               ten minutes on two CPU cores; run folder runs/gpt-cpu
    python -m transformer.gpt train --preset tiny              seconds: what the tests run
    python -m transformer.gpt train --preset gpu               one GPU: a larger model, bf16
    python -m transformer.gpt train --resume runs/gpt-cpu      continue an interrupted run exactly
    python -m transformer.gpt export runs/gpt-cpu checkpoints/gpt-cpu   the weights, config, metrics, samples
    python -m transformer.gpt sample runs/gpt-cpu --temperature 0.8    write Python

The data is :mod:`transformer.gpt.stdlib_text`: the ``.py`` files of the interpreter's standard
library, tests excluded, about 5 % of the files held out by a hash of their path. The model
(:mod:`transformer.gpt.model`) reads UTF-8 *bytes* (a vocabulary of 256, nothing unknown) and
learns to predict the next one with chapter 7's ``causal_lm_loss``; training is the course's
one loop (:mod:`transformer.loop`), with the paper's Adam and warm-up schedule.

**Batches.** An epoch cuts the training bytes into windows of ``block_size`` bytes that overlap
by one (each byte but the first is a target exactly once), from a random offset below
``block_size``, and deals them in a random order, ``batch_size`` windows a batch; offset and order
come from a generator seeded with (seed, epoch).

**Bits per character** on the held-out text: the held-out files follow the training text, as
they do for the compressors of ``benchmarks/gpt_bits.py``, so the first held-out byte is predicted
from the last training bytes. Windows of ``block_size`` bytes advance by ``eval_stride`` bytes
(half a block by default) and only their last ``eval_stride`` predictions count: every held-out
byte is predicted once, from at least ``block_size - eval_stride + 1`` bytes before it. The sum of
the bytes' cross-entropies, in bits, divided by the number of *characters* is the bits per
character (a character's probability is the product of its bytes'). Evaluations during training
score the first ``eval_chars`` held-out characters; the final one scores all of them.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from course.layout import CHECKPOINTS
from reference.bert_gpt import sample_next

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
)
from ..model import count_parameters, positive_integers
from ..parts import EXERCISES, GPT_PARTS, learner_parts
from . import stdlib_text
from .experts import EXPERT_PARTS
from .model import GPT, GPTConfig, forward_flops
from .variants import PART_NAMES, build_gpt

#: no byte is padding: every window is full
NO_PADDING = -1


@dataclass(frozen=True)
class GPTTrainConfig(LoopConfig):
    """Every setting of a GPT run: the loop's (:class:`LoopConfig`), then the model's and the data's."""

    # the model
    d_model: int = 128
    h: int = 4  # attention heads
    N: int = 4  # blocks (decoder-only)
    d_ff: int = 512  # width of the feed-forward network's hidden layer
    dropout: float = 0.0  # dropout rate (the paper's P_drop)
    block_size: int = 128  # bytes of context
    attention: str = "course"  # course (the chapters' code) or fused (F.scaled_dot_product_attention)
    positions: str = "learned"  # learned (chapter 7), sinusoidal (chapter 6) or rope (chapter 9)
    kv_heads: int = 0  # key/value heads, each shared by h / kv_heads query heads (0: h)
    position_scale: float = 1.0  # rotary positions divided by it: position interpolation (rope only)
    n_experts: int = 0  # feed-forward experts per block, d_ff wide each (chapter 10); 0: one dense network
    top_k: int = 2  # experts each token is sent to (with n_experts)
    capacity_factor: float = 0.0  # tokens an expert takes per call, times N k / E (0: no limit, none dropped)
    balance_weight: float = 0.01  # the load-balancing loss' weight alpha in the training loss (Switch's 0.01; 0: none)
    init: str = ""  # a trained run (folder or checkpoint) of the same shape to start from; "": random weights
    # the data
    batch_size: int = 32  # windows of block_size bytes per batch
    train_chars: int = 0  # use only the first n characters of the training text (0: all of it)
    # measuring
    eval_chars: int = 50_000  # held-out characters scored at each evaluation during training (0: all)
    final_eval_chars: int = 0  # held-out characters scored at the end (0: all)
    eval_stride: int = 0  # bytes a scoring window advances (0: block_size // 2)
    sample_bytes: int = 400  # bytes of each sample written to samples.txt at the end

    RESUMABLE = LoopConfig.RESUMABLE | {"eval_chars", "final_eval_chars", "eval_stride", "sample_bytes"}
    KERNEL_PATHS = {"attention": "the attention of the blocks"}

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("batch_size", "block_size"))
        for name in ("train_chars", "eval_chars", "final_eval_chars", "eval_stride", "sample_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.eval_stride > self.block_size:
            raise ValueError(f"eval_stride={self.eval_stride} is more than block_size={self.block_size}: "
                             "some bytes would never be scored")
        if self.balance_weight < 0:
            raise ValueError(f"balance_weight must be 0 or more, got {self.balance_weight}")
        self.model_config()  # the model's own rules (positions, kv_heads, position_scale, experts), at once

    def model_config(self) -> GPTConfig:
        return GPTConfig(**self.shape(), vocab_size=256, block_size=self.block_size, attention=self.attention,
                         positions=self.positions, kv_heads=self.kv_heads, position_scale=self.position_scale,
                         n_experts=self.n_experts, top_k=self.top_k, capacity_factor=self.capacity_factor)

    @property
    def stride(self) -> int:
        return self.eval_stride or max(1, self.block_size // 2)


_TINY = GPTTrainConfig(d_model=32, h=2, N=1, d_ff=64, block_size=32, batch_size=8, train_chars=200_000, peak_lr=3e-3,
                       warmup=10, max_steps=30, eval_every=15, eval_chars=2000, final_eval_chars=4000, checkpoint_every=15,
                       sample_bytes=100)
_DENSE = GPTTrainConfig(d_model=128, h=4, N=3, d_ff=256, block_size=128, batch_size=16, peak_lr=3e-3, warmup=200,
                        max_steps=1000, cooldown=0.4, eval_every=250, eval_chars=20_000, checkpoint_every=500,
                        final_eval_chars=100_000, threads=2, attention="fused", average_last=0, sample_bytes=200)
_MOE = dataclasses.replace(_DENSE, d_ff=128, n_experts=8, top_k=2)

PRESETS: dict[str, GPTTrainConfig] = {
    # seconds: what the tests run; moe-tiny with 4 experts of half the width, each token sent to 2
    "tiny": _TINY,
    "moe-tiny": dataclasses.replace(_TINY, d_ff=32, n_experts=4, top_k=2),
    # two CPU cores; a fixed number of steps, so that the result does not depend on the machine's load.
    # The rate cools down to zero over the last 40 % of the steps: 2,800 steps so reached 1.497 bits
    # per character, where 2,500 steps of the plain schedule reached 1.633; the whole command took 9 min 14 s
    # on two nearly idle cores (benchmarks/RESULTS.md).
    "cpu": GPTTrainConfig(d_model=128, h=4, N=4, d_ff=512, block_size=128, batch_size=32, peak_lr=3e-3, warmup=300,
                          max_steps=2800, cooldown=0.4, eval_every=500, eval_chars=20_000, checkpoint_every=500,
                          threads=2, attention="fused", average_last=0),
    # chapter 9: the same model with rotary or sinusoidal positions, trained alike, then read at 1, 2 and 4 times
    # the training context (python -m transformer.gpt lengths); 1,600 steps each
    "rope-cpu": GPTTrainConfig(d_model=128, h=4, N=4, d_ff=512, block_size=128, batch_size=32, peak_lr=3e-3, warmup=300,
                               max_steps=1600, cooldown=0.4, eval_every=400, eval_chars=20_000, checkpoint_every=400,
                               final_eval_chars=100_000, threads=2, attention="fused", average_last=0, positions="rope"),
    "sinusoidal-cpu": GPTTrainConfig(d_model=128, h=4, N=4, d_ff=512, block_size=128, batch_size=32, peak_lr=3e-3,
                                     warmup=300, max_steps=1600, cooldown=0.4, eval_every=400, eval_chars=20_000,
                                     checkpoint_every=400, final_eval_chars=100_000, threads=2, attention="fused",
                                     average_last=0, positions="sinusoidal"),
    # the rotary model stretched to 4 times its context: positions divided by 4 (interpolation), 200 steps on
    # windows of 512 bytes from the trained model's weights, as many bytes a batch as before
    "rope-pi-cpu": GPTTrainConfig(d_model=128, h=4, N=4, d_ff=512, block_size=512, batch_size=8, peak_lr=1e-3,
                                  warmup=20, max_steps=200, cooldown=0.4, eval_every=100, eval_chars=20_000,
                                  checkpoint_every=100, final_eval_chars=100_000, threads=2, attention="fused",
                                  average_last=0, positions="rope", position_scale=4.0, init="checkpoints/gpt-rope-cpu"),
    # chapter 10: chapter 7's GPT with 8 experts of half the width in each block, every token sent to 2 (as many
    # parameters active per token as the dense model's, give or take the router), trained as long as the dense one,
    # with Switch's balancing loss and without it. Three layers of width 128, so that each run takes under 3 minutes
    # on two cores and each checkpoint under 5 MB.
    "dense-cpu": _DENSE,
    "moe-cpu": _MOE,
    "moe-no-balance-cpu": dataclasses.replace(_MOE, balance_weight=0.0),
    # one GPU: wider, deeper, longer context, bf16; at most 6,000 steps or 90 s, whichever comes first
    # (benchmarks/gpu.py's budget); its length is a guess, not yet run on a GPU
    "gpu": GPTTrainConfig(d_model=384, h=6, N=6, d_ff=1536, block_size=256, batch_size=128, dropout=0.1,
                          peak_lr=1.5e-3, warmup=1000, max_steps=6000, time_limit=90.0, eval_every=1000,
                          eval_chars=100_000, checkpoint_every=2000, precision="bf16", attention="fused"),
}


# ---------------------------------------------------------------------------------------------
# measuring and sampling
# ---------------------------------------------------------------------------------------------


def _bytes_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


@torch.no_grad()
def bits_per_character(model: GPT, context: str, text: str, stride: int, device: torch.device | str = "cpu",
                       batch_size: int = 128, window: int = 0) -> dict[str, float]:
    """Bits per character of ``text`` read after ``context`` (see the module's docstring), in windows of the
    model's ``block_size`` bytes, or of ``window`` bytes (a model whose positions go on past its training length)."""
    if not text:
        raise ValueError("there is no held-out text to measure")
    block = window or model.config.block_size
    if not 1 <= stride <= block:
        raise ValueError(f"stride must be between 1 and block_size={block}, got {stride}")
    before = context.encode("utf-8")[-block:]
    stream = _bytes_tensor(before + text.encode("utf-8")).long()
    first, end = len(before), len(stream)
    # (start of the window, first scored position, end of the scored positions)
    windows = []
    for t0 in range(max(first, 1), end, stride):
        t1 = min(t0 + stride, end)
        windows.append((max(0, t1 - 1 - block), t0, t1))
    was_training = model.training
    model.eval()
    nats = 0.0
    if first == 0:  # nothing comes before the first byte: it costs log 256, as a uniform guess would
        nats += math.log(256)
    try:
        i = 0
        while i < len(windows):
            length = windows[i][2] - 1 - windows[i][0]
            group = [w for w in windows[i : i + batch_size] if w[2] - 1 - w[0] == length]
            starts = torch.tensor([w[0] for w in group])
            inputs = stream[starts[:, None] + torch.arange(length)].to(device)  # (B, length)
            targets = stream[starts[:, None] + torch.arange(1, length + 1)].to(device)  # (B, length)
            log_probs = torch.log_softmax(model(inputs).float(), dim=-1)  # (B, length, 256)
            nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, length)
            # Column j predicts position start + j + 1: the scored ones are t0..t1-1.
            first_scored = torch.tensor([t0 - 1 - start for start, t0, _ in group], device=nll.device)[:, None]
            end_scored = torch.tensor([t1 - 1 - start for start, _, t1 in group], device=nll.device)[:, None]
            column = torch.arange(length, device=nll.device)
            nats += nll[(column >= first_scored) & (column < end_scored)].double().sum().item()
            i += len(group)
    finally:
        model.train(was_training)
    return {"bpc": nats / math.log(2) / len(text), "characters": len(text), "bytes": end - first}


@torch.no_grad()
def generate(model: GPT, prompt: str = "", length: int = 300, temperature: float = 0.8, top_k: int = 0,
             top_p: float = 1.0, seed: int = 0, sample: Callable = sample_next) -> str:
    """``prompt`` followed by ``length`` bytes drawn one at a time by chapter 7's ``sample_next`` (or ``sample``)."""
    if length < 0:
        raise ValueError(f"length must be at least 0, got {length}")
    sample(torch.zeros(1, 2), temperature, top_k, top_p)  # its argument checks, before any work
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    ids = list((prompt or "\n").encode("utf-8"))
    was_training = model.training
    model.eval()
    try:
        for _ in range(length):
            window = torch.tensor([ids[-model.config.block_size :]], device=device)
            logits = model(window)[:, -1].float()  # (1, 256)
            ids.append(int(sample(logits, temperature, top_k, top_p, generator)[0]))
    finally:
        model.train(was_training)
    text = bytes(ids).decode("utf-8", errors="replace")
    return text if prompt else text[1:]


# ---------------------------------------------------------------------------------------------
# the task
# ---------------------------------------------------------------------------------------------


def shipped_or_given(path: str) -> Path:
    """``path`` as given, or, where it names a shipped model ("checkpoints/...") that is not there, the course's."""
    given = Path(path)
    if given.exists() or given.parts[:1] != ("checkpoints",):
        return given
    return CHECKPOINTS.joinpath(*given.parts[1:])


def parts_of(model: GPTConfig) -> dict[str, tuple[str, ...]]:
    """The parts a GPT takes from the learner with --parts mine: chapter 9's and chapter 10's only where it is made of
    them."""
    unused = (set() if model.chapter_9 else set(PART_NAMES)) | (set() if model.n_experts else set(EXPERT_PARTS))
    return {stem: names for stem, names in GPT_PARTS.items() if not set(names) <= unused}


class GPTTask(Task):
    """Next-byte prediction on the standard library, for :func:`transformer.loop.run_training`."""

    config: GPTTrainConfig
    PARTS = GPT_PARTS  # with --parts mine: your GPTBlocks, trained with your causal_lm_loss
    curves = (("bpc", "held-out"),)
    curves_axis = "bits per character"
    loss_axis = "training loss (nats per byte)"

    def __init__(self, config: GPTTrainConfig, data: stdlib_text.StdlibText | None = None) -> None:
        self.PARTS = parts_of(config.model_config())
        super().__init__(config)
        self.data = data
        self.model_config = config.model_config()

    def prepare(self) -> None:
        self.data = stdlib_text.load() if self.data is None else self.data
        text = self.data.train[: self.config.train_chars] if self.config.train_chars else self.data.train
        self.train_bytes = _bytes_tensor(text.encode("utf-8"))
        needed = self.config.block_size * self.config.batch_size
        if len(self.train_bytes) < needed + self.config.block_size:
            raise TrainingError(f"the training text has {len(self.train_bytes):,} bytes, too few for one batch of "
                                f"{self.config.batch_size} windows of {self.config.block_size}: lower --batch-size or "
                                "--block-size, or raise --train-chars")
        if not self.data.heldout:
            raise TrainingError("the held-out text is empty: there is nothing to measure the model on")

    def build_model(self) -> torch.nn.Module:
        # The course's own blocks are built by GPT itself (building them twice would draw other initial weights).
        model = build_gpt(self.model_config, dict(self.parts.functions) if self.config.parts == "mine" else None)
        if self.config.init:
            saved, _, file = read_checkpoint(shipped_or_given(self.config.init), GPTTrainConfig)
            try:
                model.load_state_dict(final_weights(saved))
            except (KeyError, RuntimeError) as exc:
                raise TrainingError(f"{file} does not hold a GPT of this shape ({exc})") from None
        return model

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        block, size = self.config.block_size, self.config.batch_size
        generator = torch.Generator().manual_seed(1_000_003 * self.config.seed + epoch)
        offset = int(torch.randint(block, (1,), generator=generator))
        starts = torch.arange(offset, len(self.train_bytes) - block + 1, block - 1 if block > 1 else 1)
        starts = starts[torch.randperm(len(starts), generator=generator)].tolist()
        return [starts[i : i + size] for i in range(0, len(starts) - size + 1, size)]  # full batches only

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        block = self.config.block_size
        ids = self.train_bytes[torch.tensor(indices)[:, None] + torch.arange(block)].long().to(device)  # (B, block)
        B = ids.shape[0]
        # a model with experts also returns its layers' load-balancing losses, for loss() to add
        inputs = (ids, True) if self.model_config.n_experts else (ids,)
        return Batch(inputs=inputs, targets=ids, count=B * (block - 1), tokens=B * block,
                     flops=3 * forward_flops(self.model_config, B, block))

    def loss(self, output: torch.Tensor | tuple[torch.Tensor, torch.Tensor], batch: Batch) -> torch.Tensor:
        logits, balance = output if self.model_config.n_experts else (output, None)
        loss = self.parts["causal_lm_loss"](logits.float(), batch.targets, NO_PADDING)
        if balance is None or not self.config.balance_weight:
            return loss  # without the balancing loss the router learns from the language loss alone
        return loss + self.config.balance_weight * balance.float()  # Switch's: alpha times the layers' sum

    def _bits(self, model: torch.nn.Module, chars: int) -> dict[str, float]:
        assert self.data is not None
        heldout = self.data.heldout[:chars] if chars else self.data.heldout
        device = next(model.parameters()).device
        return bits_per_character(model, self.data.train, heldout, self.config.stride, device)  # type: ignore[arg-type]

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return self._bits(model, self.config.eval_chars)

    def evaluate_final(self, model: torch.nn.Module) -> dict[str, float]:
        assert self.data is not None
        return {**self._bits(model, self.config.final_eval_chars), **self.data.summary()}  # type: ignore[dict-item]

    def report(self, measured: dict[str, float]) -> str:
        return f"held-out bits per character {measured['bpc']:.3f} ({measured['characters']:,} characters)"

    def checkpoint_extra(self) -> dict[str, object]:
        assert self.data is not None
        return {"data": self.data.summary()}

    def finish(self, model: torch.nn.Module, run_dir: Path) -> None:
        lines = []
        for temperature in (0.5, 0.8, 1.0):
            sample = generate(model, "def ", self.config.sample_bytes, temperature)  # type: ignore[arg-type]
            lines += [f"# ---- temperature {temperature} ----", sample, ""]
        (run_dir / "samples.txt").write_text("\n".join(lines), encoding="utf-8")

    def course_attention(self) -> bool:
        return self.config.attention == "course"


def train(config: GPTTrainConfig, resume: bool = False, data: stdlib_text.StdlibText | None = None,
          progress: bool = True) -> RunResult:
    """Train (or, with ``resume``, continue) the GPT run described by ``config`` in ``config.run_dir``."""
    return run_training(GPTTask(config, data), resume=resume, progress=progress)


def load_trained(path: str | Path, device: str = "auto") -> tuple[GPT, GPTTrainConfig]:
    """A trained GPT from a run folder or its checkpoint file, in eval mode."""
    saved, config, file = read_checkpoint(path, GPTTrainConfig)
    assert isinstance(config, GPTTrainConfig)
    parts = None
    if config.parts == "mine":  # the parts a run trained on yours was made of
        parts = dict(learner_parts(Path(config.parts_dir or EXERCISES), {}, parts_of(config.model_config())).functions)
    model = build_gpt(config.model_config(), parts)
    try:
        model.load_state_dict(final_weights(saved))
    except (KeyError, RuntimeError) as exc:
        raise TrainingError(f"{file} does not hold this GPT's weights ({exc})") from None
    return model.to(choose_device(device)).eval(), config


def config_from_args(argv: Sequence[str] | None = None) -> tuple[GPTTrainConfig, bool, bool]:
    config, resume, quiet = command_line(
        GPTTrainConfig, PRESETS, "python -m transformer.gpt train",
        "Train a small GPT on the Python standard library's source, byte by byte.", argv, run_prefix="gpt-",
    )
    assert isinstance(config, GPTTrainConfig)
    return config, resume, quiet


def export(run: str | Path, destination: str | Path) -> Path:
    """The shippable form of a finished run (see :func:`transformer.loop.export_run`), checked to load."""
    load_trained(run, device="cpu")  # refuses what this code cannot load before anything is written
    return export_run(run, destination, GPTTrainConfig, ("config.json", "metrics.json", "curves.png", "samples.txt",
                                                         "lengths.json"))


def export_main(argv: Sequence[str]) -> int:
    return export_command(argv, export, "python -m transformer.gpt export")


def main(argv: Sequence[str] | None = None) -> int:
    config, resume, quiet = config_from_args(argv)
    result = launch(GPTTask(config), resume, quiet, errors=(stdlib_text.StdlibError,))
    if isinstance(result, int):
        return result
    final = result.metrics["dev"][-1]
    print(f"{count_parameters(result.model):,} parameters, {result.step} steps; run folder: {result.run_dir}")
    print(f"held-out bits per character: {final['bpc']:.3f} over {final['characters']:,} characters "
          f"(Python {final.get('python', '?')})")
    return 0

