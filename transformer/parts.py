"""The parts a command uses, taken from the learner's own notebooks instead of the course's.

Each exercise notebook (``exercises/<chapter>/<name>.ipynb``) is exported the way ``reference/``
is generated from the instructor notebooks: its ``export`` and answer cells, in order, become a
module. Where a notebook imports an earlier chapter's part from ``reference``, the learner's own
version is used instead, so the model is the learner's all the way down. The model's parts
(chapters 2 to 6) must all be written; an answer still holding ``raise NotImplementedError()`` is
a missing part, named in the error. The other parts a command uses (chapter 8's loss, schedule,
batching, beam search and edit distance; chapter 7's for GPT and BERT) are the learner's where
written and the course's where not, and the command lists which is which. Before training, each
of the learner's parts runs its notebook's visible check; one that fails stops the run with the
check's message unless ``--allow-failing-parts true`` is given.
"""
from __future__ import annotations

import ast
import importlib
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.layout import LayoutError, learner_notebook, learner_notebooks, reference_module

from .model import Transformer, TransformerConfig

EXERCISES = learner_notebooks()
MODEL, G2P, GPT, BERT = "model", "g2p", "gpt", "bert"
VISION, AUDIO = "vision", "audio"  # chapter 10's image and speech classifiers
COMMANDS = (MODEL, G2P, GPT, BERT, VISION, AUDIO)
#: The one list of which graded function plays which role, by notebook, in chapter order: MODEL, a part
#: of the encoder-decoder that must be the learner's; G2P, GPT or BERT, a part that command takes
#: from the learner where written; None, graded but used by no command. A chapter absent from it adds
#: no part (registry() says so); a chapter in it names every function it grades (a test holds both ways).
ROLES: dict[str, dict[str, str | None]] = {
    "prerequisites": {"receptive_field": None, "rnn_forward": None, "greedy_decode": None},
    "attention": {"softmax": MODEL, "scaled_dot_product_attention": MODEL, "additive_attention": None,
                  "score_variance": None},
    "multihead": {"split_heads": MODEL, "merge_heads": MODEL, "MultiHeadAttention": MODEL},
    "encoder": {"PositionwiseFeedForward": MODEL, "LayerNorm": MODEL, "EncoderLayer": MODEL, "Encoder": MODEL},
    "decoder": {"subsequent_mask": MODEL, "DecoderLayer": MODEL, "Decoder": MODEL},
    "positional": {"sinusoidal_encoding": MODEL, "PositionalEmbedding": MODEL},
    # Within a chapter, the order a command lists its parts in.
    "bert_gpt": {"GPTBlock": GPT, "causal_lm_loss": GPT, "sample_next": GPT, "mask_tokens": BERT, "bpe_train": None,
                 "bpe_encode": None, "generate_with_cache": None},
    "capstone": {"label_smoothed_cross_entropy": G2P, "noam_rate": G2P, "length_batches": G2P, "edit_distance": G2P,
                 "beam_search": G2P},
    # chapter 9's GPT (positions="rope" or kv_heads < h) is made of them
    "hardware": {"apply_rope": GPT, "grouped_query_attention": GPT, "KVCache": GPT, "tiled_attention": None,
                 "sliding_window_mask": None},
    # chapter 10: the experts make the GPT's feed-forward layers where a model has them (n_experts > 0)
    "one_block": {"top_k_router": GPT, "load_balancing_loss": GPT, "MoEFeedForward": GPT, "patchify": VISION,
                  "PatchEmbedding": VISION, "frame_signal": AUDIO, "log_mel": AUDIO},
}


def uses(role: str) -> dict[str, tuple[str, ...]]:
    """The graded functions of one role, by notebook, in chapter order."""
    found = {stem: tuple(name for name, r in names.items() if r == role) for stem, names in ROLES.items()}
    return {stem: names for stem, names in found.items() if names}


def registry(root: Path | None = None) -> dict[str, dict[str, tuple[str, ...]]]:
    """Every chapter the course layout reports, with the parts each command takes from it (none for a
    chapter the roles do not name)."""
    from course.layout import REPO, chapters

    return {c.stem: {role: names for role in COMMANDS if (names := uses(role).get(c.stem))}
            for c in chapters(root or REPO)}


def course_part(function: str) -> Any:
    """The course's own version of a graded function, from the reference module of the notebook grading it."""
    (stem,) = [stem for stem, names in ROLES.items() if function in names]
    return getattr(importlib.import_module(reference_module(stem)), function)


#: the notebooks the model is made of, each after the ones it imports, and what it takes from each
NEEDED = uses(MODEL)
NOTEBOOKS = tuple(NEEDED)
#: the other parts each command uses, by notebook: the learner's where written, else the course's
G2P_PARTS = uses(G2P)
GPT_PARTS = uses(GPT)
BERT_PARTS = uses(BERT)
_STUB = re.compile(r"^\s*raise NotImplementedError\(\)\s*$", re.MULTILINE)
_REFERENCE_IMPORT = re.compile(r"^(\s*from\s+)reference\.(\w+)(\s+import\s)", re.MULTILINE)


class PartsError(RuntimeError):
    """The learner's notebooks cannot make a model; the message names what is missing."""


def find_notebook(name: str, folder: Path = EXERCISES) -> Path:
    try:
        return learner_notebook(name, folder)
    except LayoutError as exc:
        needs = ": the model needs chapters 2 to 6" if str(exc).startswith("no notebook") else ""
        raise PartsError(f"{exc}{needs}") from None


def _defined_names(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def export(notebook: Path) -> tuple[str, list[str]]:
    """(module source, names still to be written) of a learner's notebook."""
    import nbformat  # only --parts mine reads notebooks: training on the course's parts runs without it

    from course.notebook_format import module_cells

    parts, unfinished = [], []
    for source, answer in module_cells(nbformat.read(notebook, as_version=4)):
        if answer and _STUB.search(source):
            unfinished += _defined_names(source) or [f"an answer cell of {notebook.name}"]
        parts.append(source)
    return "\n\n".join(parts) + "\n", unfinished


def load_parts(folder: Path = EXERCISES) -> dict[str, types.ModuleType]:
    """The learner's modules of chapters 2 to 6, importing each other rather than ``reference``."""
    return learner_parts(folder, NEEDED).modules


@dataclass
class Parts:
    """The functions a command uses, each the learner's or the course's."""

    functions: dict[str, Any] = field(default_factory=dict)  # name -> the function (or class) used
    checks: dict[str, str] = field(default_factory=dict)  # name -> its check id, for the learner's parts only
    modules: dict[str, types.ModuleType] = field(default_factory=dict)  # the learner's modules, by notebook
    course: dict[str, str] = field(default_factory=dict)  # name -> why the course's is used

    def __getitem__(self, name: str) -> Any:
        return self.functions[name]

    def listing(self) -> str:
        """Which parts are the learner's and which the course's, for the start of a run."""
        lines = ["--parts mine: the parts this run uses"]
        if self.checks:
            lines.append("  yours: " + ", ".join(self.checks))
        for name, why in self.course.items():
            lines.append(f"  the course's: {name} ({why})")
        return "\n".join(lines)


def course_parts(*uses: dict[str, tuple[str, ...]]) -> Parts:
    """Every part from the course's reference modules."""
    parts = Parts()
    for use in uses:
        for notebook, names in use.items():
            module = importlib.import_module(reference_module(notebook))
            parts.functions |= {name: getattr(module, name) for name in names}
    return parts


def learner_parts(folder: Path, required: dict[str, tuple[str, ...]],
                  optional: dict[str, tuple[str, ...]] | None = None) -> Parts:
    """The learner's parts: every one of ``required`` (or a PartsError naming what is missing), and
    those of ``optional`` the learner has written, the course's for the others."""
    optional = optional or {}
    order = [n for n in NOTEBOOKS + tuple(optional) if n in required or n in optional]
    exported = {}
    for name in order:
        try:
            path = find_notebook(name, folder)
        except PartsError:
            if name in required:
                raise
            continue
        exported[name] = (path, *export(path))
    missing = [
        f"{part} ({path.parent.name}/{path.name})"
        for name, (path, _, unfinished) in exported.items() for part in unfinished if part in required.get(name, ())
    ]
    if missing:
        raise PartsError(
            "the model cannot be built from your notebooks yet: " + ", ".join(missing) + " still raise "
            "NotImplementedError. Complete them (their test cells tell you when they are right), or train with "
            "--parts reference."
        )
    package = f"_learner_parts_{abs(hash(str(Path(folder).resolve())))}"
    root = types.ModuleType(package)
    root.__path__ = []  # a package, so that "package.attention" can be imported
    sys.modules[package] = root
    parts = Parts()

    def own(match: re.Match) -> str:
        chapter = match.group(2)
        return f"{match.group(1)}{package if chapter in parts.modules else 'reference'}.{chapter}{match.group(3)}"

    for name, (path, source, unfinished) in exported.items():
        # Earlier chapters come from the learner's own modules, not from the reference ones.
        source = _REFERENCE_IMPORT.sub(own, source)
        module = types.ModuleType(f"{package}.{name}")
        module.__file__ = str(path)
        sys.modules[module.__name__] = module
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)
        except Exception as exc:
            raise PartsError(f"running the code of {path} failed: {type(exc).__name__}: {exc}") from exc
        wanted = required.get(name, ()) + optional.get(name, ())
        absent = [n for n in wanted if not hasattr(module, n)]
        if absent:
            raise PartsError(f"{path} defines no {', '.join(absent)}: keep the names the exercise gives")
        setattr(root, name, module)
        parts.modules[name] = module
        graded = _graded(name)
        for part in wanted:
            if part in unfinished:
                parts.functions[part] = getattr(importlib.import_module(reference_module(name)), part)
                parts.course[part] = f"yours in {path.parent.name}/{path.name} still raises NotImplementedError"
            else:
                parts.functions[part] = getattr(module, part)
                if part in graded:
                    parts.checks[part] = f"{name}.{part}"
    for name, names in optional.items():
        for part in names:
            if part not in parts.functions:
                parts.functions[part] = getattr(importlib.import_module(reference_module(name)), part)
                parts.course[part] = f"no {name}.ipynb under {folder}"
    return parts


def _graded(notebook: str) -> set[str]:
    from autograder.checks import chapter_checks

    try:
        return set(chapter_checks(notebook))
    except KeyError:
        return set()


def check_parts(parts: Parts, allow_failing: bool = False, say: Callable[[str], None] = print) -> None:
    """Run the visible check of each of the learner's parts; a failure stops the run (a PartsError with the
    check's message) unless ``allow_failing``, which only says so."""
    from autograder.checks import get
    from autograder.framework import CheckFailed, run_check

    failures = []
    for name, check_id in parts.checks.items():
        try:
            run_check(get(check_id), parts[name])
        except CheckFailed as failure:
            failures.append(f"{name}: {failure}")
    if not failures:
        say(f"  each of your {len(parts.checks)} parts passes its notebook's visible check")
        return
    report = "\n".join(failures)
    if not allow_failing:
        raise PartsError(
            f"{len(failures)} of your parts fail their notebook's visible check, so the run would train (or measure) "
            f"something wrong:\n{report}\nFix them (their test cells say the same), or pass --allow-failing-parts "
            "true to train with them anyway."
        )
    say(f"  warning: {len(failures)} of your parts fail their check, and --allow-failing-parts goes on:\n{report}")


class LearnerTransformer(Transformer):
    """The course's :class:`Transformer`, built from the learner's parts."""

    def __init__(self, config: TransformerConfig, parts: dict[str, types.ModuleType]) -> None:
        super().__init__(config, embedding=parts["positional"].PositionalEmbedding, encoder=parts["encoder"].Encoder,
                         decoder=parts["decoder"].Decoder, subsequent_mask=parts["decoder"].subsequent_mask)
