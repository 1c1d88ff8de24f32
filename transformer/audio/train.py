"""Train the speech classifier on the spoken digits; measure it on voices it never heard.

    python -m transformer.audio train --preset cpu            two CPU cores, under three minutes; runs/audio-cpu
    python -m transformer.audio train --preset tiny           seconds: what the tests run
    python -m transformer.audio train --parts mine            with your frame_signal and log_mel (chapter 10) and
                                                              your encoder (chapters 2 to 4, 6)
    python -m transformer.audio evaluate runs/audio-cpu       accuracy and confusion matrix on the test voices
    python -m transformer.audio export runs/audio-cpu checkpoints/audio-digits-cpu

The data is :mod:`transformer.audio.data`: 990 clips of the ten digit words, split by voice. Training
sees the train voices; the dev voices are measured while it runs (the curves); the test voices only at
the end, in ``results.json``, with the confusion matrix. The model is :mod:`transformer.audio.model`.
Training is the course's one loop (:mod:`transformer.loop`), with the paper's Adam and warm-up schedule.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..checkpoint import final_weights
from ..fused import use_attention, use_norm
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
from ..model import count_parameters, positive_integers
from ..parts import AUDIO, EXERCISES, NEEDED, learner_parts, uses
from . import data as spoken
from .measure import measure
from .model import AudioConfig, SpeechClassifier, forward_flops, pad_waves

#: with --parts mine, the model's parts that must be yours: the encoder (chapters 2 to 4) and its positions
ENCODER_PARTS = {stem: NEEDED[stem] for stem in ("attention", "multihead", "encoder")} | {
    "positional": ("sinusoidal_encoding",)}
#: chapter 10's, yours where written
AUDIO_PARTS = uses(AUDIO)


@dataclass(frozen=True)
class AudioTrainConfig(LoopConfig):
    """Every setting of a run: the loop's (:class:`LoopConfig`), then the model's and the data's."""

    # the model
    d_model: int = 64
    h: int = 4  # attention heads
    N: int = 2  # encoder layers
    d_ff: int = 128  # width of the feed-forward network's hidden layer
    dropout: float = 0.1  # dropout rate (the paper's P_drop)
    n_mels: int = 40  # mel filters per frame
    frame_length: int = 200  # samples per frame (25 ms at 8 kHz)
    hop: int = 80  # samples between frames (10 ms)
    max_frames: int = 160  # the longest clip the model takes, in frames (a slowed-down one too)
    attention: str = "course"  # course (the chapters' code) or fused (F.scaled_dot_product_attention)
    norm: str = "course"  # course (chapter 4's LayerNorm) or fused (F.layer_norm): the same function, faster
    # the data
    batch_size: int = 32  # clips per batch
    # a voice is, to the ear, mostly a pitch and a size of vocal tract; playing a clip faster or slower moves
    # both, so each training clip is heard at a speed of its own
    speed_perturb: float = 0.15  # each training clip resampled by a factor drawn from [1 - x, 1 + x] (0: never)
    noise_db: float = 10.0  # each training clip gets more white noise, its SNR drawn from [x, x + 30] dB (0: none)
    peak_lr: float = 1e-3
    warmup: int = 100

    KERNEL_PATHS = {"attention": "the encoder's attention", "norm": "the encoder's LayerNorm"}

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("batch_size",))
        if not 0.0 <= self.speed_perturb < 0.5:
            raise ValueError(f"speed_perturb must be in [0, 0.5), got {self.speed_perturb}")
        if self.noise_db < 0:
            raise ValueError(f"noise_db must be 0 (no added noise) or more, got {self.noise_db}")
        self.model_config()  # the model's own rules, at once

    def model_config(self) -> AudioConfig:
        return AudioConfig(**self.shape(), frame_length=self.frame_length, hop=self.hop, n_mels=self.n_mels,
                           max_frames=self.max_frames)


PRESETS: dict[str, AudioTrainConfig] = {
    # seconds: what the tests run
    "tiny": AudioTrainConfig(d_model=16, h=2, N=1, d_ff=32, n_mels=16, batch_size=16, warmup=5, max_steps=8,
                             eval_every=4, checkpoint_every=4),
    "cpu": AudioTrainConfig(max_steps=1500, eval_every=250, checkpoint_every=250, threads=1),
}


def build_model(config: AudioTrainConfig, parts: dict | None = None) -> SpeechClassifier:
    """The classifier a config describes, its course layers on the kernel paths the config names (a learner's
    own layers, with --parts mine, run as written)."""
    model = SpeechClassifier(config.model_config(), parts)
    return use_norm(use_attention(model, config.attention), config.norm)  # type: ignore[return-value]


def clip_tensors(clips: spoken.SpokenDigits) -> list[torch.Tensor]:
    return [torch.from_numpy(w) for w in clips.waves]


def augment(wave: torch.Tensor, config: AudioTrainConfig) -> torch.Tensor:
    """A training clip heard anew: at a speed drawn from [1 - speed_perturb, 1 + speed_perturb] (linear
    interpolation between samples) and with white noise added. The draws come from torch's global generator,
    which the checkpoint saves, so a resumed run hears what an uninterrupted one would."""
    if config.speed_perturb:
        factor = 1.0 + config.speed_perturb * (2 * float(torch.rand(())) - 1)
        position = torch.arange(int((len(wave) - 1) / factor)) * factor  # (S',) in input samples
        left = position.long()  # (S',)
        right = (left + 1).clamp(max=len(wave) - 1)  # (S',)
        share = (position - left).to(wave.dtype)  # (S',) of the way from left to right
        wave = wave[left] * (1 - share) + wave[right] * share  # (S',)
    if config.noise_db:
        snr = config.noise_db + 30 * float(torch.rand(()))
        wave = wave + torch.randn(len(wave)) * torch.sqrt(wave.pow(2).mean() / 10 ** (snr / 10))  # (S',)
    return wave


class AudioTask(Task):
    """Which digit a clip says, for :func:`transformer.loop.run_training`."""

    config: AudioTrainConfig
    MODEL_PARTS = ENCODER_PARTS
    PARTS = AUDIO_PARTS
    curves = (("accuracy", "dev voices"),)
    curves_axis = "accuracy (share)"
    loss_axis = "training loss (cross-entropy)"

    def __init__(self, config: AudioTrainConfig, data: spoken.SpokenDigits | None = None) -> None:
        super().__init__(config)
        self.data = data
        self.model_config = config.model_config()

    def prepare(self) -> None:
        try:
            self.data = spoken.load() if self.data is None else self.data
        except spoken.DataError as exc:
            raise TrainingError(str(exc)) from None
        self.splits = {name: self.data.split(name) for name in spoken.SPLITS}
        self.waves = clip_tensors(self.splits["train"])
        if len(self.waves) < self.config.batch_size:
            raise TrainingError(f"{len(self.waves)} training clips do not fill one batch of {self.config.batch_size}")
        longest = max(len(w) for w in self.data.waves)
        frames = int(self.model_config.frames(torch.tensor(longest)))
        if frames > self.config.max_frames:
            raise TrainingError(f"the longest clip has {frames} frames; raise --max-frames to at least that")

    def build_model(self) -> SpeechClassifier:
        return build_model(self.config, dict(self.parts.functions))

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(1_000_003 * self.config.seed + epoch)
        order = torch.randperm(len(self.waves), generator=generator).tolist()
        size = self.config.batch_size
        return [order[i : i + size] for i in range(0, len(order) - size + 1, size)]  # full batches only

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        waves, lengths = pad_waves([augment(self.waves[i], self.config) for i in indices])  # (B, S), (B,)
        labels = torch.tensor([self.splits["train"].clips[i].digit for i in indices])  # (B,)
        frames = self.model_config.frames(lengths)  # (B,)
        return Batch(inputs=(waves.to(device), lengths.to(device)), targets=labels.to(device), count=len(indices),
                     tokens=int(frames.sum()), flops=3 * forward_flops(self.model_config, len(indices), int(frames.max())))

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(output.float(), batch.targets)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return {"accuracy": measure(model, self.splits["dev"])["accuracy"]}  # type: ignore[arg-type]

    def report(self, measured: dict[str, float]) -> str:
        return f"dev voices: {100 * measured['accuracy']:.1f} % right"

    def course_attention(self) -> bool:
        return self.config.attention == "course"

    def checkpoint_extra(self) -> dict[str, object]:
        assert self.data is not None
        return {"data": self.data.summary()}

    def finish(self, model: torch.nn.Module, run_dir: Path) -> None:
        save_json(run_dir / "results.json", measure(model, self.splits["test"]))  # type: ignore[arg-type]


def train(config: AudioTrainConfig, resume: bool = False, data: spoken.SpokenDigits | None = None,
          progress: bool = True) -> RunResult:
    """Train (or, with ``resume``, continue) the run described by ``config`` in ``config.run_dir``."""
    return run_training(AudioTask(config, data), resume=resume, progress=progress)


def load_trained(path: str | Path) -> tuple[SpeechClassifier, AudioTrainConfig]:
    """A trained classifier from a run folder or its checkpoint file, on the CPU, in eval mode."""
    saved, config, file = read_checkpoint(path, AudioTrainConfig)
    assert isinstance(config, AudioTrainConfig)
    parts = None
    if config.parts == "mine":  # a run trained on yours is made of them
        parts = dict(learner_parts(Path(config.parts_dir or EXERCISES), ENCODER_PARTS, AUDIO_PARTS).functions)
    model = build_model(config, parts)
    try:
        model.load_state_dict(final_weights(saved))
    except RuntimeError as exc:
        raise TrainingError(f"{file} does not hold this classifier's weights ({exc})") from None
    return model.eval(), config


def export(run: str | Path, destination: str | Path) -> Path:
    """The shippable form of a finished run (see :func:`transformer.loop.export_run`), checked to load."""
    load_trained(run)  # refuses what this code cannot load before anything is written
    return export_run(run, destination, AudioTrainConfig, ("config.json", "metrics.json", "curves.png", "results.json"))


def export_main(argv: Sequence[str]) -> int:
    return export_command(argv, export, "python -m transformer.audio export")


def main(argv: Sequence[str] | None = None) -> int:
    config, resume, quiet = command_line(AudioTrainConfig, PRESETS, "python -m transformer.audio train",
                                         "Train a speech classifier on spoken digits; test it on unheard voices.", argv,
                                         run_prefix="audio-")
    assert isinstance(config, AudioTrainConfig)
    result = launch(AudioTask(config), resume, quiet, errors=(spoken.DataError,))
    if isinstance(result, int):
        return result
    dev = result.metrics["dev"][-1]
    print(f"{count_parameters(result.model):,} parameters, {result.step} steps; run folder: {result.run_dir}")
    print(f"dev voices: {100 * dev['accuracy']:.1f} % right; the test voices: {result.run_dir / 'results.json'}")
    return 0
