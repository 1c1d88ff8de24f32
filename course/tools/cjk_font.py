"""The Chinese font the website ships: a subset of Noto Sans CJK SC with only the glyphs its pages use.

    python -m course.tools cjk-font           write the subsets into book/_static/fonts/
    python -m course.tools cjk-font --check   fail if a page uses a character the subsets lack

A reader whose machine has no CJK font would see boxes where the pages give Chinese; the site
therefore carries its own. The source is Debian's `fonts-noto-cjk` (SIL Open Font License 1.1); the
subsets are WOFF2 files of about 360 KB for the Chinese edition's 1,100 or so distinct characters,
renamed as the licence asks of a modified version, with the licence beside them.
`book/_static/course.css` declares them for the code points in UNICODE_RANGES only, so the browser
fetches them only for a page with Chinese.
Run this again after adding Chinese to a page (the test of the font says which characters are
missing).
"""
from __future__ import annotations

import re
from pathlib import Path

from course.layout import BOOK, REPO, ZH_BOOK

#: Debian's fonts-noto-cjk; each .ttc holds the Japanese, Korean, Simplified and Traditional
#: Chinese fonts, told apart by their family name.
SOURCES = {
    "Regular": Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
    "Bold": Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc"),
}
SOURCE_FAMILY = "Noto Sans CJK SC"
LICENCE_SOURCE = Path("/usr/share/doc/fonts-noto-cjk/copyright")
#: The subset's own family name: a modified version of an OFL font must not keep a reserved name.
FAMILY = "Course CJK"
FONTS = REPO / BOOK / "_static" / "fonts"
LICENCE = FONTS / "OFL.txt"
#: CJK punctuation, kana, ideographs (extension A, the unified block, compatibility) and
#: full-width forms: what a Chinese text draws from a CJK font. course.css uses the same ranges.
UNICODE_RANGES = [(0x2E80, 0x2FFF), (0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
                  (0xF900, 0xFAFF), (0xFF00, 0xFFEF)]
CJK = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in UNICODE_RANGES) + "]")


def subset_path(weight: str) -> Path:
    return FONTS / f"course-cjk-{weight.lower()}.woff2"


def page_sources(root: Path = REPO) -> list[Path]:
    """Every file whose text reaches the site: the pages of both editions, their table of contents, the
    config, the extension and the edition builder, which write Chinese into every Chinese page, and the
    site's scripts (the attention widget speaks the page's language)."""
    tools = root / "course" / "tools"
    return (sorted((root / BOOK).glob("*.md")) + sorted((root / ZH_BOOK).glob("*.md"))
            + [root / "_toc.yml", root / "_config.yml", tools / "sphinx_site.py", tools / "editions.py"]
            + sorted((tools / "site_static").glob("*.js")))


def cjk_characters(texts) -> set[str]:
    found: set[str] = set()
    for text in texts:
        found |= set(CJK.findall(text))
    return found


def used_characters(root: Path = REPO) -> set[str]:
    return cjk_characters(p.read_text(encoding="utf-8") for p in page_sources(root))


def covered(font: Path) -> set[str]:
    """The characters a font file maps to a glyph."""
    from fontTools.ttLib import TTFont

    with TTFont(font) as ttf:
        return {chr(code) for code in ttf.getBestCmap()}


def missing(root: Path = REPO) -> dict[str, set[str]]:
    """weight -> the characters the pages use that its subset lacks (all of them if it is absent)."""
    used = used_characters(root)
    return {weight: used - (covered(subset_path(weight)) if subset_path(weight).is_file() else set())
            for weight in SOURCES}


def _source_font(path: Path):
    from fontTools.ttLib import TTCollection

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: apt-get install fonts-noto-cjk")
    for font in TTCollection(path).fonts:
        if font["name"].getDebugName(1) == SOURCE_FAMILY:
            return font
    raise LookupError(f"{path} holds no {SOURCE_FAMILY!r} font")


def _rename(font, weight: str) -> None:
    # A modified version of an OFL font takes a name of its own (the licence's condition 3).
    names = {1: FAMILY, 2: weight, 3: f"{FAMILY} {weight}; subset of {SOURCE_FAMILY}",
             4: f"{FAMILY} {weight}", 6: f"CourseCJK-{weight}"}
    table = font["name"]
    table.names = [n for n in table.names if n.nameID not in names and n.nameID not in (16, 17, 21, 22)]
    for name_id, text in names.items():
        table.setName(text, name_id, 3, 1, 0x409)


def write_subset(weight: str, characters: set[str]) -> Path:
    from fontTools import subset

    font = _source_font(SOURCES[weight])
    options = subset.Options()
    options.flavor = "woff2"
    options.layout_features = ["*"]  # keeps vertical and proportional forms of the punctuation
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]  # copyright, names, version, licence
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(map(ord, characters)))
    subsetter.subset(font)
    _rename(font, weight)
    target = subset_path(weight)
    target.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff2"
    font.save(target)
    return target


def licence_text() -> str:
    """The SIL Open Font License 1.1 as Debian's copyright file of fonts-noto-cjk gives it."""
    lines = LICENCE_SOURCE.read_text(encoding="utf-8").splitlines()
    start = lines.index("License: SIL-1.1", lines.index("License: SIL-1.1") + 1)
    body = []
    for line in lines[start + 1:]:
        if not line.startswith(" "):
            break
        body.append("" if line.strip() == "." else line[1:])
    return "\n".join(body).strip() + "\n"


def write(root: Path = REPO) -> list[Path]:
    characters = used_characters(root)
    written = [write_subset(weight, characters) for weight in SOURCES]
    copyright_line = _source_font(SOURCES["Regular"])["name"].getDebugName(0)
    LICENCE.write_text(
        f"The fonts in this folder ({', '.join(p.name for p in written)}) are subsets of\n"
        f"{SOURCE_FAMILY} (Noto CJK, https://github.com/googlefonts/noto-cjk), renamed {FAMILY!r},\n"
        f"made by course/tools/cjk_font.py from Debian's fonts-noto-cjk.\n\n{copyright_line}\n\n"
        "This Font Software is licensed under the SIL Open Font License, Version 1.1.\n\n"
        + licence_text(),
        encoding="utf-8",
    )
    return [*written, LICENCE]
