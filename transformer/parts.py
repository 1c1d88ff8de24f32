"""Build the model from the learner's own notebooks instead of the reference parts.

Each completed exercise notebook of chapters 2 to 6 (``exercises/<chapter>/<name>.ipynb``) is
exported the way ``reference/`` is generated from the instructor notebooks: its ``export`` and
answer cells, in order, become a module. Where a notebook imports an earlier chapter's part from
``reference``, the learner's own version is used instead, so the model is the learner's all the
way down. An answer still holding ``raise NotImplementedError()`` is a missing part, named in
the error.
"""
from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path

import nbformat
import torch

from .model import Memory, Transformer, TransformerConfig

EXERCISES = Path(__file__).resolve().parent.parent / "exercises"
#: the notebooks the model is made of, each after the ones it imports
NOTEBOOKS = ("attention", "multihead", "encoder", "decoder", "positional")
#: what the model takes from each
NEEDED = {
    "attention": ("softmax", "scaled_dot_product_attention"),
    "multihead": ("split_heads", "merge_heads", "MultiHeadAttention"),
    "encoder": ("PositionwiseFeedForward", "LayerNorm", "EncoderLayer", "Encoder"),
    "decoder": ("subsequent_mask", "DecoderLayer", "Decoder"),
    "positional": ("sinusoidal_encoding", "PositionalEmbedding"),
}
_STUB = re.compile(r"^\s*raise NotImplementedError\(\)\s*$", re.MULTILINE)
_REFERENCE_IMPORT = re.compile(r"^(\s*from\s+)reference\.(\w+)(\s+import\s)", re.MULTILINE)


class PartsError(RuntimeError):
    """The learner's notebooks cannot make a model; the message names what is missing."""


def find_notebook(name: str, folder: Path = EXERCISES) -> Path:
    found = sorted(Path(folder).glob(f"*/{name}.ipynb"))
    if not found:
        raise PartsError(f"no notebook {name}.ipynb under {folder}: the model needs chapters 2 to 6")
    if len(found) > 1:
        raise PartsError(f"several notebooks named {name}.ipynb under {folder}: {', '.join(map(str, found))}")
    return found[0]


def _defined_names(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def export(notebook: Path) -> tuple[str, list[str]]:
    """(module source, names still to be written) of a learner's notebook."""
    nb = nbformat.read(notebook, as_version=4)
    parts, unfinished = [], []
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type != "code" or not tags & {"export", "solution"}:
            continue
        if "solution" in tags and _STUB.search(cell.source):
            unfinished += _defined_names(cell.source) or [f"an answer cell of {notebook.name}"]
        parts.append(cell.source)
    return "\n\n".join(parts) + "\n", unfinished


def load_parts(folder: Path = EXERCISES) -> dict[str, types.ModuleType]:
    """The learner's modules of chapters 2 to 6, importing each other rather than ``reference``."""
    exported = {name: (find_notebook(name, folder), *export(find_notebook(name, folder))) for name in NOTEBOOKS}
    missing = [
        f"{part} ({path.parent.name}/{path.name})"
        for name, (path, _, unfinished) in exported.items() for part in unfinished if part in NEEDED[name]
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
    modules = {}
    for name in NOTEBOOKS:
        path, source, _ = exported[name]
        # Earlier chapters come from the learner's own modules, not from the reference ones.
        source = _REFERENCE_IMPORT.sub(lambda m: f"{m.group(1)}{package}.{m.group(2)}{m.group(3)}", source)
        module = types.ModuleType(f"{package}.{name}")
        module.__file__ = str(path)
        sys.modules[module.__name__] = module
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)
        except Exception as exc:
            raise PartsError(f"running the code of {path} failed: {type(exc).__name__}: {exc}") from exc
        absent = [n for n in NEEDED[name] if not hasattr(module, n)]
        if absent:
            raise PartsError(f"{path} defines no {', '.join(absent)}: keep the names the exercise gives")
        setattr(root, name, module)
        modules[name] = module
    return modules


class LearnerTransformer(Transformer):
    """The same wiring as :class:`Transformer`, with the learner's parts inside."""

    def __init__(self, config: TransformerConfig, parts: dict[str, types.ModuleType]) -> None:
        super().__init__(config)
        c = config
        embedding = parts["positional"].PositionalEmbedding
        self.src_embed = embedding(c.src_vocab_size, c.d_model, c.dropout, c.max_len)
        self.tgt_embed = embedding(c.tgt_vocab_size, c.d_model, c.dropout, c.max_len)
        self.encoder = parts["encoder"].Encoder(c.d_model, c.h, c.d_ff, c.N, c.dropout)
        self.decoder = parts["decoder"].Decoder(c.d_model, c.h, c.d_ff, c.N, c.dropout)
        self._subsequent_mask = parts["decoder"].subsequent_mask
        if c.share_embeddings:
            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.src_embed.embedding.weight
        self._init_weights()

    def decode(self, memory: Memory, ys: torch.Tensor) -> torch.Tensor:
        causal = self._subsequent_mask(ys.size(1)).to(ys.device)  # (T, T), True where attending is allowed
        hidden = self.decoder(
            self.tgt_embed(ys), memory.states, tgt_mask=causal,
            tgt_key_padding_mask=ys == self.config.pad_id, memory_key_padding_mask=memory.key_padding_mask,
        )  # (B, T, d_model)
        return self.generator(hidden)  # (B, T, V)
