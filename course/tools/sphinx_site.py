"""The website's own Sphinx extension, loaded by `_config.yml` (`sphinx: extra_extensions`).

It does five things that jupyter-book 1.x does not do by itself:

- **Math without a network.** MathJax is copied into the built site from the pinned
  `sphinx-mathjax-offline` package, so `mathjax_path` is a path inside `_static/`, and it is
  loaded on every page (search results show formulas too, see `site_static/search-math.js`).
- **A way to the exercise.** Every chapter page gets a box near its top with a download link to
  its released notebook (a `{download}` link, so the file is published with the site), the
  command that checks it, and a link to the repository (`repository: url:` in `_config.yml`;
  while that is empty, neither the box nor the header links a repository, and the build says so).
  The box goes after the first paragraph that ends a sentence, so it never splits one.
- **A search that finds what a learner types.** Each page carries, as keywords, the spellings of
  its words a reader may type instead ("warmup" for "warm-up", "normalization") and the Chinese
  names, from the glossary, of the terms it explains.
- **Pages that follow the code.** With `execute_notebooks: cache`, a page is re-executed only
  when its own code cells change. The pages also run the course's Python (`transformer/`,
  `reference/`, ...), so a digest of those folders is kept beside the cache: when it changes,
  the cache is emptied and every page is read and executed again.
- **Each inline script once.** Sphinx 7.4 registers an inline script under the name `None` and
  again under `''` before writing (sphinx-thebe's `const THEBE_JS_URL` then fails on every
  page). Duplicates are dropped from each page's script list.
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

from course.layout import GLOSSARY, SITE_STATIC, ZH, chapters, zh_twin

logger = logging.getLogger(__name__)

MATHJAX_DIST = "sphinx-mathjax-offline"
MATHJAX_FOLDER = "sphinx-mathjax-offline/static/mathjax"
STAMP = "course-sources.json"


# ---------------------------------------------------------------- MathJax, served by the site


def mathjax_source() -> Path:
    """The MathJax distribution that the pinned package ships."""
    try:
        dist = metadata.distribution(MATHJAX_DIST)
    except metadata.PackageNotFoundError:
        raise ExtensionError(
            f"{MATHJAX_DIST} is not installed: the site serves MathJax itself. Run `make setup` "
            "(it installs requirements.txt)."
        ) from None
    return Path(dist.locate_file(MATHJAX_FOLDER))


def _mathjax_entry(app: Sphinx) -> PurePosixPath:
    entry = PurePosixPath(app.config.mathjax_path)
    if "://" in str(entry) or entry.is_absolute() or entry.parts[:1] != ("mathjax",):
        raise ExtensionError(
            f"mathjax_path is {app.config.mathjax_path!r}; the site serves MathJax itself, so it must be "
            "a file of the bundled distribution under mathjax/, such as mathjax/tex-chtml.js"
        )
    if not (mathjax_source().parent / entry).is_file():
        raise ExtensionError(f"mathjax_path {entry} is not a file of {MATHJAX_DIST} ({mathjax_source()})")
    return entry


def _unused_mathjax_files(entry: str):
    """Skip the combined bundles other than the one the pages load: no page ever asks for them.

    Everything else stays, because the bundle fetches it on demand: TeX extensions that a
    formula needs (`input/tex/extensions/`), fonts, and what the right-click menu offers
    (the SVG renderer, the accessibility explorer and its speech rules in `sre/`).
    """

    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder) != mathjax_source():
            return set()
        bundles = {n for n in names if n.endswith(".js") and n.startswith(("tex-", "mml-")) and n != entry}
        return bundles | {"node-main.js", "latest.js"}  # Node.js only; a redirect to a CDN

    return ignore


def check_mathjax(app: Sphinx) -> None:
    if app.builder.format == "html":
        _mathjax_entry(app)  # a wrong path fails now, not after every page has been executed


def copy_mathjax(app: Sphinx, exc: Exception | None) -> None:
    if exc is not None or app.builder.format != "html":
        return
    entry = _mathjax_entry(app)
    shutil.copytree(
        mathjax_source(), Path(app.outdir) / "_static" / "mathjax",
        ignore=_unused_mathjax_files(entry.name), dirs_exist_ok=True,
    )


# ---------------------------------------------------------------- the exercise box


def repository_url(config) -> str:
    """The repository's address (`repository: url:` in _config.yml); "" while it is unset."""
    return str((config.html_theme_options or {}).get("repository_url") or "").strip()


def configure_repository(app: Sphinx, config) -> None:
    """Show the header's repository button only when there is an address for it to lead to.

    `repository: url:` is left empty until the course has a public home: the site then links no
    repository at all (a placeholder address would be a dead link on every page) and says so.
    """
    url = repository_url(config)
    config.html_theme_options = {**(config.html_theme_options or {}), "use_repository_button": bool(url)}
    if not url:
        logger.warning(REPOSITORY_UNSET, type="course", subtype="repository")


REPOSITORY_UNSET = ("the repository's address is unset (`repository: url:` in _config.yml is empty): the site "
                    "shows no repository button, and the exercise boxes give the download and the commands only")


def course_root(app: Sphinx) -> Path:
    """The course's repository: the Sphinx project's own folder, or for the Chinese edition (rooted at zh/) the
    folder above it (`course_root`, relative to the project)."""
    return (Path(app.srcdir) / app.config.course_root).resolve()


def chinese(app: Sphinx) -> bool:
    return str(app.config.language or "").startswith("zh")


def exercise_pages(app: Sphinx) -> dict[str, list[str]]:
    """page (docname) -> the released notebooks it sends the reader to, as paths from the course's root."""
    root = course_root(app)

    def release(c) -> str:  # the Chinese edition sends its readers to the Chinese release
        notebook = c.zh_release if chinese(app) and c.zh_release.is_file() else c.release
        return notebook.relative_to(root).as_posix()

    pages = {c.toc_entry: [release(c)] for c in chapters(root)}
    by_assignment = {c.assignment: release(c) for c in chapters(root)}
    for page, assignments in (app.config.course_exercise_pages or {}).items():
        unknown = [a for a in assignments if a not in by_assignment]
        if unknown:
            raise ExtensionError(f"course_exercise_pages[{page!r}] names assignments that do not exist: {unknown}")
        pages[page] = [by_assignment[a] for a in assignments]
    return pages


def _download(docname: str, notebook: str, up: str = "") -> addnodes.download_reference:
    """A download of the notebook (a path from the course's root; ``up`` leads there from the project's)."""
    link = addnodes.download_reference(
        "", "", refdoc=docname, reftarget="/" + up + notebook, refexplicit=True, refdomain="", reftype="download",
    )
    link += nodes.literal("", PurePosixPath(notebook).name)
    return link


def _paragraph(*parts: nodes.Node | str) -> nodes.paragraph:
    para = nodes.paragraph()
    for part in parts:
        para += nodes.Text(part) if isinstance(part, str) else part
    return para


#: the exercise box's words in each edition; a list is the sentence's pieces around what the box puts in
BOX_TEXT = {
    "en": {
        "one": "The exercise", "several": "The exercises", "comma": ", ",
        "own": ["Download the notebook ", ", or find it in the repository as ", "."],
        "parts": ["This page has no exercise of its own: the model is built from the parts you write in ", "."],
        "setup": [", run ", " once, and open the notebook in Jupyter (", "). To check a whole notebook the way it is graded:"],
        "clone": "Its tests need the course's code: clone ",
        "copy": "Its tests need the course's code: in a copy of the course's repository",
    },
    "zh": {
        "one": "练习", "several": "练习", "comma": "、",
        "own": ["下载练习笔记本 ", "，或在仓库中找到它：", "。"],
        "parts": ["本页没有自己的练习：这里的模型由你在这些笔记本中写出的部件组装而成：", "。"],
        "setup": ["，运行一次 ", "，再用 Jupyter 打开笔记本（", "）。要像评分时那样检查整本笔记本："],
        "clone": "练习的测试需要课程的代码：克隆 ",
        "copy": "练习的测试需要课程的代码：在课程仓库的副本中",
    },
}


def exercise_box(docname: str, notebooks: list[str], repository: str, language: str = "en",
                 up: str = "") -> nodes.admonition:
    words = BOX_TEXT[language]
    box = nodes.admonition(classes=["exercise-box"])
    own = len(notebooks) == 1
    box += nodes.title("", words["one"] if own else words["several"])
    links: list[nodes.Node | str] = []
    for i, notebook in enumerate(notebooks):
        links += [words["comma"] if i else "", _download(docname, notebook, up)]
    if own:
        before, middle, after = words["own"]
        box += _paragraph(before, *links, middle, nodes.literal("", notebook), after)
    else:
        before, after = words["parts"]
        box += _paragraph(before, *links, after)
    run, open_it, check = words["setup"]
    setup = [run, nodes.literal("", "make setup"), open_it,
             nodes.literal("", ".venv/bin/jupyter lab " + notebooks[0]), check]
    if repository:
        box += _paragraph(words["clone"], nodes.reference("", repository, refuri=repository, internal=False), *setup)
    else:
        box += _paragraph(words["copy"], *setup)
    commands = "\n".join(f".venv/bin/python -m autograder check {notebook}" for notebook in notebooks)
    box += nodes.literal_block(commands, commands, language="bash")
    return box


SENTENCE_END = re.compile(r"[.!?。！？][)\]\"'”’*_）」]*$")  # English or Chinese


def box_position(section: nodes.section) -> int:
    """Where a page's exercise box goes among its first section's children.

    After the first paragraph that ends a sentence, so that the page still starts by saying what
    it is about and the box never cuts a sentence off from the formula or list that completes
    it; under the title when no such paragraph comes before the first subsection.
    """
    for index, child in enumerate(section.children[1:], start=1):
        if isinstance(child, nodes.section):
            break
        if isinstance(child, nodes.paragraph) and SENTENCE_END.search(child.astext().rstrip()):
            return index + 1
    return 1


def insert_exercise_box(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    notebooks = exercise_pages(app).get(docname)
    if not notebooks:
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        raise ExtensionError(f"{docname} has no title to put its exercise box under")
    up = os.path.relpath(course_root(app), app.srcdir)
    up = "" if up == "." else up + "/"
    section.insert(box_position(section), exercise_box(docname, notebooks, repository_url(app.config),
                                                       "zh" if chinese(app) else "en", up))


# ---------------------------------------------------------------- the other edition of each page


def twin_link(app: Sphinx, docname: str) -> str | None:
    """The address of a page's twin in the other edition, from the page; None where it has none."""
    depth = "../" * docname.count("/")
    if chinese(app):
        return f"../{depth}{docname}.html"
    return f"{depth}{ZH}/{docname}.html" if zh_twin(app.srcdir, docname).is_file() else None


def insert_language_switch(app: Sphinx, doctree: nodes.document) -> None:
    """Under each page's title, a link to the same page in the other language."""
    docname = app.env.docname
    target = twin_link(app, docname)
    section = next(iter(doctree.findall(nodes.section)), None)
    if target is None or section is None:
        return
    label, language = ("English", "en") if chinese(app) else ("中文版", "zh-CN")
    switch = nodes.paragraph(classes=["language-switch"])
    switch += nodes.raw("", f'<a class="language-switch-link" href="{target}" hreflang="{language}" lang="{language}">'
                            f'{label}</a>', format="html")
    section.insert(1, switch)


# ---------------------------------------------------------------- what a search finds

_GLOSSARY_ENTRY = re.compile(r"^(?P<term>\S[^\n]*)\n(?P<body>(?:[ \t]+\S[^\n]*\n?)+)", re.M)
_CHINESE_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
_EXPLAINED_IN = re.compile(r"Explained in \{doc\}`[^`<]*<([^>`]+)>`")
_HYPHENATED = re.compile(r"\b[A-Za-z]+(?:-[A-Za-z]+)+\b")
_BRITISH = re.compile(r"\b([A-Za-z]{3,})is(e|es|ed|ing|ation|ations)\b")


def spelling_variants(text: str) -> set[str]:
    """Words a reader may type for words of the text: "warmup" for "warm-up", "normalization" for
    "normalisation". The index splits a hyphenated word in two, and its stemmer does not join the
    British and American spellings, so without them such a search finds nothing."""
    joined = {word.replace("-", "").lower() for word in _HYPHENATED.findall(text)}
    american = {f"{base}iz{ending}".lower() for base, ending in _BRITISH.findall(text)
                if f"{base}ise".lower() not in _ISE_WORDS}
    return joined | american


# Words spelt -ise on both sides of the Atlantic.
_ISE_WORDS = {"advise", "comprise", "compromise", "concise", "devise", "exercise", "expertise", "likewise",
              "noise", "otherwise", "precise", "premise", "promise", "revise", "surprise", "supervise", "wise"}


def glossary_keywords(glossary: str) -> dict[str, set[str]]:
    """page -> the Chinese names of the glossary's terms that it explains, each run of characters
    a keyword of its own: the glossary gives them, the chapter that explains a term never does."""
    keywords: dict[str, set[str]] = {}
    block = glossary[glossary.index("{glossary}"):]
    for entry in _GLOSSARY_ENTRY.finditer(block):
        body = entry["body"]
        chapter = _EXPLAINED_IN.search(" ".join(body.split()))
        name = re.search(r"\*\*([^*]+)\*\*", body)
        if chapter and name:
            page = str(PurePosixPath(GLOSSARY).parent / chapter.group(1))
            runs = {run.removeprefix("又称") for run in _CHINESE_RUN.findall(name.group(1))}
            keywords.setdefault(page, set()).update(r for r in runs if r)
    return keywords


def add_search_keywords(app: Sphinx, doctree: nodes.document) -> None:
    """Give each page, as `<meta name="keywords">` (Sphinx's search indexes those), the spellings
    of its words that a reader may type instead and the Chinese names of the terms it explains."""
    glossary = Path(app.srcdir) / f"{GLOSSARY}.md"
    by_page = glossary_keywords(glossary.read_text(encoding="utf-8")) if glossary.is_file() else {}
    words = spelling_variants(doctree.astext()) | by_page.get(app.env.docname, set())
    if words:
        doctree.insert(0, nodes.meta("", name="keywords", content=", ".join(sorted(words))))


# ---------------------------------------------------------------- a page's run found by its code


def find_runs_by_code() -> None:
    """Let the execution cache know a page's run by its code cells and their tags alone, and give back each
    cell with the page's own options: a Chinese twin, whose figure captions are Chinese, then shows the run
    of its English page instead of executing the same code again.

    jupyter-cache hashes every option of a code cell into a page's key (captions included) and, on a match,
    replaces each cell by the cached one, options and all. Its two defaults are changed here, in the build
    that loads this extension; tags stay in the key since some (raises-exception, skip-execution) change
    what runs.
    """
    from jupyter_cache.cache.main import JupyterCacheBase

    if getattr(JupyterCacheBase, "_course_by_code", False):
        return
    hashed, merged = JupyterCacheBase.create_hashed_notebook, JupyterCacheBase.merge_match_into_notebook

    def create_hashed_notebook(self, nb, nb_metadata=("kernelspec",), cell_metadata=("tags",)):
        return hashed(self, nb, nb_metadata, cell_metadata)

    def merge_match_into_notebook(self, nb, nb_meta=("kernelspec", "language_info", "widgets"), cell_meta=()):
        return merged(self, nb, nb_meta, cell_meta)

    JupyterCacheBase.create_hashed_notebook = create_hashed_notebook
    JupyterCacheBase.merge_match_into_notebook = merge_match_into_notebook
    JupyterCacheBase._course_by_code = True


# ---------------------------------------------------------------- re-execution when the code changes


def source_digest(root: Path, folders: list[str]) -> dict[str, str]:
    """SHA-256 of every file under the given folders (or of a file named alone), by path: what the executed
    pages depend on."""
    digest = {}
    for folder in folders:
        base = root / folder
        if not (base.is_dir() or base.is_file()):
            raise ExtensionError(f"course_execution_inputs names {folder!r}, which is not a folder or file of {root}")
        for path in sorted(base.rglob("*")) if base.is_dir() else [base]:
            if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".pyc"):
                digest[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def _cache(app: Sphinx) -> Path | None:
    config = getattr(app.env, "mystnb_config", None)
    if config is None or config.execution_mode != "cache":
        return None
    return Path(config.execution_cache_path)


def check_sources(app: Sphinx) -> None:
    cache = _cache(app)
    if cache is None:
        return
    app.env.course_sources = source_digest(course_root(app), app.config.course_execution_inputs)
    stamp = cache / STAMP
    old = json.loads(stamp.read_text()) if stamp.is_file() else None
    app.env.course_sources_changed = old != app.env.course_sources
    if app.env.course_sources_changed and cache.exists():
        changed = sorted(set(old or {}) ^ set(app.env.course_sources)
                         | {k for k in old or {} if old[k] != app.env.course_sources.get(k)})
        logger.info(f"the course's code changed ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}): "
                    f"emptying the execution cache {cache}")
        shutil.rmtree(cache)


def outdated_pages(app: Sphinx, env, added, changed, removed) -> list[str]:
    if not getattr(env, "course_sources_changed", False):
        return []
    # Every page that runs code: a page without code cells is cheap to read again anyway.
    return sorted(env.found_docs - set(added) - set(changed) - set(removed))


def write_stamp(app: Sphinx, exc: Exception | None) -> None:
    # Only after a build that succeeded: a failed one leaves the old stamp, so the next build
    # empties the cache and reads every page again rather than trusting a half-built site.
    cache = _cache(app)
    if exc is None and cache is not None and getattr(app.env, "course_sources", None) is not None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / STAMP).write_text(json.dumps(app.env.course_sources, indent=0, sort_keys=True))


# ---------------------------------------------------------------- each inline script once


def drop_duplicate_scripts(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def write_index(app: Sphinx, exc: Exception | None) -> None:
    """The site's front door: sphinx-external-toc's bare redirect has no icon, so the browser asks
    for /favicon.ico, which does not exist. This one runs first, and that redirect is then not written."""
    if exc is not None or app.builder.format != "html" or app.config.root_doc == "index":
        return
    target = f"{app.config.root_doc}.html"
    title = html.escape(app.config.html_title or app.config.project)
    icon = f'<link rel="icon" href="_static/{Path(app.config.html_favicon).name}">' if app.config.html_favicon else ""
    (Path(app.outdir) / "index.html").write_text(
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>{icon}'
        f'<meta http-equiv="Refresh" content="0; url={target}"></head>\n'
        f'<body><p><a href="{target}">{title}</a></p></body></html>\n',
        encoding="utf-8",
    )


def add_static_path(app: Sphinx, config) -> None:
    config.html_static_path.append(str(SITE_STATIC))


def setup(app: Sphinx) -> dict[str, Any]:
    find_runs_by_code()
    app.setup_extension("sphinx.ext.mathjax")
    app.setup_extension("myst_nb")
    app.add_config_value("course_execution_inputs", [], "env", [list])
    app.add_config_value("course_exercise_pages", {}, "env", [dict])
    app.add_config_value("course_root", ".", "env", [str])
    # MathJax on every page, not only pages with equations: search results show formulas too.
    app.set_html_assets_policy("always")
    app.connect("config-inited", add_static_path)
    app.connect("config-inited", configure_repository)
    app.add_js_file("search-math.js", defer="defer")
    app.add_js_file("attention-widget.js", defer="defer")
    app.add_js_file("fit-math.js", defer="defer")  # a display equation too wide for a phone is scaled to fit
    app.add_js_file("open-figure.js", defer="defer")  # a tap on a figure opens it at full size
    app.connect("builder-inited", check_mathjax)
    app.connect("builder-inited", check_sources, priority=900)  # after myst-nb has set its cache path
    app.connect("env-get-outdated", outdated_pages)
    app.connect("doctree-read", insert_exercise_box, priority=400)  # before Sphinx collects download links
    app.connect("doctree-read", add_search_keywords)
    app.connect("doctree-read", insert_language_switch, priority=450)  # after the exercise box: above it
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)  # after MathJax adds its scripts
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", write_stamp)
    app.connect("build-finished", write_index, priority=400)  # before sphinx-external-toc's redirect
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
