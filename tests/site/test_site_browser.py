"""The website as a reader meets it: every page opened in headless Chromium, with no network.

The site built by the `site` fixture is served on 127.0.0.1; the browser reaches nothing else
(every other address goes to a proxy that does not exist, and every request the pages make is
logged and checked). Each page is opened at phone width (390 px) and saved as a screenshot in
_build/screenshots/, beside the published _build/html/ and not part of it.

Needs the browser of tests/browser.py; without it these tests are skipped, saying so.
"""
from __future__ import annotations

import functools
import json
import math
import re
import threading
import time
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urldefrag, urlparse

import pytest

from course.layout import BUILD, REPO, ZH, toc_pages
from tests.browser import NEEDS_BROWSER, headless_chromium

PHONE, DESKTOP = 390, 1280
SCREENSHOTS = REPO / BUILD / "screenshots"

# Checked before the site is built, so that a machine without a browser skips at once.
pytestmark = NEEDS_BROWSER


class _QuietHandler(SimpleHTTPRequestHandler):
    missing: list[str]

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def send_error(self, code, message=None, explain=None):
        self.missing.append(f"{code} {self.path}")
        super().send_error(code, message, explain)


@pytest.fixture(scope="module")
def server(site):
    handler = type("Handler", (_QuietHandler,), {"missing": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler.missing
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser(server):
    driver = headless_chromium(log_requests=True)
    yield driver
    driver.quit()


def _pages(site: Path) -> list[str]:
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if "_static" not in p.parts)


def _wait_for_mathjax(driver) -> None:
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) { done(false); return; }"
        "MathJax.startup.promise.then(() => done(true), () => done(true));"
    )


def _requests(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


#: Each display equation: the width its formula needs, the width of its box, the scale fit-math.js
#: drew it at to fit (1 where it fits at its own size), and its text as the assistive MathML gives it.
EQUATIONS = r"""[...document.querySelectorAll('main mjx-container[display="true"]')].map(c => {
      const math = c.querySelector('mjx-math'), text = c.querySelector('mjx-assistive-mml');
      return {need: math ? math.getBoundingClientRect().width : 0, room: c.clientWidth,
              scale: parseFloat(c.dataset.courseScale || '1'), text: text ? text.textContent.trim().slice(0, 60) : ''}; })"""

PAGE_STATE = r"""
return {
  math: document.querySelectorAll('span.math, div.math').length,
  untypeset: [...document.querySelectorAll('span.math, div.math')]
      .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.trim().slice(0, 60)),
  errors: [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 60)),
  width: document.documentElement.scrollWidth,
  wide: [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
      && getComputedStyle(e).position !== 'fixed' && !e.closest('.pst-scrollable-table-container, pre, .highlight, '
      + '.output, .cell_output, mjx-container, .table-wrapper, .bd-sidebar-primary'))
      .slice(0, 3).map(e => e.tagName.toLowerCase() + '.' + [...e.classList].join('.') + ' "'
      + e.textContent.trim().slice(0, 40) + '"'),
  links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  images: [...document.querySelectorAll('img')].map(i => [i.src, i.complete && i.naturalWidth > 0]),
  exercise: [...document.querySelectorAll('.exercise-box a.download')].map(a => [a.href, a.offsetParent !== null]),
  // a Markdown table that was never made one: its bars and dashes in a paragraph
  pipes: [...document.querySelectorAll('main p, main li')].map(e => {
      const c = e.cloneNode(true); c.querySelectorAll('code, mjx-container, .math').forEach(x => x.remove());
      return c.textContent; }).filter(t => /\|\s*:?[-–—]+:?\s*\|/.test(t))  // the |---|---:| row
      .map(t => t.trim().slice(0, 80)),
  figures: [...document.querySelectorAll('main figure')].filter(f => f.querySelector('img')).map(f => {
      const img = f.querySelector('img'), box = img.getBoundingClientRect(), link = img.closest('a');
      return {id: f.id, natural: img.naturalWidth, shown: box.width, right: box.right, src: img.src,
              opens: !!link && link.href === img.src}; }),
  equations: EQUATIONS,
  // phonemes and other symbols in a table cell: each one line box
  symbols: [...document.querySelectorAll('main td code.symbols')].filter(c => c.getClientRects().length > 1)
      .map(c => c.textContent.slice(0, 40)),
  // what scrolls sideways must look scrollable: the scroll shadows of course.css
  uncued: [...document.querySelectorAll('main *')].filter(e => e.scrollWidth > e.clientWidth + 1
      && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)
      && !getComputedStyle(e).backgroundImage.includes('radial-gradient'))
      .slice(0, 3).map(e => e.tagName.toLowerCase() + '.' + [...e.classList].join('.') + ' "'
      + e.textContent.trim().slice(0, 40) + '"'),
  // a table whose last columns are cut off without a way to scroll to them
  clipped: [...document.querySelectorAll('main table')].filter(t => {
      let box = t; while (box && box !== document.body && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX))
        box = box.parentElement;
      const edge = box && box !== document.body ? Infinity : window.innerWidth;
      return [...t.querySelectorAll('th, td')].some(c => c.getBoundingClientRect().right > edge + 1); })
      .map(t => t.textContent.trim().slice(0, 40)),
};
""".replace("EQUATIONS", EQUATIONS)


@pytest.fixture(scope="module")
def visits(site, server, browser):
    """Every page opened once at phone width: what it shows, logs and requests."""
    base, _ = server
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(PHONE, 900)
    seen = {}
    for page in _pages(site):
        browser.get_log("browser"), browser.get_log("performance")  # what the previous page left
        browser.execute_script("try { localStorage.clear() } catch (e) {}")  # every page is a first visit
        browser.get(f"{base}/{page}")
        _wait_for_mathjax(browser)
        time.sleep(0.3)  # scripts deferred behind MathJax
        state = browser.execute_script(PAGE_STATE)
        state["console"] = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        state["requests"] = _requests(browser)
        state["viewport"] = browser.execute_script("return window.innerWidth")
        browser.save_screenshot(str(SCREENSHOTS / (page.replace("/", "__").removesuffix(".html") + f"-{PHONE}.png")))
        seen[page] = state
    return seen


def test_every_math_element_is_typeset_without_error(visits):
    problems = [f"{page}: not typeset {s['untypeset'][:3]}" for page, s in visits.items() if s["untypeset"]]
    problems += [f"{page}: MathJax error {s['errors'][:3]}" for page, s in visits.items() if s["errors"]]
    assert sum(s["math"] for s in visits.values()) > 100, "the pages show almost no math: is MathJax configured?"
    assert not problems, "\n".join(problems)


def test_no_page_reaches_the_network_or_logs_an_error(visits, server):
    base, missing = server
    outside = {page: [u for u in s["requests"] if not u.startswith((base + "/", "data:", "blob:", "about:"))]
               for page, s in visits.items()}
    problems = [f"{page} requests {urls[:3]}" for page, urls in outside.items() if urls]
    problems += [f"{page}: {message}" for page, s in visits.items() for message in s["console"]]
    problems += [f"the server answered {m}" for m in missing]
    assert not problems, "\n".join(problems)


def _fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read()
    except OSError:
        return None


def test_every_internal_link_and_image_resolves(visits, server):
    base, _ = server
    bodies: dict[str, bytes | None] = {}
    broken = []
    for page, state in visits.items():
        images = [src for src, loaded in state["images"] if not loaded]
        broken += [f"{page}: image {src} does not load" for src in images]
        for href in state["links"]:
            if not href.startswith(base + "/"):
                continue
            url, fragment = urldefrag(href)
            if url not in bodies:
                bodies[url] = _fetch(url)
            body = bodies[url]
            if body is None:
                broken.append(f"{page} -> {href}: not found")
            elif fragment and urlparse(url).path.endswith(".html"):
                if not re.search(rf'\b(id|name)="{re.escape(fragment)}"', body.decode("utf-8", "replace")):
                    broken.append(f"{page} -> {href}: no element with that id")
    assert not broken, "\n".join(broken[:30])


def test_no_page_scrolls_sideways_on_a_phone(visits):
    wide = [f"{page}: {s['width']} px wide; {s['wide']}" for page, s in visits.items() if s["width"] > s["viewport"]]
    assert not wide, f"pages wider than the {PHONE} px screen:\n" + "\n".join(wide)


def test_no_page_shows_a_markdown_table_as_text(visits):
    """myst-nb renders `display(Markdown(...))` without tables: its bars land in a paragraph."""
    raw = [f"{page}: {text!r}" for page, s in visits.items() for text in s["pipes"]]
    assert not raw, "pipe tables shown as text (build them as HTML):\n" + "\n".join(raw[:10])


#: At 390 px a figure with several panels keeps at least this share of its drawn size, so that
#: its text (drawn at 8 to 11 pt) stays readable: drawn at most 5 in (460 px) wide at 92 dpi.
PANELS_MIN_SCALE = 0.74


def test_figures_read_on_a_phone(visits):
    from tests.site.test_figures import multi_panel_figures

    panels = multi_panel_figures()
    assert len(panels) >= 20, panels
    found, problems = set(), []
    for page, state in visits.items():
        for figure in state["figures"]:
            if figure["right"] > state["viewport"] + 1:
                problems.append(f"{page} {figure['id']}: runs off the screen")
            if figure["id"] in panels:
                found.add(figure["id"])
                scale = figure["shown"] / figure["natural"]
                if scale < PANELS_MIN_SCALE:
                    problems.append(f"{page} {figure['id']}: {figure['natural']} px wide, shown at {scale:.0%} "
                                    f"in a {PHONE} px window (stack its panels or draw it narrower)")
    assert found == set(panels), f"figures not found on the site: {sorted(set(panels) - found)}"
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def desktop_equations(site, server, browser):
    """Every English page's display equations as a 1280 px window shows them. A Chinese twin's display
    equations are its page's (tests/site/test_editions.py), in a column of the same width, so they are
    measured on a phone only, where their pages' visits already measure them."""
    base, _ = server
    browser.set_window_size(DESKTOP, 900)
    seen = {}
    try:
        for page in [p for p in _pages(site) if not p.startswith(f"{ZH}/")]:
            browser.get(f"{base}/{page}")
            _wait_for_mathjax(browser)
            time.sleep(0.2)
            seen[page] = browser.execute_script(f"return {EQUATIONS}")
    finally:
        browser.set_window_size(PHONE, 900)
    return seen


def _too_wide(equation: dict) -> bool:
    return equation["need"] > equation["room"] + 1


def test_every_display_equation_fits_a_desktop_column_at_its_own_size(desktop_equations):
    problems = [f"{page}: {e['need']:.0f} px in a {e['room']} px column at scale {e['scale']}: {e['text']!r}"
                for page, found in desktop_equations.items() for e in found if _too_wide(e) or e["scale"] < 1]
    assert sum(len(found) for found in desktop_equations.values()) > 50, "the pages show almost no equations"
    assert not problems, f"display equations too wide for a {DESKTOP} px window (break them at an operator):\n" + \
        "\n".join(problems)


def test_every_display_equation_fits_a_phone(visits):
    """fit-math.js scales what is too wide for a phone, down to its MIN_SCALE; what needs less is broken."""
    problems = [f"{page}: {e['need']:.0f} px in a {e['room']} px column at scale {e['scale']}: {e['text']!r}"
                for page, state in visits.items() for e in state["equations"] if _too_wide(e)]
    assert any(e["scale"] < 1 for state in visits.values() for e in state["equations"]), "nothing was scaled"
    assert not problems, f"display equations too wide for a {PHONE} px phone even scaled (break them):\n" + \
        "\n".join(problems)


#: The smallest text a figure may show, in CSS pixels: on a phone's screen, or, for a figure shrunk
#: below it there, at full size, which a tap on the figure opens.
MIN_TEXT_PX = 8


def test_figure_text_reads_on_a_phone_and_no_labels_overlap(visits, site):
    """The size of a figure's smallest text and its overlapping texts are measured where it is drawn
    (course/tools/page_figures.py writes them into the image); the scale it is shown at, here."""
    from course.tools.page_figures import OVERLAPS, TEXT_PX, png_text

    measured, by_tap, problems = 0, 0, []
    for page, state in visits.items():
        for figure in state["figures"]:
            if not figure["opens"]:
                problems.append(f"{page} {figure['id']}: a tap does not open it at full size")
            found = png_text((site / urlparse(figure["src"]).path.lstrip("/")).read_bytes())
            if TEXT_PX not in found:
                continue  # an image that was not drawn by a page's code, or a figure without text
            measured += 1
            drawn = float(found[TEXT_PX])
            on_screen = drawn * figure["shown"] / figure["natural"]
            if drawn < MIN_TEXT_PX:
                problems.append(f"{page} {figure['id']}: its smallest text is {drawn:.1f} px even at full size")
            by_tap += on_screen < MIN_TEXT_PX
            overlapping = json.loads(found.get(OVERLAPS, "[]"))
            if overlapping:
                problems.append(f"{page} {figure['id']}: texts overlap: {overlapping[:3]}")
    assert measured > 40, f"only {measured} figures carry their text's size: does every page call page_figures()?"
    assert not problems, "\n".join(problems)
    print(f"{by_tap} of {measured} figures show text under {MIN_TEXT_PX} px on a {PHONE} px phone and are read "
          "at full size, a tap away")


def test_what_is_too_wide_for_a_phone_scrolls_visibly(visits):
    problems = [f"{page}: scrolls without a cue: {s['uncued']}" for page, s in visits.items() if s["uncued"]]
    problems += [f"{page}: a table's columns are cut off: {s['clipped']}" for page, s in visits.items() if s["clipped"]]
    problems += [f"{page}: symbols wrapped over several lines: {s['symbols'][:3]}"
                 for page, s in visits.items() if s["symbols"]]
    assert not problems, "\n".join(problems)
    assert sum(len(s["figures"]) for s in visits.values()) > 40, "the pages show almost no figures"


def test_the_exercise_box_shows_its_whole_command_on_a_desktop(browser, server):
    base, _ = server
    browser.set_window_size(DESKTOP, 900)
    clipped = []
    for page in [p for p in toc_pages() if p.startswith("book/ch") or p == "book/transformer"]:
        browser.get(f"{base}/{page}.html")
        clipped += [f"{page}: {text!r}" for text in browser.execute_script(
            "return [...document.querySelectorAll('.exercise-box pre')]"
            ".filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.textContent.trim())")]
    browser.set_window_size(PHONE, 900)
    assert not clipped, f"the check command is cut off at {DESKTOP} px:\n" + "\n".join(clipped)


def test_the_chinese_font_is_the_sites_own(browser, server):
    """The glossary's Chinese is drawn with the font the site ships, whatever the reader has."""
    base, _ = server
    browser.get(f"{base}/book/glossary.html")
    loaded = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "document.fonts.load('16px \"Course CJK\"', '位置编码').then(f => done(f.length), () => done(-1));")
    assert loaded >= 1, "the page does not load the Course CJK font for its Chinese"
    family = browser.execute_script("return getComputedStyle(document.querySelector('main dd')).fontFamily")
    assert family.startswith('"Course CJK"'), family


def test_the_chinese_words_inside_equations_are_drawn_with_the_sites_font(browser, server):
    """MathJax's fonts have no Chinese: a \\text{} of the Chinese edition falls back to the site's font, not to
    whatever serif the reader has (on a machine without a Chinese font, boxes)."""
    base, _ = server
    browser.get(f"{base}/zh/book/ch02_attention.html")
    _wait_for_mathjax(browser)
    families = browser.execute_script(
        "return [...document.querySelectorAll('mjx-container mjx-utext')]"
        ".filter(e => /[\\u4e00-\\u9fff]/.test(e.textContent)).map(e => getComputedStyle(e).fontFamily)")
    assert families, "no Chinese inside the page's equations"
    assert all(f.startswith('"Course CJK"') for f in families), families


def test_every_chapter_page_links_its_exercise(visits, server):
    base, _ = server
    chapters = [p for p in toc_pages() if p.startswith("book/ch") or p == "book/transformer"]
    assert chapters
    for page in chapters:
        links = visits[f"{page}.html"]["exercise"]
        assert links, f"{page} shows no link to its exercise notebook"
        for href, shown in links:
            assert shown, f"{page}'s exercise link is hidden"
            notebook = _fetch(href)
            assert notebook and json.loads(notebook)["cells"], f"{page}'s exercise link {href} does not give a notebook"


def _click_visible(browser, selector: str) -> None:
    from selenium.webdriver.common.by import By

    buttons = [b for b in browser.find_elements(By.CSS_SELECTOR, selector) if b.is_displayed()]
    assert buttons, f"no visible {selector} button"
    buttons[0].click()
    time.sleep(0.5)


def test_the_navigation_opens_on_a_click(browser, server):
    base, _ = server
    page = f"{base}/{toc_pages()[2]}.html"
    browser.set_window_size(PHONE, 900)
    dialogs = {".primary-toggle": "pst-primary-sidebar-modal", ".secondary-toggle": "pst-secondary-sidebar-modal"}
    for toggle, dialog in dialogs.items():
        browser.get(page)
        _click_visible(browser, toggle)
        assert browser.execute_script(f"return document.getElementById('{dialog}')?.open === true"), \
            f"clicking {toggle} at {PHONE} px opens no dialog"
    browser.get(page)
    _click_visible(browser, ".primary-toggle")
    chapters = browser.execute_script(
        "return [...document.querySelectorAll('#pst-primary-sidebar-modal nav a')].filter(a => a.offsetParent).length")
    assert chapters >= len(toc_pages()) - 1, f"the navigation lists {chapters} pages"
    # On a desktop the same button folds the chapter list away and back.
    browser.set_window_size(DESKTOP, 900)
    browser.get(page)
    # The chapter list slides off the left edge of the window when it is folded away.
    on_screen = "return document.querySelector('.bd-sidebar-primary').getBoundingClientRect().right > 1"
    before = browser.execute_script(on_screen)
    _click_visible(browser, ".primary-toggle")
    time.sleep(1)  # the slide
    opened = browser.execute_script("return document.getElementById('pst-primary-sidebar-modal')?.open === true")
    assert opened or browser.execute_script(on_screen) != before, f"clicking the sidebar button at {DESKTOP} px changes nothing"
    browser.save_screenshot(str(SCREENSHOTS / f"navigation-{DESKTOP}.png"))


def _search(browser, base: str, query: str, edition: str = "") -> dict:
    browser.get(f"{base}/{edition}search.html?q={quote(query)}")
    deadline, state = time.time() + 60, {}
    while time.time() < deadline:
        state = browser.execute_script(
            "const r = document.getElementById('search-results');"
            # the summary Sphinx writes when the search is done, in English or in the Chinese edition's words
            "return {done: !!r && /finished|did not match|搜索完成|没有匹配/i.test("
            "r.querySelector('p.search-summary')?.textContent || ''),"
            " links: [...document.querySelectorAll('#search-results ul.search > li > a')].map(a => a.href),"
            " summaries: document.querySelectorAll('#search-results p.context').length,"
            " text: r ? r.innerText : '', errors: document.querySelectorAll('#search-results mjx-merror').length}")
        raw = re.findall(r"\\[A-Za-z]+|\\[()\[\]]", state["text"])
        if state["done"] and state["summaries"] >= len(state["links"]) and not raw:
            break
        time.sleep(0.5)
    return state


def test_search_finds_the_attention_chapter_and_typesets_its_results(browser, server):
    base, _ = server
    browser.set_window_size(PHONE, 900)
    for query, page in [("softmax", "ch02_attention.html"), ("divide", "ch02_attention.html")]:
        state = _search(browser, base, query)
        assert any(page in link for link in state["links"]), f"searching {query!r} does not find {page}: {state['links'][:5]}"
        raw = re.findall(r".{0,30}(?:\\[A-Za-z]+|\\[()\[\]]).{0,30}", state["text"])
        assert not raw, f"searching {query!r} shows raw TeX: {raw[:3]}"
        assert not state["errors"], f"searching {query!r} shows MathJax errors"
        browser.save_screenshot(str(SCREENSHOTS / f"search-{query}-{PHONE}.png"))


#: What a learner would type, and the page that explains it: English as the site writes it and as
#: a reader may spell it, and the Chinese names the glossary gives.
QUERIES = [
    ("warmup", "ch08_capstone"), ("warmup", "ch04_encoder"), ("warm-up", "ch08_capstone"), ("learning rate", "ch08_capstone"),
    ("label smoothing", "ch08_capstone"), ("beam search", "ch08_capstone"), ("perplexity", "ch08_capstone"),
    ("positional encoding", "ch06_positional"), ("sinusoidal", "ch06_positional"),
    ("layer normalization", "ch04_encoder"), ("layer normalisation", "ch04_encoder"), ("feedforward", "ch04_encoder"),
    ("residual", "ch04_encoder"), ("multihead", "ch03_multihead"), ("multi-head attention", "ch03_multihead"),
    ("causal mask", "ch05_decoder"), ("cross-attention", "ch05_decoder"), ("crossattention", "ch05_decoder"),
    ("KV cache", "ch07_bert_gpt"), ("BERT", "ch07_bert_gpt"), ("byte-pair encoding", "ch07_bert_gpt"),
    ("scaled dot-product attention", "ch02_attention"), ("vanishing gradient", "ch01_prerequisites"),
    ("位置编码", "ch06_positional"), ("注意力", "ch02_attention"), ("多头注意力", "ch03_multihead"),
    ("层归一化", "ch04_encoder"), ("残差连接", "ch04_encoder"), ("掩码自注意力", "ch05_decoder"),
    ("交叉注意力", "ch05_decoder"), ("前瞻掩码", "ch05_decoder"), ("标签平滑", "ch08_capstone"),
    ("束搜索", "ch08_capstone"), ("学习率预热", "ch08_capstone"), ("键值缓存", "ch07_bert_gpt"),
    ("预训练", "ch07_bert_gpt"), ("梯度消失", "ch01_prerequisites"),
]


def test_a_learners_searches_find_the_chapter_that_explains_them(browser, server):
    base, _ = server
    browser.set_window_size(PHONE, 900)
    missed = []
    for query, page in QUERIES:
        links = _search(browser, base, query)["links"]
        if not any(f"{page}.html" in link for link in links):
            missed.append(f"{query!r} finds {[urlparse(link).path.rsplit('/', 1)[-1] for link in links][:6]}, not {page}")
    assert not missed, "\n".join(missed)


WIDGET_STATE = r"""
const w = document.querySelector('.attention-widget.aw-ready');
if (!w) return null;
const texts = [...w.querySelectorAll('*')].filter(e => e.offsetParent !== null
    && [...e.childNodes].some(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim()));
return {
  keys: JSON.parse(w.dataset.keys), values: JSON.parse(w.dataset.values),
  query: [...w.querySelectorAll('input.aw-query')].map(i => Number(i.value)),
  divisor: Number(w.querySelector('input.aw-divisor').value),
  weights: [...w.querySelectorAll('.aw-weight')].map(e => Number(e.textContent)),
  output: [...w.querySelectorAll('.aw-out')].map(e => Number(e.textContent)),
  unlabelled: [...w.querySelectorAll('input[type=range]')].filter(i => !i.labels.length
      || !i.labels[0].textContent.trim()).map(i => i.id),
  small: texts.filter(e => parseFloat(getComputedStyle(e).fontSize) < 12)
      .map(e => e.textContent.trim().slice(0, 20) + ' ' + getComputedStyle(e).fontSize),
  right: w.getBoundingClientRect().right, viewport: window.innerWidth,
  page: document.documentElement.scrollWidth,
};
"""

MOVE_SLIDER = r"""
const [selector, value] = arguments;
const input = document.querySelector('.attention-widget.aw-ready ' + selector);
input.value = value;
input.dispatchEvent(new Event('input'));
"""


def _attention(keys, values, query, divisor):
    """The softmax weights of q . k_j / divisor over the keys, and the weighted sum of the values."""
    scores = [sum(q * k for q, k in zip(query, key)) / divisor for key in keys]
    exps = [math.exp(s - max(scores)) for s in scores]
    weights = [e / sum(exps) for e in exps]
    return weights, [sum(w * v[i] for w, v in zip(weights, values)) for i in range(len(values[0]))]


def _widget_state(browser, moved: str) -> dict:
    state = browser.execute_script(WIDGET_STATE)
    assert state, "no attention widget was drawn: is attention-widget.js loaded, are its data attributes valid?"
    weights, output = _attention(state["keys"], state["values"], state["query"], state["divisor"])
    assert len(state["weights"]) == len(state["keys"]), f"{moved}: one weight per key expected: {state['weights']}"
    assert abs(sum(state["weights"]) - 1) <= 0.01, f"{moved}: the weights shown sum to {sum(state['weights'])}"
    assert all(abs(a - b) <= 0.01 for a, b in zip(state["weights"], weights)), (
        f"{moved}: the widget shows weights {state['weights']}; the softmax of q . k_j / {state['divisor']} "
        f"for q = {state['query']} is {[round(w, 3) for w in weights]}")
    assert len(state["output"]) == len(output) and all(abs(a - b) <= 0.01 for a, b in zip(state["output"], output)), (
        f"{moved}: the widget's output is {state['output']}, the weighted sum of the values {output}")
    return state


def check_attention_widget(browser) -> None:
    """The checks of the attention widget on the page the browser shows: on each move of a slider
    (by script, and by the keyboard) its weights redraw, sum to 1 and are the softmax of the scores
    computed here from its data attributes and sliders; its sliders are labelled, its text is at
    least 12 px, and at phone width it is no wider than the window. Also run on a standalone page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.set_window_size(DESKTOP, 900)
    state = _widget_state(browser, "as drawn")
    assert not state["unlabelled"], f"sliders without a label: {state['unlabelled']}"
    assert not state["small"], f"widget text under 12 px: {state['small'][:3]}"
    before = state["weights"]
    for selector, value in [(".aw-divisor", "0.5"), ('.aw-query[data-index="0"]', "-2")]:
        browser.execute_script(MOVE_SLIDER, selector, value)
        state = _widget_state(browser, f"{selector} set to {value}")
        assert max(abs(a - b) for a, b in zip(state["weights"], before)) > 0.05, \
            f"setting {selector} to {value} and dispatching 'input' did not redraw the weights: {before}"
        before = state["weights"]
    divisor = browser.find_element(By.CSS_SELECTOR, ".attention-widget.aw-ready .aw-divisor")
    divisor.send_keys(Keys.ARROW_RIGHT)  # a keyboard step (0.1) sharpens or flattens the weights a little
    state = _widget_state(browser, "the divisor moved by the keyboard")
    assert abs(state["divisor"] - 0.6) < 1e-6 and state["weights"] != before, "the divisor does not move by the keyboard"
    browser.set_window_size(PHONE, 900)
    state = _widget_state(browser, f"at {PHONE} px")
    assert state["right"] <= state["viewport"] + 1 and state["page"] <= state["viewport"], (
        f"at {PHONE} px the widget ends at {state['right']} px and the page is {state['page']} px wide")
    assert not state["small"], f"widget text under 12 px at {PHONE} px: {state['small'][:3]}"


#: The worked example's table: its weights, one row per key, and in its last row the output.
WALK_TABLE = r"""
for (const table of document.querySelectorAll('main table')) {
  const column = [...table.querySelectorAll('thead th')].map(th => th.textContent.trim()).indexOf('softmax weight');
  if (column < 0) continue;
  const rows = [...table.querySelectorAll('tbody tr')];
  return {weights: rows.slice(0, -1).map(tr => tr.children[column].textContent.trim()),
          output: rows[rows.length - 1].lastElementChild.textContent};
}
return null;
"""


def test_the_attention_widget_redraws_offline(browser, server):
    base, _ = server
    browser.set_window_size(DESKTOP, 900)
    browser.get_log("browser"), browser.get_log("performance")  # what the previous page left
    browser.get(f"{base}/book/ch02_attention.html")
    _wait_for_mathjax(browser)
    time.sleep(0.3)
    # The widget starts from the worked example: the weights and output of the table above it.
    walk = browser.execute_script(WALK_TABLE)
    assert walk, "the worked example's table (a column 'softmax weight') is not on the page"
    start = browser.execute_script(WIDGET_STATE)
    assert start, "no attention widget was drawn on the page"
    shown = {"weights": [float(w) for w in walk["weights"]],
             "output": [float(x) for x in re.findall(r"-?\d+\.\d+", walk["output"])]}
    for name in ("weights", "output"):
        assert shown[name] == pytest.approx(start[name], abs=0.0015), \
            f"the widget starts from {name} {start[name]}, the worked example shows {shown[name]}"
    check_attention_widget(browser)
    outside = [u for u in _requests(browser) if not u.startswith((base + "/", "data:", "blob:", "about:"))]
    assert not outside, f"the page with the widget reaches the network: {outside[:3]}"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / f"attention-widget-{PHONE}.png"))


def test_a_questions_answer_is_folded_until_the_reader_opens_it(browser, server):
    from selenium.webdriver.common.by import By

    base, _ = server
    browser.set_window_size(PHONE, 900)
    browser.get(f"{base}/book/ch04_encoder.html")
    time.sleep(0.5)  # sphinx-togglebutton folds the dropdowns once the page has loaded
    shown = "return [...arguments[0].children].slice(1).some(e => e.offsetParent !== null && e.offsetHeight > 0)"
    questions = browser.find_elements(By.CSS_SELECTOR, "section#check-yourself div.dropdown.admonition")
    assert 3 <= len(questions) <= 5, f"{len(questions)} questions at the end of chapter 4"
    first = questions[0]
    assert not browser.execute_script(shown, first), "an answer shows before the reader asks for it"
    # sphinx-togglebutton puts its button over the question's title: the reader's click lands on it
    toggle = first.find_element(By.CSS_SELECTOR, "button.toggle-button")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", toggle)
    time.sleep(0.3)
    toggle.click()
    time.sleep(0.5)
    assert browser.execute_script(shown, first), "clicking the question does not show its answer"


#: What a reader of the Chinese edition types, and the page that explains it.
ZH_QUERIES = [("注意力", "ch02_attention"), ("多头注意力", "ch03_multihead"), ("层归一化", "ch04_encoder"),
              ("位置编码", "ch06_positional"), ("束搜索", "ch08_capstone"), ("键值缓存", "ch07_bert_gpt"),
              ("分块注意力", "ch09_hardware"),
              ("专家", "ch10_one_block")]


def test_the_chinese_editions_search_finds_its_own_pages(browser, server):
    base, _ = server
    browser.set_window_size(PHONE, 900)
    missed = []
    for query, page in ZH_QUERIES:
        links = _search(browser, base, query, edition="zh/")["links"]
        if not any(f"/zh/book/{page}.html" in link for link in links):
            missed.append(f"{query!r} finds {[urlparse(link).path for link in links][:6]}, not zh/book/{page}")
    browser.save_screenshot(str(SCREENSHOTS / f"search-zh-{PHONE}.png"))
    assert not missed, "\n".join(missed)
