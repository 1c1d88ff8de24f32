"""--parts mine: the model built from a learner's completed notebooks, and a clear word when a part is missing."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest
import torch

from course.layout import REPO, Chapter, chapters
from course.notebook_format import graded_functions
from transformer import Transformer, TransformerConfig
from transformer.g2p import evaluate as E
from transformer.g2p import train as T
from transformer.parts import (
    BERT_PARTS,
    G2P_PARTS,
    GPT_PARTS,
    NEEDED,
    NOTEBOOKS,
    ROLES,
    LearnerTransformer,
    PartsError,
    learner_parts,
    load_parts,
    registry,
)

CONFIG = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=32, h=4, N=2, d_ff=64, dropout=0.0, max_len=64)


def _chapter(stem: str) -> Chapter:
    (found,) = [c for c in chapters() if c.stem == stem]
    return found


def _answers(name: str) -> dict[str, str]:
    """The instructor's answer to each graded cell of a notebook, without nbgrader's markers."""
    source = _chapter(name).source
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
        released = _chapter(name).release
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
        load_parts(_chapter("attention").release.parent.parent)  # the release itself: nothing written yet


def test_training_with_my_parts(completed, tmp_path):
    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", parts="mine",
                                 parts_dir=str(completed), max_steps=4, eval_every=4, eval_words=5)
    result = T.train(config, progress=False)
    assert isinstance(result.model, LearnerTransformer)
    model, _, _ = T.load_trained(tmp_path / "run", "cpu")
    assert isinstance(model, LearnerTransformer)
    with pytest.raises(ValueError, match="with parts=mine use attention=course"):
        dataclasses.replace(config, attention="fused")


def test_a_presets_fused_kernels_give_way_to_my_parts(tmp_path):
    """The CPU presets take fused kernels in place of the course's LayerNorm (G2P) and attention (GPT); with
    --parts mine the parts are the learner's and run as written, so the preset's command works unchanged, and
    a fused path asked for by name is refused with the reason."""
    from transformer.gpt import train as G

    assert T.PRESETS["cpu"].norm == "fused" and G.PRESETS["cpu"].attention == "fused"  # what this test is about
    config, _, _ = T.config_from_args(["--preset", "cpu", "--parts", "mine", "--run-dir", str(tmp_path / "g2p")])
    assert (config.parts, config.attention, config.norm) == ("mine", "course", "course")
    assert config.fused_adam and config.d_model == T.PRESETS["cpu"].d_model  # the rest of the preset is kept
    config, _, _ = G.config_from_args(["--preset", "cpu", "--parts", "mine", "--run-dir", str(tmp_path / "gpt")])
    assert (config.parts, config.attention) == ("mine", "course")
    torch_model, _, _ = T.config_from_args(["--preset", "cpu", "--implementation", "torch"])
    assert (torch_model.attention, torch_model.norm) == ("course", "course")  # nn.Transformer has its own kernels
    assert T.config_from_args(["--preset", "cpu"])[0].norm == "fused"  # the course's own parts keep the preset's
    with pytest.raises(SystemExit):
        T.config_from_args(["--preset", "cpu", "--parts", "mine", "--norm", "fused"])


# ---------------------------------------------------------------------------------------------
# Chapter 8's parts, the list of whose part is whose, and the checks before training
# ---------------------------------------------------------------------------------------------


def _complete(folder: Path, name: str, changes: dict[str, str] | None = None) -> None:
    """Write notebook ``name`` into a learner's folder with the instructor's answers, or ``changes``."""
    released = _chapter(name).release
    nb = nbformat.read(released, as_version=4)
    answers = _answers(name) | (changes or {})
    for cell in nb.cells:
        if "solution" in cell.metadata.get("tags", []):
            cell.source = answers[cell.metadata["nbgrader"]["grade_id"]]
    target = folder / released.parent.name / released.name
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)


def _learner(tmp_path, completed, capstone: dict[str, str] | None = None, **encoder: str) -> Path:
    folder = tmp_path / "exercises"
    shutil.copytree(completed, folder)
    if capstone is not None:
        _complete(folder, "capstone", capstone)
    if encoder:
        _complete(folder, "encoder", encoder)
    return folder


def _tiny(folder: Path, run: Path, **changes) -> T.TrainConfig:
    return dataclasses.replace(T.PRESETS["tiny"], run_dir=str(run), device="cpu", parts="mine", parts_dir=str(folder),
                               max_steps=4, eval_every=4, eval_words=5, **changes)


ZERO_LOSS = '''def label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=0):
    return (logits * 0).sum()
'''
FLAT_RATE = '''def noam_rate(step, d_model, warmup, factor=1.0):
    return 0.000123
'''
NO_EDITS = '''def edit_distance(a, b):
    return 0
'''
UNBIASED_LAYER_NORM = _answers("encoder")["LayerNorm"].replace("(centred * centred).mean(dim=-1, keepdim=True)",
                                                                 "x.var(dim=-1, keepdim=True)")


def test_chapter_8s_parts_are_yours_and_listed(completed, tmp_path, capsys):
    folder = _learner(tmp_path, completed, capstone={})
    T.train(_tiny(folder, tmp_path / "run"), progress=False)
    out = capsys.readouterr().out
    yours = next(line for line in out.splitlines() if line.strip().startswith("yours:"))
    for part in ("softmax", "LayerNorm", "label_smoothed_cross_entropy", "noam_rate", "length_batches", "edit_distance",
                 "beam_search"):
        assert part in yours, part
    assert "the course's" not in out and "passes its notebook's visible check" in out
    task = T.G2PTask(_tiny(folder, tmp_path / "other"))
    task.use_learner_parts(lambda line: None)
    for part in ("label_smoothed_cross_entropy", "noam_rate", "length_batches", "edit_distance", "beam_search"):
        assert task.parts[part].__module__.startswith("_learner_parts_"), part


def test_an_unwritten_chapter_8_part_is_the_courses_and_says_so(completed, tmp_path, capsys):
    stub = "def beam_search(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):\n    raise NotImplementedError()\n"
    folder = _learner(tmp_path, completed, capstone={"beam_search": stub})
    task = T.G2PTask(_tiny(folder, tmp_path / "run"))
    task.use_learner_parts()
    out = capsys.readouterr().out
    assert "the course's: beam_search (yours in ch08_capstone/capstone.ipynb still raises NotImplementedError)" in out
    assert task.parts["beam_search"].__module__ == "reference.capstone"


def test_training_and_evaluation_use_your_chapter_8_parts(completed, tmp_path, capsys):
    folder = _learner(tmp_path, completed, capstone={"label_smoothed_cross_entropy": ZERO_LOSS,
                                                     "noam_rate": FLAT_RATE, "edit_distance": NO_EDITS})
    with pytest.raises(PartsError, match="3 of your parts fail"):
        T.train(_tiny(folder, tmp_path / "stopped"), progress=False)
    assert not (tmp_path / "stopped" / "checkpoint.pt").exists()
    result = T.train(_tiny(folder, tmp_path / "run", allow_failing_parts=True), progress=False)
    assert "warning: 3 of your parts fail their check" in capsys.readouterr().out
    assert all(entry["loss"] == 0 for entry in result.metrics["train"])  # your loss trained the model
    assert all(entry["lr"] == pytest.approx(0.000123) for entry in result.metrics["train"])  # your schedule
    assert result.metrics["dev"][-1]["wer"] == 0  # your edit distance measured it
    measured = E.evaluate_run(tmp_path / "run", split="dev", beam=2, limit=5, device="cpu", worst=0, progress=False)
    assert "yours:" in capsys.readouterr().out
    assert all(row["wer"] == 0 for row in measured["decodings"].values())


def test_a_part_that_fails_its_check_stops_the_run_with_the_checks_words(completed, tmp_path):
    folder = _learner(tmp_path, completed, LayerNorm=UNBIASED_LAYER_NORM)
    with pytest.raises(PartsError) as stopped:
        T.train(_tiny(folder, tmp_path / "run"), progress=False)
    assert "LayerNorm: " in str(stopped.value) and "unbiased" in str(stopped.value)
    assert "--allow-failing-parts true" in str(stopped.value)
    assert UNBIASED_LAYER_NORM != _answers("encoder")["LayerNorm"]
    assert T.main(["--preset", "tiny", "--parts", "mine", "--parts-dir", str(folder), "--run-dir", str(tmp_path / "cli"),
                   "--quiet", "--max-steps", "2", "--device", "cpu"]) == 2
    assert not (tmp_path / "cli" / "checkpoint.pt").exists()


def test_the_gpt_and_bert_commands_take_your_chapter_7_parts(tmp_path, capsys):
    from transformer.bert import train as bert
    from transformer.gpt import train as gpt

    folder = tmp_path / "exercises"
    _complete(folder, "bert_gpt")
    task = gpt.GPTTask(dataclasses.replace(gpt.PRESETS["tiny"], parts="mine", parts_dir=str(folder)))
    task.use_learner_parts()
    assert task.parts["causal_lm_loss"].__module__.startswith("_learner_parts_")
    assert task.parts["sample_next"].__module__.startswith("_learner_parts_")
    block = task.build_model().blocks[0]
    assert type(block).__module__.startswith("_learner_parts_")  # the model is made of your GPTBlocks
    pretrain = bert.PretrainTask(dataclasses.replace(bert.PRETRAIN_PRESETS["tiny"], parts="mine", parts_dir=str(folder)))
    pretrain.use_learner_parts()
    assert pretrain.parts["mask_tokens"].__module__.startswith("_learner_parts_")
    out = capsys.readouterr().out
    assert "yours: GPTBlock, causal_lm_loss, sample_next" in out and "yours: mask_tokens" in out
    assert gpt.GPTTask(gpt.PRESETS["tiny"]).parts["causal_lm_loss"].__module__ == "reference.bert_gpt"
    assert "apply_rope" not in out  # chapter 7's GPT is made of no chapter 9 part


def test_chapter_9s_gpt_is_made_of_your_chapter_9_parts(tmp_path, capsys):
    from transformer.gpt import train as gpt
    from transformer.gpt.variants import VariantGPT

    folder = tmp_path / "exercises"
    _complete(folder, "hardware")
    config = dataclasses.replace(gpt.PRESETS["tiny"], parts="mine", parts_dir=str(folder), positions="rope", kv_heads=1)
    task = gpt.GPTTask(config)
    task.use_learner_parts()
    assert "yours: apply_rope, grouped_query_attention, KVCache" in capsys.readouterr().out
    model = task.build_model()
    assert isinstance(model, VariantGPT)
    assert all(model.parts[n].__module__.startswith("_learner_parts_") for n in ("apply_rope", "KVCache"))
    assert all(type(c).__module__.startswith("_learner_parts_") for c in model.new_caches(1, 4))


def test_chapter_10s_experts_are_your_chapter_10_parts(tmp_path, capsys):
    from transformer.gpt import train as gpt
    from transformer.gpt.experts import MoEGPT
    from transformer.gpt.variants import build_gpt

    folder = tmp_path / "exercises"
    _complete(folder, "one_block")
    config = dataclasses.replace(gpt.PRESETS["moe-tiny"], parts="mine", parts_dir=str(folder))
    task = gpt.GPTTask(config)
    task.use_learner_parts()
    assert "yours: top_k_router, load_balancing_loss, MoEFeedForward" in capsys.readouterr().out
    model = task.build_model()
    assert isinstance(model, MoEGPT)
    assert type(model.expert_layers()[0].moe).__module__.startswith("_learner_parts_")
    assert "MoEFeedForward" not in str(gpt.parts_of(gpt.PRESETS["tiny"].model_config()))  # none in chapter 7's GPT
    # Your MoEFeedForward, written before your top_k_router, routes with the course's, as the listing says.
    stub = "def top_k_router(logits, k):\n    raise NotImplementedError()\n"
    _complete(folder, "one_block", {"top_k_router": stub})
    parts = learner_parts(folder, {}, gpt.parts_of(config.model_config()))
    assert parts.course["top_k_router"].endswith("still raises NotImplementedError")
    model = build_gpt(config.model_config(), dict(parts.functions))
    assert type(model.expert_layers()[0].moe).__module__.startswith("_learner_parts_")
    logits, balance = model(torch.randint(0, 256, (2, 8)), True)
    assert logits.shape == (2, 8, 256) and balance.item() >= 1.0


# ---------------------------------------------------------------------------------------------
# The roles of the graded functions: one list, checked against the course layout
# ---------------------------------------------------------------------------------------------


def _graded_by_chapter(root: Path = REPO) -> dict[str, list[str]]:
    return {c.stem: graded_functions(c.source) for c in chapters(root)}


def role_problems(roles: dict[str, dict[str, str | None]], graded: dict[str, list[str]]) -> list[str]:
    """What is wrong with a table of roles against the functions each chapter grades."""
    found = [f"{stem}.{name} is graded by no chapter" for stem, names in roles.items()
             for name in names if name not in graded.get(stem, ())]
    found += [f"{stem}.{name} is graded but has no role" for stem in roles for name in graded.get(stem, ())
              if name not in roles[stem]]
    order = [stem for stem in graded if stem in roles]
    if order != list(roles):
        found.append(f"the roles are not in chapter order: {list(roles)} against {order}")
    return found


def test_the_roles_name_every_graded_function_of_their_chapters_and_nothing_else():
    graded = _graded_by_chapter()
    assert not role_problems(ROLES, graded)
    assert set(registry()) == set(graded) and registry()["attention"] == {"model": NEEDED["attention"]}
    # The check can fail: a function a chapter stops grading, one it starts grading, and a shuffled order.
    assert role_problems(ROLES | {"encoder": {**ROLES["encoder"], "Norm": "model"}}, graded) == [
        "encoder.Norm is graded by no chapter"]
    assert role_problems(ROLES, graded | {"decoder": [*graded["decoder"], "beam"]}) == [
        "decoder.beam is graded but has no role"]
    assert "chapter order" in role_problems(dict(reversed(ROLES.items())), graded)[0]


def test_the_registries_are_the_roles():
    assert NOTEBOOKS == ("attention", "multihead", "encoder", "decoder", "positional")
    assert G2P_PARTS == {"capstone": ("label_smoothed_cross_entropy", "noam_rate", "length_batches", "edit_distance",
                                      "beam_search")}
    assert GPT_PARTS == {"bert_gpt": ("GPTBlock", "causal_lm_loss", "sample_next"),
                         "hardware": ("apply_rope", "grouped_query_attention", "KVCache"),
                         "one_block": ("top_k_router", "load_balancing_loss", "MoEFeedForward")}
    assert BERT_PARTS == {"bert_gpt": ("mask_tokens",)}
    from reference.multihead import MultiHeadAttention
    from transformer import fused
    assert fused.MultiHeadAttention is MultiHeadAttention
