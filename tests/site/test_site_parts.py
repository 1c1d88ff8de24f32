"""The parts of the website's extension (course/tools/sphinx_site.py) that need no site build:
where the exercise box goes, what it says with and without a repository address, and the words
a search finds a page by."""
from __future__ import annotations

import logging
from types import SimpleNamespace

from docutils import nodes

from course.tools import sphinx_site
from tests.conftest import REPO


def _section(*children: nodes.Node) -> nodes.section:
    section = nodes.section()
    section += nodes.title("", "A chapter")
    for child in children:
        section += child
    return section


def test_the_box_goes_after_the_first_paragraph_that_ends_a_sentence():
    para = nodes.paragraph
    # chapter 2's opening: a sentence that a formula completes, then the rest of that sentence
    opening = _section(para("", "Section 3.2.1 of the paper states it in a single line,"),
                       nodes.math_block("", "Attention(Q, K, V)"), para("", "and this chapter takes it apart."))
    assert sphinx_site.box_position(opening) == 4
    assert sphinx_site.box_position(_section(para("", "It is about this."), para("", "More."))) == 2
    assert sphinx_site.box_position(_section(para("", 'It says "so."'), para("", "More."))) == 2
    leads_on = _section(para("", "Each layer has three parts:"), nodes.enumerated_list(), para("", "Then this."))
    assert sphinx_site.box_position(leads_on) == 4
    no_sentence = _section(para("", "A list follows:"), nodes.bullet_list(), nodes.section())
    assert sphinx_site.box_position(no_sentence) == 1, "under the title when nothing ends a sentence first"


def _external_links(box: nodes.Node) -> list[str]:
    return [ref["refuri"] for ref in box.findall(nodes.reference) if ref.get("refuri")]


def test_the_box_links_the_repository_only_when_its_address_is_set():
    notebook = "exercises/ch02_attention/attention.ipynb"
    url = "https://example.org/course"
    linked = sphinx_site.exercise_box("book/ch02_attention", [notebook], url)
    assert _external_links(linked) == [url]
    unset = sphinx_site.exercise_box("book/ch02_attention", [notebook], "")
    assert _external_links(unset) == [], "no link while the address is unset"
    for box in (linked, unset):
        text = box.astext()
        assert f"autograder check {notebook}" in text and "make setup" in text, "the commands, either way"
        assert list(box.findall(sphinx_site.addnodes.download_reference)), "the download, either way"


def test_the_header_button_follows_the_address(caplog):
    for url, shown in [("https://example.org/course", True), ("", False), ("  ", False)]:
        config = SimpleNamespace(html_theme_options={"repository_url": url, "repository_branch": "main"})
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            sphinx_site.configure_repository(None, config)
        assert config.html_theme_options["use_repository_button"] is shown, url
        assert config.html_theme_options["repository_branch"] == "main", "the other options are kept"
        said = "repository's address is unset" in caplog.text
        assert said is not shown, f"{url!r}: the build {'does not say' if not said else 'says'} it is unset"
    config = SimpleNamespace(html_theme_options=None)
    sphinx_site.configure_repository(None, config)
    assert config.html_theme_options["use_repository_button"] is False


def test_a_search_finds_the_spellings_a_reader_types():
    words = sphinx_site.spelling_variants("The warm-up of a pre-norm stack; layer normalisation, "
                                          "otherwise a precise exercise.")
    assert {"warmup", "prenorm", "normalization"} <= words
    assert not {"otherwize", "precize", "exercize"} & words


def test_each_chinese_term_of_the_glossary_finds_the_chapter_that_explains_it():
    keywords = sphinx_site.glossary_keywords((REPO / "book" / "glossary.md").read_text(encoding="utf-8"))
    assert "位置编码" in keywords["book/ch06_positional"]
    assert {"标签平滑", "束搜索", "学习率预热"} <= keywords["book/ch08_capstone"]
    assert {"前瞻掩码", "后续掩码", "因果掩码"} <= keywords["book/ch05_decoder"], "each name on its own"
    assert all(page.startswith("book/") and (REPO / f"{page}.md").is_file() for page in keywords)
    assert sum(map(len, keywords.values())) >= 60


def test_what_grew_out_of_the_transformer_is_told_once():
    """The four directions the article's opening names are the subject of chapter 7's last
    section; the introduction points there instead of listing them again."""
    marks = ("mixture", "long context", "cache", "patches")
    pages = sorted(p.stem for p in (REPO / "book").glob("*.md")
                   if all(mark in p.read_text(encoding="utf-8").lower() for mark in marks))
    assert pages == ["ch07_bert_gpt"], f"pages that list what grew out of the Transformer: {pages}"
    chapter = (REPO / "book" / "ch07_bert_gpt.md").read_text(encoding="utf-8")
    assert "(ch07-what-came-after)=\n## What the paper changed" in chapter
    assert "{ref}`ch07-what-came-after`" in (REPO / "book" / "intro.md").read_text(encoding="utf-8")
