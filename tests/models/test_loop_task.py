"""The seam a new model builds on (transformer/loop/task.py): a task that fills in only the four methods it
must trains, writes its run folder, and resumes exactly; the loop reads no setting of the task's own."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import torch

from transformer.loop import Batch, LoopConfig, Task, TrainingError, run_training
from transformer.loop.run import refuse_compiled_bf16_course_attention


@dataclass(frozen=True)
class CopyConfig(LoopConfig):
    """The loop's settings, then the task's own."""

    d_model: int = 16
    h: int = 2
    N: int = 1
    d_ff: int = 32
    symbols: int = 8  # symbols the model reads and writes
    examples: int = 64  # training examples


class CopyTask(Task):
    """Predict each symbol of a sequence from itself: the smallest thing that trains."""

    config: CopyConfig

    def build_model(self) -> torch.nn.Module:
        c = self.config
        return torch.nn.Sequential(torch.nn.Embedding(c.symbols, c.d_model), torch.nn.Linear(c.d_model, c.symbols))

    def epoch_batches(self, epoch: int) -> Sequence[Sequence[int]]:
        order = torch.randperm(self.config.examples, generator=torch.Generator().manual_seed(self.config.seed + epoch))
        return [order[i : i + 16].tolist() for i in range(0, self.config.examples, 16)]

    def make_batch(self, indices: Sequence[int], device: torch.device) -> Batch:
        x = torch.tensor([[i % self.config.symbols, (i + 1) % self.config.symbols] for i in indices], device=device)
        return Batch(inputs=(x,), targets=x, count=x.numel(), tokens=x.numel())  # x: (B, 2)

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(output.float().flatten(0, 1), batch.targets.flatten())


def _config(run_dir, **overrides) -> CopyConfig:
    settings = dict(run_dir=str(run_dir), device="cpu", peak_lr=1e-1, warmup=2, max_steps=12, eval_every=4,
                    checkpoint_every=4)
    return CopyConfig(**{**settings, **overrides})


def test_a_task_with_only_what_it_must_provide_trains_and_resumes(tmp_path):
    whole = run_training(CopyTask(_config(tmp_path / "whole")), progress=False)
    losses = [r["loss"] for r in whole.metrics["train"]]
    assert whole.step == 12 and losses[-1] < losses[0]
    assert {p.name for p in (tmp_path / "whole").iterdir()} >= {"config.json", "metrics.json", "curves.png",
                                                                  "checkpoint.pt"}
    run_training(CopyTask(_config(tmp_path / "halves", max_steps=8)), progress=False)
    resumed = run_training(CopyTask(_config(tmp_path / "halves")), resume=True, progress=False)
    for a, b in zip(whole.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)


def test_whether_the_model_computes_the_chapters_attention_is_the_tasks_to_say(tmp_path):
    class FusedCopyTask(CopyTask):
        def course_attention(self) -> bool:
            return False

    config = _config(tmp_path, compile=True, precision="bf16")
    refuse_compiled_bf16_course_attention(FusedCopyTask(config), torch.device("cpu"), bf16=True)
    with pytest.raises(TrainingError, match="NaN gradients"):
        refuse_compiled_bf16_course_attention(CopyTask(config), torch.device("cpu"), bf16=True)
