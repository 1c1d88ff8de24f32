import argparse
import sys

from .release import REPO, release, stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursetools")
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="regenerate exercises/ and reference/ from solutions/")
    rel.add_argument("assignments", nargs="*", help="only these assignments (default: all)")
    rel.add_argument("--check", action="store_true", help="only say whether the committed files are current")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(REPO)
        for p in problems:
            print(p)
        print("generated files are current" if not problems else f"{len(problems)} generated file(s) stale: run `python -m coursetools release`")
        return 1 if problems else 0
    release(REPO, args.assignments or None)
    print(f"regenerated exercises/ and reference/ from solutions/ ({', '.join(args.assignments) or 'all assignments'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
