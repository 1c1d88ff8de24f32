"""The website's two editions: English (book/) and Chinese (zh/book/), one table of contents.

A Chinese page is the twin of an English one: its prose is written in Chinese, its code cells are the
English page's, byte for byte (their figure captions and alt texts aside, which are in Chinese). The two
editions therefore show the same outputs and the same figures, and the Chinese build executes nothing
of its own: it reads the English build's execution cache, where a page is found by its code cells.

    python -m course.tools site       build both editions: _build/html/ and _build/html/zh/
    python -m course.tools zh-sync    copy the English pages' and notebooks' code cells into their Chinese twins

The Chinese edition is its own Sphinx project rooted at zh/, so that its pages keep the English
pages' names (zh/book/ch02_attention.md is the page book/ch02_attention) and its search index is built
for Chinese (Sphinx's language zh_CN, which cuts Chinese text into words with jieba). Its configuration
is made from the English _config.yml here rather than kept as a second copy that could drift.
"""
from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from course.layout import BUILD, EXECUTION_CACHE, REPO, TOC, ZH, ZH_BUILD, toc_pages, zh_twin

#: the Chinese edition's title, in the site's header and its browser tabs
ZH_TITLE = "Attention Is All You Need：亲手实现，自动批改"
#: a code cell of a MyST page: its opening fence, its body (options and code), its closing fence
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
#: the longest a build may take (each page has the execution timeout of _config.yml besides)
BUILD_LIMIT_S = 1800
#: what a twin's code cell may say in its own language
TRANSLATED = (("mystnb", "figure", "caption"), ("mystnb", "image", "alt"))


class EditionError(RuntimeError):
    """The two editions cannot be built or kept in step; the message says which page and why."""


# ---------------------------------------------------------------- code cells


@dataclass(frozen=True)
class CodeCell:
    options: dict  # the YAML header between --- lines (figure caption, tags, ...), {} without one
    code: str
    text: str  # the cell as written, fences included

    @classmethod
    def parse(cls, match: re.Match) -> CodeCell:
        body = match["body"]
        options: dict = {}
        if body.startswith("---\n"):
            header, _, code = body[4:].partition("\n---\n")
            options = yaml.safe_load(header) or {}
        elif body.startswith(":"):  # the short form, ":tags: [hide-input]" lines
            lines = body.split("\n")
            short = [line for line in lines if line.startswith(":")]
            options = {k.strip(":"): yaml.safe_load(v) for k, _, v in (line[1:].partition(": ") for line in short)}
            code = "\n".join(lines[len(short):]).lstrip("\n")
        else:
            code = body
        return cls(options, code, match.group(0))

    def untranslated(self) -> dict:
        """The options a twin must share: all but the translated texts."""
        options = copy.deepcopy(self.options)
        for path in TRANSLATED:
            node = options
            for key in path[:-1]:
                node = node.get(key, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node.pop(path[-1], None)
        return options


def code_cells(text: str) -> list[CodeCell]:
    return [CodeCell.parse(m) for m in CODE_CELL.finditer(text)]


def _translated_texts(cell: CodeCell) -> dict[tuple[str, ...], str]:
    found = {}
    for path in TRANSLATED:
        node = cell.options
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, str):
            found[path] = node
    return found


def _with_texts(english: CodeCell, texts: dict[tuple[str, ...], str]) -> str:
    """The English cell, its caption and alt text replaced by the twin's."""
    if not texts:
        return english.text
    options = copy.deepcopy(english.options)
    for path, value in texts.items():
        node = options
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    opening = english.text.split("\n", 1)[0]
    header = yaml.safe_dump(options, allow_unicode=True, sort_keys=False, width=100)
    return f"{opening}\n---\n{header}---\n{english.code}```"


def twin_problems(root: Path, page: str) -> list[str]:
    """How a page's Chinese twin departs from it: missing, other code cells, other options."""
    twin = zh_twin(root, page)
    if not twin.is_file():
        return [f"{page} has no Chinese twin {twin.relative_to(root)}"]
    english, chinese = code_cells((root / f"{page}.md").read_text()), code_cells(twin.read_text())
    if len(english) != len(chinese):
        return [f"{twin.relative_to(root)} has {len(chinese)} code cells where {page}.md has {len(english)}"]
    problems = []
    for number, (en, zh) in enumerate(zip(english, chinese), 1):
        if en.code != zh.code:
            problems.append(f"{twin.relative_to(root)}: code cell {number} differs from the English page's")
        elif en.untranslated() != zh.untranslated():
            problems.append(f"{twin.relative_to(root)}: code cell {number}'s options differ from the English page's")
    return problems


def sync(root: Path = REPO) -> list[Path]:
    """Copy each English page's code cells into its Chinese twin, keeping the twin's captions; the twins changed."""
    changed = []
    for page in toc_pages(root):
        twin = zh_twin(root, page)
        if not twin.is_file() or twin.is_symlink():
            continue
        text = twin.read_text()
        english = code_cells((root / f"{page}.md").read_text())
        matches = list(CODE_CELL.finditer(text))
        if len(matches) != len(english):
            raise EditionError(f"{twin.relative_to(root)} has {len(matches)} code cells where {page}.md has "
                               f"{len(english)}: add or remove the cell in the twin by hand, then sync again")
        pieces, at = [], 0
        for match, en in zip(matches, english):
            zh = CodeCell.parse(match)
            same = zh.code == en.code and zh.untranslated() == en.untranslated()
            pieces += [text[at:match.start()], zh.text if same else _with_texts(en, _translated_texts(zh))]
            at = match.end()
        new = "".join(pieces) + text[at:]
        if new != text:
            twin.write_text(new)
            changed.append(twin)
    return changed


def _differs(en, zh) -> bool:
    """Whether an instructor notebook's cell and its twin's differ where they must not: a code cell's source
    or tags (a markdown cell is the twin's own)."""
    return en.cell_type == "code" and (en.source != zh.source or en.metadata != zh.metadata)


def _paired(chapter):
    """An instructor notebook and its twin, read, or the sentence that says why their cells do not pair."""
    import jupytext

    english, chinese = jupytext.read(chapter.source), jupytext.read(chapter.zh_source)
    if [c.cell_type for c in english.cells] != [c.cell_type for c in chinese.cells]:
        return (f"{chapter.zh_source.relative_to(chapter.root)} does not have the cells of "
                f"{chapter.source.relative_to(chapter.root)} in the same order ({len(chinese.cells)} against "
                f"{len(english.cells)}, or in another order)")
    return english, chinese


def notebook_twin_problems(chapter) -> list[str]:
    """How an instructor notebook's Chinese twin departs from it: missing, other cells, other code, other tags."""
    where = chapter.zh_source.relative_to(chapter.root)
    if not chapter.zh_source.is_file():
        return [f"{chapter.assignment} has no Chinese instructor notebook {where}"]
    paired = _paired(chapter)
    if isinstance(paired, str):
        return [paired]
    english, chinese = paired
    code = [(en, zh) for en, zh in zip(english.cells, chinese.cells) if en.cell_type == "code"]
    return [f"{where}: code cell {n} differs from the English notebook's"
            for n, (en, zh) in enumerate(code, 1) if _differs(en, zh)]


def sync_notebooks(root: Path = REPO) -> list[Path]:
    """Copy each instructor notebook's code cells (source and tags) into its Chinese twin; the twins changed."""
    import jupytext

    from course.layout import chapters

    changed = []
    for chapter in chapters(root):
        if not chapter.zh_source.is_file():
            continue
        paired = _paired(chapter)
        if isinstance(paired, str):
            raise EditionError(f"{paired}: add or remove the cell in the twin by hand, then sync again")
        english, chinese = paired
        differing = [(en, zh) for en, zh in zip(english.cells, chinese.cells) if _differs(en, zh)]
        for en, zh in differing:
            zh.source, zh.metadata = en.source, copy.deepcopy(en.metadata)
        if differing:
            jupytext.write(chinese, chapter.zh_source, fmt="py:percent")
            changed.append(chapter.zh_source)
    return changed


# ---------------------------------------------------------------- building

#: the table of contents' part captions in Chinese; a caption without one stops the build
ZH_CAPTIONS = {"The paper, built": "论文，亲手实现", "Reference": "参考与延伸"}


def zh_toc(root: Path) -> dict:
    """The English table of contents with its captions in Chinese (the pages' names are the same)."""
    toc = yaml.safe_load((root / TOC).read_text())

    def translate(node):
        if isinstance(node, dict):
            if "caption" in node:
                if node["caption"] not in ZH_CAPTIONS:
                    raise EditionError(f"the caption {node['caption']!r} of {TOC} has no Chinese in "
                                       "course/tools/editions.py's ZH_CAPTIONS")
                node["caption"] = ZH_CAPTIONS[node["caption"]]
            for value in node.values():
                translate(value)
        elif isinstance(node, list):
            for item in node:
                translate(item)

    translate(toc)
    return toc



def zh_config(root: Path) -> dict:
    """The Chinese edition's configuration: the English one, in Chinese, reading the English assets and cache."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    config["title"] = ZH_TITLE
    config.setdefault("execute", {})["cache"] = str((root / EXECUTION_CACHE).resolve())
    html = config.setdefault("html", {})
    if html.get("favicon"):
        html["favicon"] = str((root / html["favicon"]).resolve())
    sphinx = config.setdefault("sphinx", {}).setdefault("config", {})
    sphinx["language"] = "zh_CN"
    sphinx["html_static_path"] = [str((root / p).resolve()) for p in sphinx.get("html_static_path", [])]
    sphinx["course_root"] = ".."  # where the exercises and the course's code are, from zh/
    return config


def _jupyter_book(root: Path, *args: str, echo: bool) -> tuple[int, str]:
    """Run a build; what it printed (and, with ``echo``, print it as it comes: the pages report their long
    cells while they execute, course/tools/page_progress.py)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    printed = []
    with subprocess.Popen([str(bin_dir / "jupyter-book"), "build", *args], cwd=root, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as build:
        limit = threading.Timer(BUILD_LIMIT_S, build.kill)  # a page that never ends does not hold the build forever
        limit.start()
        try:
            for line in build.stdout:
                printed.append(line)
                if echo:
                    print(line, end="", flush=True)
        finally:
            limit.cancel()
    if build.returncode < 0:
        printed.append(f"\nthe build was stopped after {BUILD_LIMIT_S} s\n")
    return build.returncode, "".join(printed)


def _edition(root: Path, label: str, args: tuple[str, ...], echo: bool) -> str:
    """Build one edition; what the build printed."""
    if echo:
        print(f"building the {label} edition: jupyter-book build {' '.join(args)}", flush=True)
    code, printed = _jupyter_book(root, *args, echo=echo)
    if code != 0 or "Traceback" in printed:
        raise EditionError(f"the {label} edition's build failed:\n{printed[-10000:]}")
    return printed


def build(root: Path = REPO, *, echo: bool = False) -> tuple[Path, str]:
    """Build the English edition, then the Chinese one into its folder of the site; the site and the builds' output."""
    root = Path(root).resolve()
    english = _edition(root, "English", (".",), echo)
    work = root / ZH_BUILD
    work.mkdir(parents=True, exist_ok=True)
    (work / "_config.yml").write_text(yaml.safe_dump(zh_config(root), allow_unicode=True, sort_keys=False))
    (work / TOC).write_text(yaml.safe_dump(zh_toc(root), allow_unicode=True, sort_keys=False))
    chinese = _edition(root, "Chinese", (ZH, "--config", str(work / "_config.yml"), "--toc", str(work / TOC),
                                         "--path-output", str(work)), echo)
    site = root / BUILD / "html"
    placed = site / ZH
    if placed.exists():
        shutil.rmtree(placed)
    shutil.copytree(work / BUILD / "html", placed)
    return site, f"{english}\n{chinese}"
