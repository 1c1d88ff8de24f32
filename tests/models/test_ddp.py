"""Several processes (DistributedDataParallel over gloo, on the CPU) train as one process does on
the same global batches."""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import torch.multiprocessing as mp

from course.files import leftovers
from tests.conftest import free_port
from transformer import loop
from transformer.g2p import train as T


def _config(run_dir) -> T.TrainConfig:
    # No dropout: each process would draw its own masks.
    return dataclasses.replace(T.PRESETS["tiny"], run_dir=str(run_dir), device="cpu", dropout=0.0, max_steps=8,
                               eval_every=8, eval_words=5, checkpoint_every=8)


def _worker(rank: int, world: int, port: int, run_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    try:
        T.train(_config(run_dir), progress=False)
    finally:
        torch.distributed.destroy_process_group()



@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="this PyTorch has no gloo backend")
def test_two_processes_end_where_one_does(tmp_path, monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    single = T.train(_config(tmp_path / "one"), progress=False)
    mp.spawn(_worker, args=(2, free_port(), str(tmp_path / "two")), nprocs=2, join=True)
    shared = torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=False)
    assert shared["step"] == single.step == 8
    for name, value in single.model.state_dict().items():
        if name.endswith("w_k.bias"):
            # Adding the same vector to every key shifts each query's scores by a constant, which the
            # softmax ignores: this gradient is zero but for rounding, and Adam turns rounding into
            # full-size steps. Two summation orders make two different walks.
            continue
        # The gradients are summed in another order: equal up to rounding.
        torch.testing.assert_close(shared["model"][name], value, atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    assert not leftovers(tmp_path / "two")


def test_a_batch_too_small_to_share():
    processes = loop.Processes()
    processes.world, processes.rank = 4, 1
    assert processes.share(list(range(10))) == [1, 5, 9]
    with pytest.raises(loop.TrainingError, match="cannot be shared by 4 processes"):
        processes.share([3, 4])
