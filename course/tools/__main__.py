"""python -m course.tools release [--check] | new-chapter chNN_topic [--title T] | tables [--check] | cjk-font [--check]
| spoken-digits [--check] | site | zh-sync | messages [--check]"""
import argparse
import sys
from pathlib import Path

from course.layout import REPO, LayoutError, chapters, toc_pages
from course.notebook_format import NotebookSourceError

from .editions import EditionError
from .release import release, stale


def _release(args) -> int:
    if args.check:
        problems = stale(REPO)
        for p in problems:
            print(p)
        print(
            "generated files are current"
            if not problems
            else f"{len(problems)} generated file(s) stale: run `python -m course.tools release`"
        )
        return 1 if problems else 0
    release(REPO, args.assignments or None)
    print(f"regenerated exercises/ and reference/ from solutions/ ({', '.join(args.assignments) or 'all assignments'})")
    from autograder import course_secret

    path, made = course_secret.make(REPO)
    if made:
        print(f"made the course secret {path}, from which the hidden cases are drawn: keep it out of everything "
              "learners receive (it is in .gitignore)")
    return 0


def _new_chapter(args) -> int:
    from . import tables
    from .scaffold import new_chapter

    for path in new_chapter(args.name, args.title, REPO):
        print(f"wrote {path}")
    release(REPO, [args.name])
    print(f"generated exercises/{args.name}/ and its reference module")
    for name in tables.write(REPO):
        print(f"updated the chapter table of {name}")
    print("next: replace every SCAFFOLD part with the chapter's own (the tests fail until none is left)")
    return 0


def _tables(args) -> int:
    from . import tables

    if args.check:
        problems = tables.problems(REPO)
        for p in problems:
            print(p)
        print("the chapter tables agree with the course" if not problems else "run `python -m course.tools tables`")
        return 1 if problems else 0
    changed = tables.write(REPO)
    print(f"updated {', '.join(changed)}" if changed else "the chapter tables were current")
    problems = tables.problems(REPO)
    for p in problems:  # what only the author can fill in
        print(p)
    return 1 if problems else 0


def _cjk_font(args) -> int:
    from . import cjk_font

    if not args.check:
        for path in cjk_font.write(REPO):
            print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size:,} bytes)")
    lacking = {weight: chars for weight, chars in cjk_font.missing(REPO).items() if chars}
    for weight, chars in lacking.items():
        print(f"the {weight} subset lacks {len(chars)} character(s) the pages use: {''.join(sorted(chars))}")
    print("run `python -m course.tools cjk-font`" if lacking else "the font subsets cover every Chinese character of the pages")
    return 1 if lacking else 0


def _spoken_digits(args) -> int:
    from . import spoken_digits

    return spoken_digits.main(args.check, args.out)


def _site(args) -> int:
    from . import editions

    site, _ = editions.build(REPO, echo=True)
    print(f"the English edition is in {site.relative_to(REPO)}/, the Chinese one in {site.relative_to(REPO)}/zh/")
    return 0


def _zh_sync(args) -> int:
    from . import editions

    for twin in [*editions.sync(REPO), *editions.sync_notebooks(REPO)]:
        print(f"wrote the English code cells into {twin.relative_to(REPO)}")
    problems = [p for page in toc_pages(REPO) for p in editions.twin_problems(REPO, page)]
    problems += [p for chapter in chapters(REPO) for p in editions.notebook_twin_problems(chapter)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


def _messages(args) -> int:
    from . import messages

    if not args.check:
        for path in messages.write(REPO):
            print(f"wrote {path.relative_to(REPO)}")
    problems = messages.stale(REPO) + [f"not marked for translation: {u}" for u in messages.unmarked(REPO)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.tools")
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="regenerate exercises/ and reference/ from solutions/")
    rel.add_argument("assignments", nargs="*", help="only these assignments (default: all)")
    rel.add_argument("--check", action="store_true", help="only say whether the committed files are current")
    new = sub.add_parser("new-chapter", help="write a new chapter's notebook, checks, mistakes, page and toc entry")
    new.add_argument("name", help="chNN_topic, such as ch07_bert_gpt")
    new.add_argument("--title", help="the page's title (default: the topic, capitalised)")
    tab = sub.add_parser("tables", help="rewrite the chapter tables of README.md and book/intro.md from the course")
    tab.add_argument("--check", action="store_true", help="only say whether the tables agree with the course")
    font = sub.add_parser("cjk-font", help="write the site's Chinese font subsets from Debian's fonts-noto-cjk")
    font.add_argument("--check", action="store_true", help="only say whether the subsets cover the pages")
    digits = sub.add_parser("spoken-digits", help="make chapter 10's spoken digits with espeak-ng (data/spoken_digits/)")
    digits.add_argument("--check", action="store_true", help="only say whether the shipped files are what this machine makes")
    digits.add_argument("--out", type=Path, help="the folder to write (default: data/spoken_digits/)")
    sub.add_parser("site", help="build the website, English then Chinese: _build/html/ and _build/html/zh/")
    sub.add_parser("zh-sync", help="copy the English pages' and instructor notebooks' code cells into their Chinese "
                   "twins (zh/book/, zh/solutions/)")
    msgs = sub.add_parser("messages", help="extract the checks' messages, merge them into each language's catalogue "
                          "and compile it (autograder/locale/)")
    msgs.add_argument("--check", action="store_true", help="only say what is stale or untranslated")
    args = parser.parse_args(argv)
    command = {"release": _release, "new-chapter": _new_chapter, "tables": _tables, "cjk-font": _cjk_font,
               "spoken-digits": _spoken_digits, "site": _site, "zh-sync": _zh_sync,
               "messages": _messages}[args.command]
    try:
        return command(args)
    except (LayoutError, NotebookSourceError, EditionError) as exc:  # a ScaffoldError is a LayoutError
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
