'''`python -m course.tools new-chapter ch07_bert_gpt`: everything a new chapter needs, in place.

It writes, for the chapter ``chNN_topic`` and its notebook ``topic``:

    solutions/chNN_topic/topic.py    the instructor notebook: a title, an exported cell, one example
                                     exercise (`masked_mean`) with its solution and its graded test cell
    autograder/checks/topic.py       the example's check, using every seam of the base class
                                     (autograder/framework.py) and stating its rules in STATED
    tests/mistakes/topic.py          the example's catalogue of mistakes
    book/chNN_topic.md               the page, with two figures made by code
    zh/book/chNN_topic.md            its Chinese twin, the same page until its prose is written in Chinese
    _toc.yml                         the page's entry, in chapter order

then generates the chapter's release and reference module and updates the chapter tables.

The example is complete and consistent: its solution passes its check, the released stub fails,
and each of its catalogued mistakes is caught and named, so the tests of the course run on the
new chapter at once. Every file also carries the word SCAFFOLD where the author has work to do,
and the test suite fails while one is left, so that an example never ships as a chapter.
'''
from __future__ import annotations

import keyword
import re
from pathlib import Path

from course.layout import BOOK, CHAPTER_NAME, REPO, TOC, Chapter, LayoutError, chapters

MARKER = "SCAFFOLD"


class ScaffoldError(LayoutError):
    """The chapter cannot be made: the name is malformed or something of it exists already."""


def _topic_title(topic: str) -> str:
    words = topic.replace("_", " ")
    return words[:1].upper() + words[1:]


def _in_sentence(title: str) -> str:
    """A title inside a sentence: "Positional encoding" becomes "positional encoding", "BERT" stays."""
    if len(title) > 1 and title[0].isupper() and title[1].islower():
        return title[0].lower() + title[1:]
    return title


NOTEBOOK = '''# %% [markdown]
# # Chapter __NUMBER__ exercises: __SENTENCE_TITLE__
#
# SCAFFOLD: `python -m course.tools new-chapter` wrote this notebook around one example exercise,
# `masked_mean`, together with its check (autograder/checks/__STEM__.py), its catalogue of
# mistakes (tests/mistakes/__STEM__.py) and its page (book/__ASSIGNMENT__.md). Replace the example
# with the chapter's own exercises in the same pattern: the instructions of a function, its
# solution cell, its test cell. The test suite fails while a SCAFFOLD line is left.
#
# Each answer has a cell for your code (replace `raise NotImplementedError()`) and a test cell
# right after it. Run the test cell: it prints one line when your code is right, and otherwise
# tells you what is wrong and where to look. Graded work is also run against more cases than the
# ones you see here, so aim for code that is right, not code that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/__ASSIGNMENT__/__STEM__.ipynb`.

# %% tags=["export"]
import torch

# %% [markdown]
# ## 1. The mean over the real tokens
#
# A batch of sequences of different lengths is padded to one length `T`, and a boolean mask
# marks the real tokens (`True`) and the padding (`False`). An average over the positions must
# count the real tokens only.
#
# Write `masked_mean(x, mask)`:
#
# * `x` is a float tensor of shape `(B, T, D)`, `mask` a bool tensor of shape `(B, T)` with at
#   least one `True` in every row;
# * return the tensor of shape `(B, D)`, in the dtype of `x`, whose row `b` is the mean of the
#   vectors `x[b, t]` over the positions `t` where `mask[b, t]` is `True`.

# %% tags=["solution"] grade_id="masked_mean"
def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of x (B, T, D) over the positions that mask (B, T) keeps, shape (B, D)."""
    ### BEGIN SOLUTION
    keep = mask.unsqueeze(-1).to(x.dtype)  # (B, T) -> (B, T, 1), broadcast over the features
    kept_total = (x * keep).sum(dim=1)  # (B, D)
    kept_count = keep.sum(dim=1)  # (B, 1): each row has its own number of real tokens
    return kept_total / kept_count
    ### END SOLUTION


# %% tags=["test"] grade_id="test_masked_mean" points=2
from autograder import check

check("__STEM__.masked_mean", masked_mean)
### BEGIN HIDDEN TESTS
check("__STEM__.masked_mean", masked_mean, hidden=True)
### END HIDDEN TESTS
'''

CHECKS = '''"""Chapter __NUMBER__ checks: __SENTENCE_TITLE__.

SCAFFOLD: the check of the example exercise `masked_mean`. Replace it with the checks of the
chapter's own exercises, one Check subclass per graded function, listed in CHECKS, and their
rules in STATED. The example uses every seam of the base class (autograder/framework.py says what
each one is for): ``cases`` and ``rules`` (the judge, as small named rules), ``stages`` (to point
at the learner's first wrong line), ``hints`` (for an exception), ``result_dtype``,
``follows_device`` and ``trained_through`` (the rules the base class holds every function to), and
``STATED`` (the rules the instructions state).

Oracle: the mean of the kept vectors, taken row by row in float64.
"""
from __future__ import annotations

from typing import Any

import torch

from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    Stage,
    Stated,
    expect_close,
    expect_shape,
    expect_tensor,
    rule,
)


def padding_mask(lengths: list[int], T: int) -> torch.Tensor:
    """(B, T) bool: row b keeps its first lengths[b] positions, as in a padded batch."""
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (1, T) < (B, 1) -> (B, T)


def scattered_mask(B: int, T: int, generator: torch.Generator) -> torch.Tensor:
    """(B, T) bool with kept positions anywhere in a row, and at least one per row."""
    mask = torch.rand(B, T, generator=generator) < 0.5
    mask[torch.arange(B), torch.randint(T, (B,), generator=generator)] = True
    return mask


def oracle(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, D) float64: each row's kept vectors averaged, one row at a time."""
    return torch.stack([x[b][mask[b]].double().mean(dim=0) for b in range(x.shape[0])])


def _sum_kept(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return (x.double() * keep[..., None]).sum(dim=1)  # (B, T, D) * (B, T, 1) -> (B, D)


class MaskedMeanCheck(Check):
    function = "masked_mean"
    oracle = "the mean of the kept vectors, row by row, in float64"
    # The rules the base class holds every function to, each judged outside the learner's process:
    result_dtype = "arguments"  # the result keeps the dtype of x (the one floating argument)
    follows_device = True  # on the GPU, the result stays there (probed on one visible case)
    trained_through = True  # a model learns through a mean: gradients must reach x (probed)
    # What to add to the report of an exception, the first that applies.
    hints = (Hint("RuntimeError", "mask is (B, T) and x (B, T, D): give the mask a last axis, mask.unsqueeze(-1), "
                  "so that it broadcasts over the features.", containing="must match the size"),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)  # a seed of this check's own, derived from its id

        def case(D: int, mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> Case:
            B, T = mask.shape
            x = torch.randn(B, T, D, generator=g, dtype=dtype)
            kept = ", ".join(str(int(n)) for n in mask.sum(dim=1))
            return Case(f"x {tuple(x.shape)} {str(dtype).replace('torch.', '')}, real tokens per row {kept}", (x, mask))

        # T differs from D in every case, so that a mean over the wrong axis shows in the shape.
        out = [
            case(3, padding_mask([5, 2], 5)),
            case(4, padding_mask([3, 6, 1], 6)),
            case(8, padding_mask([4, 4, 2, 7], 7)),
            case(5, scattered_mask(3, 4, g), torch.float64),
        ]
        if hidden:
            out += [
                case(2, padding_mask([1], 3)),
                case(16, scattered_mask(5, 9, g)),
                case(1, padding_mask([2, 5], 5)),
                case(3, scattered_mask(2, 6, g), torch.float64),
                case(6, padding_mask([1, 1, 1], 1)),
            ]
        return out

    # The judge is a list of small named rules, run in order on each case; the first that fails gives the
    # message, and each mistake of the catalogue states the rule that must catch it.
    @rule("a (B, D) tensor")
    def _shape(self, case: Case, result: Any) -> None:
        x, mask = case.args
        B, T, D = x.shape
        name = "`masked_mean`'s result"
        y = expect_tensor(result, name, case)
        if tuple(y.shape) == (B, 1, D):
            raise CheckFailed(
                f"{name} has shape {tuple(y.shape)} on the case {case.label}: it kept the position axis. "
                "Average it away, sum(dim=1) without keepdim=True, to get one vector per sequence, (B, D)."
            )
        if tuple(y.shape) == (B, T):
            raise CheckFailed(
                f"{name} has shape {tuple(y.shape)} on the case {case.label}: it averaged over the features (the last "
                "axis). Average over the positions, dim=1, to get one vector per sequence, (B, D)."
            )
        expect_shape(y, (B, D), name, case, "One vector per sequence: (B, D).")

    @rule("the mean of the kept vectors")
    def _values(self, case: Case, y: torch.Tensor) -> None:
        x, mask = case.args
        T = x.shape[1]
        keep = mask.double()  # (B, T)
        expect_close(y, oracle(x, mask), "`masked_mean`'s result", case, diagnoses=[
            (lambda: x.double().mean(dim=1),
             "the mask was ignored: the padding was averaged with the real tokens. Average over the positions "
             "where mask is True only."),
            (lambda: _sum_kept(x, keep) / T,
             "the sum of the kept vectors was divided by T, the padded length; divide each row by its own number "
             "of real tokens, mask.sum(dim=1)."),
            (lambda: _sum_kept(x, 1 - keep) / (1 - keep).sum(dim=1, keepdim=True),
             "the mask was read the wrong way round: True marks a real token, to keep; False marks the padding."),
            (lambda: _sum_kept(x, keep),
             "the kept vectors were summed but not divided by their number: divide by mask.sum(dim=1)."),
            (lambda: _sum_kept(x, keep) / keep.sum(),
             "the sum was divided by the number of real tokens in the whole batch; each row has its own count, "
             "mask.sum(dim=1, keepdim=True)."),
        ])

    rules = (_shape, _values)

    def stages(self, case: Case) -> list[Stage]:
        """The solution's steps in float64: a wrong value no diagnosis above explains is located at the
        learner's first line whose value leaves them."""
        x, mask = case.args
        keep = mask.unsqueeze(-1).double()  # (B, T, 1)
        total = (x.double() * keep).sum(dim=1)  # (B, D)
        count = keep.sum(dim=1)  # (B, 1)
        return [
            Stage.of("the mask as numbers with a last axis, (B, T, 1)", keep),
            Stage.of("the sum of the kept vectors, (B, D)", total),
            Stage.of("the number of real tokens of each row, (B, 1)", count),
            Stage.of("the mean, the sum divided by the count", total / count),
        ]


CHECKS = [MaskedMeanCheck]

# The rules the instructions state, each with the visible case (a fragment of its label or its tag)
# that holds a learner to it and words of the message a learner who breaks it gets. The rules every
# function keeps (dtype, device, gradients, arguments left unchanged) are the base class's.
STATED = {
    "masked_mean": (
        Stated("the padding is left out of the mean", "real tokens per row 5, 2", "the mask was ignored"),
        Stated("each row is divided by its own number of real tokens", "real tokens per row 5, 2",
               "divided by T, the padded length"),
        Stated("True marks a real token", "real tokens per row 5, 2", "the mask was read the wrong way round"),
        Stated("the result is (B, D): the position axis is averaged away", "real tokens per row 5, 2",
               "it kept the position axis"),
    ),
}
'''

MISTAKES = '''"""Wrong answers to chapter __NUMBER__, as learners write them, and the words that must name each one.

SCAFFOLD: the mistakes of the example exercise `masked_mean`. Replace them with the mistakes the
chapter's own exercises invite, at least five per graded function, each written as a learner would,
with the rule of its check that must catch it.
"""
from __future__ import annotations

from . import Mistake, Spoiled

MEAN = "__STEM__.masked_mean"

# The wrong submission of the tests that grade a whole class: the example's own mistake.
SPOILED = Spoiled("masked_mean", "return kept_total / kept_count", "return kept_total / x.shape[1]")


def mean_ignores_mask(x, mask):
    return x.mean(dim=1)


def mean_divides_by_length(x, mask):
    keep = mask.unsqueeze(-1).to(x.dtype)
    return (x * keep).sum(dim=1) / x.shape[1]


def mean_inverted_mask(x, mask):
    keep = (~mask).unsqueeze(-1).to(x.dtype)
    return (x * keep).sum(dim=1) / keep.sum(dim=1)


def mean_never_divides(x, mask):
    return (x * mask.unsqueeze(-1)).sum(dim=1)


def mean_counts_whole_batch(x, mask):
    keep = mask.unsqueeze(-1).to(x.dtype)
    return (x * keep).sum(dim=1) / mask.sum()


def mean_keeps_position_axis(x, mask):
    keep = mask.unsqueeze(-1).to(x.dtype)
    return (x * keep).sum(dim=1, keepdim=True) / keep.sum(dim=1, keepdim=True)


def mean_over_features(x, mask):
    return (x * mask.unsqueeze(-1)).mean(dim=-1)


MISTAKES = [
    Mistake(MEAN, "averages the padding too", mean_ignores_mask, "the mask was ignored",
            rule="the mean of the kept vectors"),
    Mistake(MEAN, "divides by the padded length", mean_divides_by_length, "divided by T, the padded length",
            rule="the mean of the kept vectors"),
    Mistake(MEAN, "keeps the padding, drops the tokens", mean_inverted_mask, "the mask was read the wrong way round",
            rule="the mean of the kept vectors"),
    Mistake(MEAN, "a sum, not a mean", mean_never_divides, "summed but not divided", rule="the mean of the kept vectors"),
    Mistake(MEAN, "one count for the whole batch", mean_counts_whole_batch, "in the whole batch",
            rule="the mean of the kept vectors"),
    Mistake(MEAN, "keepdim=True", mean_keeps_position_axis, "it kept the position axis", rule="a (B, D) tensor"),
    Mistake(MEAN, "mean over the features", mean_over_features, "it averaged over the features", rule="a (B, D) tensor"),
]
'''

PAGE = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# __TITLE__

SCAFFOLD: `python -m course.tools new-chapter` wrote this page. Replace it with the chapter: what the
paper says, the reasoning behind it, and figures made by the code on the page. The site never shows
an exercise's solution; it may show PyTorch's own layers doing what the learner is about to write.

All figures below are produced by the code on this page, with fixed random seeds, on a CPU.

```{code-cell} ipython3
import matplotlib.pyplot as plt
import torch

from course.tools.page_setup import page_setup

# figures at the site's resolution; a long cell is reported in the build's log
page_setup()
```

## A padded batch

Sequences of different lengths share one tensor once the short ones are padded; a boolean mask
tells the real tokens from the padding.

```{code-cell} ipython3
---
mystnb:
  figure:
    caption: The mask of a batch of four sequences padded to one length, real tokens in black.
    name: fig-__STEM__-mask
  image:
    alt: Four rows of squares, black from the left on the real tokens and white on the padding.
---
lengths = torch.tensor([7, 4, 9, 2])
T = int(lengths.max())
mask = torch.arange(T)[None, :] < lengths[:, None]  # (4, T): True on the real tokens
fig, ax = plt.subplots(figsize=(5, 2.2))
ax.imshow(mask, cmap="Greys", aspect="auto")
ax.set(xlabel="position t", ylabel="sequence b", title="the mask: real tokens in black")
plt.show()
```

## How much of the batch is padding

```{code-cell} ipython3
---
mystnb:
  figure:
    caption: How many padded positions each sequence of the batch carries.
    name: fig-__STEM__-padding
  image:
    alt: Four orange bars, one for each sequence, as tall as the positions it is padded with.
---
fig, ax = plt.subplots(figsize=(5, 2.2))
ax.bar(range(len(lengths)), T - lengths, color="tab:orange")
ax.set(xlabel="sequence b", ylabel="padded positions", title=f"padding up to T = {T}")
plt.show()
```
'''


def _fill(template: str, chapter: Chapter, title: str) -> str:
    values = {
        "__NUMBER__": str(chapter.number),
        "__SENTENCE_TITLE__": _in_sentence(title),
        "__TITLE__": title,
        "__STEM__": chapter.stem,
        "__ASSIGNMENT__": chapter.assignment,
    }
    for token, value in values.items():
        template = template.replace(token, value)
    return template


def plan(name: str, root: Path = REPO) -> Chapter:
    """The chapter ``name`` would be, or why it cannot be made."""
    match = CHAPTER_NAME.match(name)
    if not match:
        raise ScaffoldError(
            f"{name!r} is not a chapter name: write chNN_topic, two digits and lower-case words joined by '_', "
            "such as ch07_bert_gpt"
        )
    number, stem = int(match.group(1)), match.group(2)
    if keyword.iskeyword(stem):
        raise ScaffoldError(f"the notebook would be named {stem!r}, a Python keyword, so its modules could not be imported")
    for existing in chapters(root):
        if existing.assignment == name or existing.number == number or existing.stem == stem:
            raise ScaffoldError(
                f"{existing.source.relative_to(root)} exists already: chapter numbers and notebook names are unique"
            )
    chapter = Chapter(root, name, stem)
    for path in (
        chapter.source.parent, chapter.checks, chapter.mistakes, chapter.page, chapter.release.parent, chapter.reference_path
    ):
        if path.exists():
            raise ScaffoldError(f"{path.relative_to(root)} exists already; remove it or choose another name")
    if f"{BOOK}/{name}" in (root / TOC).read_text(encoding="utf-8"):
        raise ScaffoldError(f"{TOC} lists {BOOK}/{name} already")
    return chapter


_TOC_ENTRY = re.compile(r"^(?P<indent>\s*)- file: (?P<file>\S+)\s*$")


def add_to_toc(text: str, chapter: Chapter) -> str:
    """_toc.yml with the chapter's page before the first chapter of a higher number, else last."""
    lines = text.split("\n")
    entries = [(i, m) for i, line in enumerate(lines) if (m := _TOC_ENTRY.match(line))]
    if not entries:
        raise ScaffoldError(f"{TOC} lists no page ('- file: ...'): add the chapter's page by hand")

    def number(file: str) -> int | None:
        found = CHAPTER_NAME.match(Path(file).stem)
        return int(found.group(1)) if found else None

    later = [(i, m) for i, m in entries if (n := number(m["file"])) is not None and n > chapter.number]
    at, like = (later[0][0], later[0][1]) if later else (entries[-1][0] + 1, entries[-1][1])
    lines.insert(at, f"{like['indent']}- file: {chapter.toc_entry}")
    return "\n".join(lines)


def new_chapter(name: str, title: str | None = None, root: Path = REPO) -> list[Path]:
    """Write the chapter's files and its toc entry; the paths written, from the root."""
    chapter = plan(name, root)
    title = title or _topic_title(chapter.stem)
    files = {
        chapter.source: NOTEBOOK,
        chapter.checks: CHECKS,
        chapter.mistakes: MISTAKES,
        chapter.page: PAGE,
        chapter.zh_page: PAGE,  # the same code cells; its prose is to be written in Chinese
    }
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_fill(template, chapter, title), encoding="utf-8")
    toc = root / TOC
    toc.write_text(add_to_toc(toc.read_text(encoding="utf-8"), chapter), encoding="utf-8")
    return [p.relative_to(root) for p in [*files, toc]]


def unfinished(root: Path = REPO) -> list[str]:
    """The files of every chapter that still hold the scaffold's example."""
    left = []
    for chapter in chapters(root):
        for path in (chapter.source, chapter.checks, chapter.mistakes, chapter.page, chapter.zh_page):
            if path.is_file() and MARKER + ":" in path.read_text(encoding="utf-8"):
                left.append(f"{path.relative_to(root)} is still the scaffold of {chapter.assignment}: write the chapter")
    return left
