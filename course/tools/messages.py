"""The checks' message catalogues, made with Babel: ``python -m course.tools messages [--check]``.

It extracts every message marked ``tr("...")`` or ``N_("...")`` under autograder/ (autograder/messages.py) into the
template ``autograder/locale/autograder.pot``, merges the template into each language's catalogue
(``autograder/locale/<language>/LC_MESSAGES/autograder.po``: a new message arrives there untranslated,
a message gone from the code is dropped) and compiles each catalogue into the ``.mo`` file gettext
reads. With ``--check`` it writes nothing and says what is stale or untranslated.
"""
from __future__ import annotations

import ast
import io
import re
from datetime import UTC, datetime
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

from autograder.messages import DOMAIN, LANGUAGES, LOCALE
from course.layout import REPO
from course.source_trees import parse

KEYWORD = "tr"
#: the markers Babel extracts: tr("...") translates where it is written, N_("...") marks a constant
MARKERS = (KEYWORD, "N_")
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def template(root: Path = REPO) -> Catalog:
    """The messages the code marks, with where each is written."""
    # a fixed date, so that the files change only when the messages do
    catalog = Catalog(project="attention-course", domain=DOMAIN, charset="utf-8", creation_date=EPOCH,
                      revision_date=EPOCH)
    for filename, lineno, message, _comments, _context in extract_from_dir(
            root / "autograder", method_map=[("**.py", "python")], keywords={marker: None for marker in MARKERS}):
        catalog.add(message, locations=[(f"autograder/{filename}", lineno)])
    return catalog


def catalogue_path(code: str, suffix: str = ".po") -> Path:
    return LOCALE / code / "LC_MESSAGES" / f"{DOMAIN}{suffix}"


def _read(path: Path, code: str) -> Catalog:
    if not path.is_file():
        return Catalog(locale=code, domain=DOMAIN, charset="utf-8", creation_date=EPOCH, revision_date=EPOCH)
    with path.open("rb") as po:
        return read_po(po, locale=code)


def _po_bytes(catalog: Catalog) -> bytes:
    out = io.BytesIO()
    # sorted, without line numbers: the catalogue changes only when the messages do
    write_po(out, catalog, width=110, omit_header=False, sort_output=True, no_location=True)
    return out.getvalue()


def _mo_bytes(catalog: Catalog) -> bytes:
    out = io.BytesIO()
    write_mo(out, catalog)
    return out.getvalue()


def merged(code: str, root: Path = REPO) -> Catalog:
    """The language's catalogue brought up to the code's messages (no guessing: an unknown one is empty)."""
    catalog = _read(catalogue_path(code), code)
    catalog.update(template(root), no_fuzzy_matching=True)
    catalog.obsolete.clear()
    return catalog


def problems(code: str, catalog: Catalog) -> list[str]:
    """What a reader of the language would miss: a message untranslated, or whose placeholders differ."""
    found = []
    for message in catalog:
        if not message.id:
            continue
        if not message.string or message.fuzzy:
            found.append(f"{code}: no translation of {message.id!r}")
        elif sorted(PLACEHOLDER.findall(message.id)) != sorted(PLACEHOLDER.findall(message.string)):
            found.append(f"{code}: the translation of {message.id!r} has the placeholders "
                         f"{sorted(PLACEHOLDER.findall(message.string))}, not {sorted(PLACEHOLDER.findall(message.id))}")
    return found


def stale(root: Path = REPO) -> list[str]:
    """Which files `messages` would change: empty when the catalogues are current."""
    found = []
    pot = LOCALE / f"{DOMAIN}.pot"
    if not pot.is_file() or sorted(m.id for m in _read(pot, "en") if m.id) != sorted(m.id for m in template(root) if m.id):
        found.append(f"{pot.relative_to(root)} does not hold the code's messages")
    for code in LANGUAGES.values():
        catalog = merged(code, root)
        if not catalogue_path(code).is_file() or catalogue_path(code).read_bytes() != _po_bytes(catalog):
            found.append(f"{catalogue_path(code).relative_to(root)} is not merged with the code's messages")
        mo = catalogue_path(code, ".mo")
        if not mo.is_file() or mo.read_bytes() != _mo_bytes(_read(catalogue_path(code), code)):
            found.append(f"{mo.relative_to(root)} is not compiled from its catalogue")
        found += problems(code, catalog)
    return found


def write(root: Path = REPO) -> list[Path]:
    """Extract, merge and compile; the files written."""
    pot = LOCALE / f"{DOMAIN}.pot"
    pot.parent.mkdir(parents=True, exist_ok=True)
    pot.write_bytes(_po_bytes(template(root)))
    written = [pot]
    for code in LANGUAGES.values():
        catalog = merged(code, root)
        path = catalogue_path(code)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_po_bytes(catalog))
        catalogue_path(code, ".mo").write_bytes(_mo_bytes(_read(path, code)))
        written += [path, catalogue_path(code, ".mo")]
    return written


# --------------------------------------------------------------------------------------------
# What is not marked: the English a learner would read untranslated
# --------------------------------------------------------------------------------------------

#: the modules that write what a learner reads: a check's messages, its cases' descriptions, its stages; the notes on
#: the notebook's cells and why it could not be graded; the feedback page and Gradescope's results
SPOKEN = ("autograder/framework.py", "autograder/locate.py", "autograder/unchecked.py", "autograder/time_limit.py",
          "autograder/checks", "autograder/oracles", "autograder/session.py", "autograder/submissions.py",
          "autograder/engine.py", "autograder/outputs/feedback.py", "autograder/outputs/grade_files.py",
          "autograder/source/shortcuts.py", "autograder/source/helpers.py")
#: three English words in a row: a sentence, not a name, a shape or a piece of code
WORDS = re.compile(r"[A-Za-z]{2,}(?:[ '’-]+[A-Za-z]{2,}){2,}")
#: calls whose string arguments are not read by a learner, or are matched against what torch or Python raised
UNSPOKEN_CALLS = {"rule", "Stated", "startswith", "endswith", "search", "match", "compile", "fullmatch", "split",
                  "getattr", "hasattr", "import_module", "warn", "register_buffer"}
UNSPOKEN_KEYWORDS = {"containing", "about", "rule"}
PRAGMA = "# english:"


def _called(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _texts(node: ast.expr) -> str:
    """The literal text of a string or an f-string (its constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return " ".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return ""


def unmarked_in(source: str, filename: str = "") -> list[str]:
    """The English texts of ``source`` that are neither marked nor exempt, as "file:line: text"."""
    tree = parse(source, filename)
    lines = source.splitlines()
    exempt: set[int] = set()  # ids of string nodes that are fine where they are

    def exempt_all(node: ast.AST) -> None:
        exempt.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Constant, ast.JoinedStr)))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                exempt_all(first)  # a docstring
        elif isinstance(node, ast.Call):
            name = _called(node)
            if name in MARKERS:
                for arg in node.args:
                    if isinstance(arg, ast.Constant):
                        exempt_all(arg)  # marked; an f-string inside a marker is reported below
            elif name in UNSPOKEN_CALLS:
                exempt_all(node)
            for keyword in node.keywords:
                if keyword.arg in UNSPOKEN_KEYWORDS:
                    exempt_all(keyword.value)
        elif isinstance(node, ast.Compare):
            exempt_all(node)  # text compared with what was raised, or a value compared with a name
        elif isinstance(node, ast.Subscript):
            exempt_all(node.slice)  # a key
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and any(isinstance(n, ast.Call) and _called(n) in MARKERS
                                                    for n in ast.walk(node)):
            # Babel reads an f-string on Python 3.11 as one token: a marker inside it is never extracted
            found.append(f"{filename}:{node.lineno}: a marker inside an f-string, which Babel does not extract")
        if not isinstance(node, (ast.Constant, ast.JoinedStr)) or id(node) in exempt:
            continue
        text = _texts(node)
        if not WORDS.search(text):
            continue
        span = lines[node.lineno - 1:(node.end_lineno or node.lineno)]
        if any(PRAGMA in line for line in span):
            continue
        if isinstance(node, ast.JoinedStr):
            for n in ast.walk(node):
                exempt.add(id(n))  # its parts are reported with it
        found.append(f"{filename}:{node.lineno}: {text[:90]!r}")
    return found


def unmarked(root: Path = REPO) -> list[str]:
    """Every English text a learner may read that no marker sends through the catalogue."""
    found = []
    for spoken in SPOKEN:
        path = root / spoken
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            found += unmarked_in(file.read_text(), str(file.relative_to(root)))
    return found
