import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder")
    sub = parser.add_subparsers(dest="command", required=True)
    chk = sub.add_parser("check", help="run an exercise notebook's visible tests and show the score")
    chk.add_argument("notebook", type=Path)
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        parser.error(f"no such notebook: {args.notebook}")
    from .local import report

    return report(args.notebook)


if __name__ == "__main__":
    sys.exit(main())
