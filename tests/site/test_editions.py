"""The two editions of the website cannot drift apart: every English page has a Chinese twin with the
same code cells and the same structure (course/tools/editions.py). Read from the sources; the built
twins' outputs are compared in tests/site/test_site.py."""
from __future__ import annotations

import re
import shutil
from collections import Counter

import pytest

from course.layout import REPO, TOC, ZH, toc_pages, zh_twin
from course.tools import editions

#: what must be the same in a page and its twin, outside the code cells: the sections' depths, the
#: values the page glues in, the glossary terms it links, the figures it refers to, its display math
STRUCTURE = {
    "headings": re.compile(r"^(#{1,4}) ", re.M),
    "glued values": re.compile(r"\{glue:text\}`([^`]+)`"),
    "glossary links": re.compile(r"\{term\}`(?:[^`<]*<)?([^`<>]+?)>?`"),
    "figure references": re.compile(r"\{numref\}`([^`]+)`"),
    "display equations": re.compile(r"^\$\$\n(.*?)\n\$\$$", re.M | re.S),
    "questions": re.compile(r"^:::\{admonition\} (\d+)\. ", re.M),
}


#: words inside display math (\text{if }, \text{so that}), which each edition writes in its language; a
#: subscript's name (d_\text{model}) is one word without a space and stays the same in both
MATH_WORDS = re.compile(r"\\text\{[^{}]*(?:\s|[\u4e00-\u9fff]|[,:.，：。])[^{}]*\}")


def _prose(text: str) -> str:
    return editions.CODE_CELL.sub("", text)


def _equation(math: str) -> str:
    return MATH_WORDS.sub(r"\\text{…}", math)


def structure(text: str) -> dict[str, Counter]:
    prose = _prose(text)
    found = {name: Counter(m.group(1) for m in pattern.finditer(prose)) for name, pattern in STRUCTURE.items()}
    found["glossary links"] = Counter(term.strip().lower() for term in found["glossary links"].elements())
    found["display equations"] = Counter(map(_equation, found["display equations"].elements()))
    # a sentence the code glues is glued in each language, the Chinese one as <name>_zh (chapter 8's verdict)
    found["glued values"] = Counter(re.sub(r"_zh(?=$|:)", "", name) for name in found["glued values"].elements())
    return found


@pytest.mark.parametrize("page", toc_pages())
def test_every_page_has_a_chinese_twin_with_its_code_cells(page):
    problems = editions.twin_problems(REPO, page)
    assert not problems, "\n".join(problems) + "\n(run `python -m course.tools zh-sync` after changing the English page)"


@pytest.mark.parametrize("page", [p for p in toc_pages() if not zh_twin(REPO, p).is_symlink()])
def test_a_twin_has_its_pages_sections_values_terms_and_equations(page):
    english, chinese = structure((REPO / f"{page}.md").read_text()), structure(zh_twin(REPO, page).read_text())
    for name in STRUCTURE:
        assert english[name] == chinese[name], (
            f"{zh_twin(REPO, page).relative_to(REPO)} and {page}.md differ in their {name}: "
            f"only English {dict(english[name] - chinese[name])}, only Chinese {dict(chinese[name] - english[name])}")


@pytest.mark.parametrize("page", [p for p in toc_pages() if not zh_twin(REPO, p).is_symlink()])
def test_a_twin_is_written_in_chinese(page):
    prose = re.sub(r"\$[^$]*\$|`[^`]*`|\{[a-z:]+\}`[^`]*`|\[[^\]]*\]\([^)]*\)", "", _prose(zh_twin(REPO, page).read_text()))
    chinese = len(re.findall(r"[\u4e00-\u9fff]", prose))
    latin = len(re.findall(r"[A-Za-z]", prose))
    assert chinese > 2 * latin, f"{page}'s twin has {chinese} Chinese characters against {latin} Latin letters in its prose"


def test_the_glossary_is_shared():
    assert zh_twin(REPO, "book/glossary").resolve() == (REPO / "book/glossary.md").resolve()


def _copy(tmp_path):
    root = tmp_path / "course"
    (root / "book").mkdir(parents=True)
    (root / ZH / "book").mkdir(parents=True)
    shutil.copy(REPO / TOC, root / TOC)
    page = "book/ch06_positional"
    for name in (f"{page}.md",):
        shutil.copy(REPO / name, root / name)
        shutil.copy(zh_twin(REPO, page), zh_twin(root, page))
    return root, page


def test_sync_copies_a_changed_code_cell_and_keeps_the_twins_captions(tmp_path, monkeypatch):
    root, page = _copy(tmp_path)
    monkeypatch.setattr(editions, "toc_pages", lambda r: [page])
    english = root / f"{page}.md"
    cells = editions.code_cells(english.read_text())
    captioned = next(i for i, c in enumerate(cells) if c.options.get("mystnb", {}).get("figure", {}).get("caption"))
    changed = cells[captioned].text.replace(cells[captioned].code, cells[captioned].code + "print('one more line')\n")
    english.write_text(english.read_text().replace(cells[captioned].text, changed))
    before = editions.code_cells(zh_twin(root, page).read_text())[captioned]
    assert editions.twin_problems(root, page), "a changed English cell is not seen"
    assert editions.sync(root) == [zh_twin(root, page)]
    after = editions.code_cells(zh_twin(root, page).read_text())[captioned]
    assert after.code.endswith("print('one more line')\n")
    assert after.options["mystnb"]["figure"]["caption"] == before.options["mystnb"]["figure"]["caption"]
    assert editions.twin_problems(root, page) == [] and editions.sync(root) == []
    # a cell added to one edition only cannot be paired: the author says where it goes
    english.write_text(english.read_text() + "\n```{code-cell} ipython3\nprint(1)\n```\n")
    with pytest.raises(editions.EditionError, match="add or remove the cell in the twin by hand"):
        editions.sync(root)


def test_the_chinese_edition_is_configured_from_the_english_one():
    config = editions.zh_config(REPO)
    sphinx = config["sphinx"]["config"]
    assert sphinx["language"] == "zh_CN" and sphinx["course_root"] == ".."
    assert config["execute"]["cache"] == str((REPO / "_build/.jupyter_cache").resolve())
    assert all(p.startswith("/") for p in sphinx["html_static_path"])
    english = editions.yaml.safe_load((REPO / "_config.yml").read_text())
    assert sphinx["course_execution_inputs"] == english["sphinx"]["config"]["course_execution_inputs"]
