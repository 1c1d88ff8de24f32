"""--parts mine: the model built from a learner's completed notebooks, and a clear word when a part is missing."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest
import torch

from transformer import Transformer, TransformerConfig
from transformer import train as T
from transformer.parts import NOTEBOOKS, LearnerTransformer, PartsError, load_parts

REPO = Path(__file__).resolve().parent.parent
CONFIG = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=32, h=4, N=2, d_ff=64, dropout=0.0, max_len=64)


def _answers(name: str) -> dict[str, str]:
    """The instructor's answer to each graded cell of a notebook, without nbgrader's markers."""
    source = next((REPO / "solutions").glob(f"*/{name}.py"))
    answers = {}
    for cell in jupytext.read(source).cells:
        if "solution" in cell.metadata.get("tags", []):
            lines = [line for line in cell.source.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
            answers[cell.metadata["grade_id"]] = "\n".join(lines)
    return answers


@pytest.fixture(scope="module")
def completed(tmp_path_factory) -> Path:
    """A learner's exercises/ with chapters 2 to 6 completed (with the instructor's answers)."""
    folder = tmp_path_factory.mktemp("learner") / "exercises"
    for name in NOTEBOOKS:
        released = next((REPO / "exercises").glob(f"*/{name}.ipynb"))
        nb = nbformat.read(released, as_version=4)
        answers = _answers(name)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if "solution" in cell.metadata.get("tags", []):
                cell.source = answers[grade_id]
        target = folder / released.parent.name / released.name
        target.parent.mkdir(parents=True)
        nbformat.write(nb, target)
    return folder


def test_the_learners_model_computes_what_the_reference_one_does(completed):
    parts = load_parts(completed)
    assert "reference" not in parts["multihead"].scaled_dot_product_attention.__module__  # the learner's own
    torch.manual_seed(0)
    reference = Transformer(CONFIG).eval()
    mine = LearnerTransformer(CONFIG, parts).eval()
    assert type(mine.encoder).__module__.startswith("_learner_parts_")
    assert mine.state_dict().keys() == reference.state_dict().keys()
    mine.load_state_dict(reference.state_dict())
    src = torch.tensor([[5, 7, 9, 2, 0], [4, 8, 2, 0, 0]])
    tgt = torch.tensor([[1, 12, 13], [1, 20, 0]])
    torch.testing.assert_close(mine(src, tgt), reference(src, tgt))


def test_a_missing_part_is_named(completed, tmp_path):
    unfinished = tmp_path / "exercises"
    shutil.copytree(completed, unfinished)
    path = next(unfinished.glob("*/encoder.ipynb"))
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "LayerNorm":
            cell.source = (
                cell.source.split("    def forward")[0] + "    def forward(self, x):\n        raise NotImplementedError()\n"
            )
    nbformat.write(nb, path)
    with pytest.raises(PartsError, match=r"LayerNorm \(ch04_encoder/encoder.ipynb\)"):
        load_parts(unfinished)
    with pytest.raises(PartsError, match="scaled_dot_product_attention .*NotImplementedError"):
        load_parts(REPO / "exercises")  # the release itself: nothing written yet


def test_training_with_my_parts(completed, tmp_path):
    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", parts="mine",
                                 parts_dir=str(completed), max_steps=4, eval_every=4, eval_words=5)
    result = T.train(config, progress=False)
    assert isinstance(result.model, LearnerTransformer)
    model, _, _ = T.load_trained(tmp_path / "run", "cpu")
    assert isinstance(model, LearnerTransformer)
    with pytest.raises(ValueError, match="with parts=mine use attention=course"):
        dataclasses.replace(config, attention="fused")
