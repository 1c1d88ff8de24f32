"""The website: built from the table of contents alone, executed, and free of anything secret.

The `site` fixture (tests/conftest.py, built by tests/site/site_build.py) builds a copy of the
repository into which decoys have been planted where an instructor's class data lives and
where nbgrader's generated solution notebooks sit. Nothing of theirs may reach the site.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import PurePosixPath

import pytest

from course.layout import AUTOGRADED, EXERCISES, FEEDBACK, REFERENCE, SOLUTIONS, SUBMITTED, ZH, chapters, sources, toc_pages
from course.notebook_format import secret_lines, to_nbgrader
from tests.conftest import REPO
from tests.site.site_build import DECOY


def test_every_page_of_the_table_of_contents_is_built(site):
    assert (site / "index.html").is_file()
    for page in toc_pages():
        assert (site / f"{page}.html").is_file(), f"{page} was not built"


def test_only_the_table_of_contents_is_built(site):
    built = {p.relative_to(site).with_suffix("").as_posix() for p in site.rglob("*.html") if "_static" not in p.parts}
    edition = [*toc_pages(), "index", "genindex", "search"]
    stray = built - set(edition) - {f"{ZH}/{page}" for page in edition}
    assert not stray, f"pages outside the table of contents were built: {sorted(stray)}"


class _Outputs(HTMLParser):
    """What a page's code printed and drew: the text and the images of its cells' outputs, without the
    figures' captions (which each edition writes in its own language)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.depth = 0  # of nested elements inside the output being read, 0 outside any
        self.caption = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.depth:
            self.depth += tag not in VOID
            self.caption += tag == "figcaption"
            if tag == "img":
                self.found.append("image " + PurePosixPath(attrs.get("src", "")).name)
        elif tag == "div" and "cell_output" in (attrs.get("class") or "").split():
            self.depth = 1
            self.found.append("output")

    def handle_endtag(self, tag):
        if self.depth and tag not in VOID:
            self.depth -= 1
            self.caption -= tag == "figcaption"

    def handle_data(self, data):
        if self.depth and not self.caption and data.strip():
            self.found.append(data.strip())


VOID = {"img", "br", "hr", "meta", "link", "input", "source", "wbr"}


def outputs(html: str) -> list[str]:
    reader = _Outputs()
    reader.feed(html)
    return reader.found


def test_every_page_has_a_chinese_twin_with_the_same_outputs_and_figures(site):
    compared = 0
    for page in toc_pages():
        english, chinese = (site / f"{page}.html").read_text(), (site / ZH / f"{page}.html").read_text()
        assert '<html lang="zh-CN"' in chinese, f"{ZH}/{page}.html is not marked as Chinese"
        assert outputs(english) == outputs(chinese), f"{page}'s two editions show different outputs"
        compared += len(outputs(english))
    assert compared > 500, "the pages show almost no outputs"


def test_every_page_links_its_twin_in_the_other_language(site):
    for page in toc_pages():
        depth = "../" * page.count("/")
        english, chinese = (site / f"{page}.html").read_text(), (site / ZH / f"{page}.html").read_text()
        assert f'class="language-switch-link" href="{depth}{ZH}/{page}.html"' in english, f"{page} has no link to 中文版"
        assert f'class="language-switch-link" href="../{depth}{page}.html"' in chinese, f"{ZH}/{page} has no link back"


def test_chapters_have_figures_made_by_code(site):
    # Pages that run code; a reference page such as the glossary has none.
    pages = [p for p in toc_pages()[1:] if "```{code-cell}" in (REPO / f"{p}.md").read_text(encoding="utf-8")]
    assert len(pages) >= 8, pages
    for page in pages:
        html = (site / f"{page}.html").read_text(encoding="utf-8")
        assert html.count("<img") >= 2, f"{page} has no figures"
        assert "Traceback" not in html, f"{page} shows a traceback"


def test_nothing_secret_is_published(site):
    secrets = set()
    for src in sources(REPO):
        secrets |= secret_lines(to_nbgrader(src))
    assert secrets
    # The exercise boxes publish the learner release as it is (tests/course/test_release.py checks what
    # it holds); a line of a solution can also stand in code the release gives, so a copy of the
    # release is not searched for solution lines. Any other download is.
    releases = {n.read_bytes() for c in chapters(REPO) for n in (c.release, c.zh_release)}  # both editions
    for path in site.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        text = data.decode("utf-8", errors="replace")
        where = path.relative_to(site)
        assert DECOY not in text, f"{where} contains class data or a stray page"
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS"):
            assert marker not in text, f"{where} contains {marker}"
        if "_downloads" in where.parts:
            assert data in releases, f"{where} is published but is not a released exercise notebook"
            continue
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{where} contains solution or hidden-test code: {leaked[:3]}"
    for folder in (SOLUTIONS, EXERCISES, SUBMITTED, AUTOGRADED, FEEDBACK, "tests", "autograder", REFERENCE):
        assert not (site / folder).exists(), f"{folder}/ was published"


def test_cells_marked_remove_input_keep_their_code_off_the_site(site):
    import jupytext

    hidden = set()
    for page in toc_pages():
        path = REPO / f"{page}.md"
        for cell in jupytext.read(path).cells:
            if cell.cell_type == "code" and "remove-input" in cell.metadata.get("tags", []):
                hidden |= {line.strip() for line in cell.source.splitlines() if len(line.strip()) >= 24}
    for path in site.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            leaked = [line for line in hidden if line in text]
            assert not leaked, f"{path.relative_to(site)} publishes code of a remove-input cell: {leaked[:2]}"


def test_every_internal_link_and_image_resolves(site):
    from urllib.parse import unquote, urlparse

    broken = []
    for page in site.rglob("*.html"):
        if "_static" in page.parts:
            continue
        html = page.read_text(encoding="utf-8")
        for target in re.findall(r'(?:href|src)="([^"]+)"', html):
            url = urlparse(target)
            if url.scheme or url.netloc or target.startswith(("#", "mailto:", "javascript:", "data:")):
                continue
            path = (page.parent / unquote(url.path)).resolve() if url.path else page
            if not path.exists():
                broken.append(f"{page.relative_to(site)} -> {target}")
    assert not broken, "broken links or images:\n" + "\n".join(broken[:20])


@pytest.mark.parametrize("edition", ["", f"{ZH}/"])
def test_every_chapter_page_links_its_exercise_notebook(site, edition):
    """The English pages link the release, the Chinese ones the Chinese release (zh/exercises/)."""
    import yaml

    extra = yaml.safe_load((REPO / "_config.yml").read_text())["sphinx"]["config"]["course_exercise_pages"]
    releases = {c.assignment: c.zh_release if edition else c.release for c in chapters(REPO)}
    expected = {c.toc_entry: [releases[c.assignment]] for c in chapters(REPO)}
    expected |= {page: [releases[a] for a in assignments] for page, assignments in extra.items()}
    pages = [p for p in toc_pages() if p in expected]
    assert len(pages) >= 8, f"only {pages} of the table of contents have an exercise"
    for page in pages:
        html = (site / f"{edition}{page}.html").read_text(encoding="utf-8")
        box = re.search(r'<div class="[^"]*\bexercise-box\b[^"]*">(.*?)</div>\s*</div>', html, re.S)
        assert box, f"{page} has no exercise box"
        links = re.findall(r'<a class="reference download internal"[^>]*href="([^"]+)"', box.group(1))
        names = [link.rsplit("/", 1)[-1] for link in links]
        assert names == [r.name for r in expected[page]], f"{page}'s exercise box links {names}"
        for link, release in zip(links, expected[page]):
            published = (site / f"{edition}{page}").parent / link
            assert published.read_bytes() == release.read_bytes(), f"{page} links a copy of {release.name} that differs"
        repository = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]
        external = re.findall(r'<a class="reference external" href="([^"]+)"', box.group(1))
        if repository:
            assert external == [repository], f"{page}'s exercise box links {external}, not the repository"
        else:
            assert not external, f"the repository's address is unset, yet {page}'s exercise box links {external}"
        assert "autograder check" in re.sub(r"<[^>]+>", "", box.group(1)), f"{page}'s exercise box gives no command"


def test_the_repository_is_linked_only_when_its_address_is_set(site):
    """`repository: url:` empty: no header button, no link, and the build says so (the state the
    course ships in until it has a public address). Set: the button leads there."""
    import yaml

    from tests.site.site_build import build_log

    repository = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]
    html = (site / f"{toc_pages()[1]}.html").read_text(encoding="utf-8")
    button = re.search(r'<a href="([^"]*)"[^>]*btn-source-repository-button', html)
    if repository:
        assert button and button.group(1) == repository, "the header has no button to the repository"
    else:
        assert not button, f"the address is unset, yet the header links {button.group(1)}"
        assert "repository's address is unset" in build_log(site), "the build does not say that the address is unset"


@pytest.mark.parametrize("edition", ["", f"{ZH}/"])
def test_the_exercise_box_never_cuts_a_sentence(site, edition):
    """The box comes after a paragraph that ends a sentence, never between a sentence and the
    formula or list that completes it (chapter 2's opening sentence once ended with a comma), in
    English or in Chinese (whose sentences end in 。)."""
    pages = [p for p in toc_pages() if "exercise-box" in (site / f"{edition}{p}.html").read_text(encoding="utf-8")]
    assert len(pages) >= 8, pages
    for page in pages:
        html = (site / f"{edition}{page}.html").read_text(encoding="utf-8")
        before = html[: re.search(r'<div class="[^"]*\bexercise-box\b', html).start()]
        last = re.findall(r"<p>(.*?)</p>", before, re.S)
        text = re.sub(r"<[^>]+>", "", last[-1]).strip() if last else ""
        assert re.search(r"[.!?。！？][)\]\"'”’）」]*$", text), f"{edition}{page}: the exercise box follows {text[-80:]!r}"


def test_every_chinese_character_on_the_site_is_in_its_font(site):
    """The glossary's Chinese must not depend on a CJK font being installed: the site ships
    subsets of Noto Sans CJK SC (course/tools/cjk_font.py) and uses them for these code points."""
    from course.tools import cjk_font

    published = site / "_static" / "fonts"
    assert (published / cjk_font.LICENCE.name).is_file(), "the font's licence is not published with it"
    shown: set[str] = set()
    for page in site.rglob("*.html"):
        shown |= cjk_font.cjk_characters([page.read_text(encoding="utf-8")])
    assert len(shown) > 100, "the glossary's Chinese terms are missing from the site"
    css = (site / "_static" / "course.css").read_text(encoding="utf-8")
    for weight in cjk_font.SOURCES:
        font = published / cjk_font.subset_path(weight).name
        assert f"fonts/{font.name}" in css, f"course.css does not use {font.name}"
        # the Chinese edition uses about 1,100 distinct characters (360 KB); the whole font is 16 MB
        assert font.stat().st_size < 700_000, f"{font.name} is {font.stat().st_size:,} bytes: not a subset"
        lacking = shown - cjk_font.covered(font)
        assert not lacking, (f"{font.name} lacks {''.join(sorted(lacking))}, shown on the site: "
                             "run `python -m course.tools cjk-font`")
