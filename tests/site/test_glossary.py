"""The glossary page: every entry bilingual, linked to the chapter that explains it, and used.

The pages are read as MyST source, so these checks need no site build: the glossary's terms are
the unindented lines of its `{glossary}` block, and a chapter uses a term through the `{term}`
role, written either {term}`softmax` or {term}`keys <key>`.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from course.layout import GLOSSARY, REPO, toc_pages

GLOSSARY_PAGE = REPO / f"{GLOSSARY}.md"
CJK = re.compile(r"[\u4e00-\u9fff]")
TERM_ROLE = re.compile(r"\{term\}`([^`]*)`")
DOC_ROLE = re.compile(r"\{doc\}`([^`]*)`")
FENCE = re.compile(r"^(`{3,}|~{3,})")


def _toc_pages() -> set[str]:
    return toc_pages(REPO)


def _role_target(content: str) -> str:
    """`text <target>` names target; a bare `text` names itself."""
    explicit = re.fullmatch(r"(?s).*<([^<>]+)>\s*", content)
    return (explicit.group(1) if explicit else content).strip()


def parse_glossary(text: str) -> dict[str, str]:
    """Each term of the {glossary} block with its definition (the indented lines below it)."""
    lines = text.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if re.match(r"^(`{3,}|:{3,})\{glossary\}", line))
    except StopIteration:
        raise AssertionError(f"{GLOSSARY_PAGE.name} has no {{glossary}} block") from None
    fence = re.match(r"^(`{3,}|:{3,})", lines[start]).group(1)
    entries: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in lines[start + 1:]:
        if line.strip() == fence:
            break
        if not line.strip() or line.startswith(":"):
            continue
        if line[0].isspace():
            assert pending or entries, f"a definition comes before any term: {line!r}"
            for term in pending:
                entries[term] = []
            if pending:
                current = pending
                pending = []
            for term in current:
                entries[term].append(line.strip())
        else:
            assert line.strip() not in entries, f"the glossary defines {line.strip()!r} twice"
            pending.append(line.strip())
    assert not pending, f"glossary terms without a definition: {pending}"
    return {term: " ".join(body) for term, body in entries.items()}


def prose(text: str) -> str:
    """A page without its code cells and other literal blocks, where a role is not a role."""
    kept: list[str] = []
    literal = None  # the fence that closes the literal block we are in
    directives: list[str] = []  # fences of the open directives ({note}, ...), whose content is prose
    for line in text.split("\n"):
        stripped = line.strip()
        if literal:
            literal = None if stripped == literal else literal
            continue
        if directives and stripped == directives[-1]:
            directives.pop()
            continue
        m = FENCE.match(stripped)
        if m:
            info = stripped[len(m.group(1)):].strip()
            if info.startswith("{") and not info.startswith(("{code-cell}", "{code}", "{code-block}")):
                directives.append(m.group(1))
            else:
                literal = m.group(1)
            continue
        kept.append(line)
    return "\n".join(kept)


def _pages() -> dict[str, str]:
    return {page: (REPO / f"{page}.md").read_text() for page in sorted(_toc_pages()) if (REPO / f"{page}.md").is_file()}


@pytest.fixture(scope="module")
def glossary() -> dict[str, str]:
    assert GLOSSARY in _toc_pages(), "_toc.yml does not list book/glossary"
    return parse_glossary(GLOSSARY_PAGE.read_text())


def test_the_glossary_has_the_terms_of_the_course(glossary):
    for term in ("attention", "query", "key", "value", "softmax", "multi-head attention", "layer normalisation",
                 "positional encoding", "label smoothing", "beam search"):
        assert term in glossary, f"the glossary lacks {term!r}"


def test_every_entry_has_a_chinese_name_and_a_chapter_that_exists(glossary):
    pages = _toc_pages()
    for term, definition in glossary.items():
        assert CJK.search(definition), f"glossary entry {term!r} has no Chinese name"
        links = [_role_target(c) for c in DOC_ROLE.findall(definition)]
        assert links, f"glossary entry {term!r} does not link the chapter that explains it ({{doc}}`...`)"
        for target in links:
            page = (Path("book") / target).as_posix()
            assert page in pages and page != GLOSSARY, (
                f"glossary entry {term!r} links {target!r}, which is not a page of _toc.yml"
            )


def test_every_glossary_term_is_used_by_some_page(glossary):
    used = set()
    for text in _pages().values():
        used |= {_role_target(c).lower() for c in TERM_ROLE.findall(prose(text))}
    unused = sorted(t for t in glossary if t.lower() not in used)
    assert not unused, f"glossary terms no page links with {{term}}: {unused}"


def test_every_term_role_names_a_glossary_term(glossary):
    known = {t.lower() for t in glossary}
    for page, text in _pages().items():
        for content in TERM_ROLE.findall(text):
            target = _role_target(content)
            assert target.lower() in known, f"{page} links {{term}}`{content}`, but the glossary has no {target!r}"


def test_the_parser_sees_a_missing_translation_and_an_unknown_term():
    bad = "```{glossary}\nsoftmax\n  Turns scores into weights. {doc}`ch02_attention`\n```\n"
    entries = parse_glossary(bad)
    assert list(entries) == ["softmax"] and not CJK.search(entries["softmax"])
    assert _role_target("keys <key>") == "key" and _role_target("softmax") == "softmax"
    assert TERM_ROLE.findall(prose("```{code-cell} ipython3\n# {term}`x`\n```\n{term}`y`")) == ["y"]
