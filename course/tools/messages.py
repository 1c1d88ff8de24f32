"""The checks' message catalogues, made with Babel: ``python -m course.tools messages [--check]``.

It extracts every message marked ``tr("...")`` under autograder/ (autograder/messages.py) into the
template ``autograder/locale/autograder.pot``, merges the template into each language's catalogue
(``autograder/locale/<language>/LC_MESSAGES/autograder.po``: a new message arrives there untranslated,
a message gone from the code is dropped) and compiles each catalogue into the ``.mo`` file gettext
reads. With ``--check`` it writes nothing and says what is stale or untranslated.
"""
from __future__ import annotations

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

KEYWORD = "tr"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def template(root: Path = REPO) -> Catalog:
    """The messages the code marks, with where each is written."""
    # a fixed date, so that the files change only when the messages do
    catalog = Catalog(project="attention-course", domain=DOMAIN, charset="utf-8", creation_date=EPOCH,
                      revision_date=EPOCH)
    for filename, lineno, message, _comments, _context in extract_from_dir(
            root / "autograder", method_map=[("**.py", "python")], keywords={KEYWORD: None}):
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
