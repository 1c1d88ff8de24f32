"""The command line of a task's training: every setting of its config an option, a preset to start from,
``--resume``, and the exit statuses; and the export command that writes a run's shippable form.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path

from course.layout import runs

from ..cli import Parser, field_comments
from ..parts import PartsError
from .config import LoopConfig
from .run import RunResult, run_training
from .task import Task, TrainingError


def export_command(argv: Sequence[str], export: Callable[[str, str], Path], prog: str) -> int:
    """``prog RUN_DIR DESTINATION``: write a run's shippable form with ``export``; the exit status."""
    parser = Parser(prog=prog, description="Write the shippable form of a finished run: its weights (averaged when "
                    "it averaged), configuration, metrics and pictures, without the optimiser's state.")
    parser.add_argument("run", help="a run folder (or its checkpoint.pt)")
    parser.add_argument("destination", help="the folder to write (created when missing)")
    args = parser.parse_args(argv)
    try:
        path = export(args.run, args.destination)
    except TrainingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MB")
    return 0


def _boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parser(config_class: type[LoopConfig], presets: dict[str, LoopConfig], prog: str, description: str,
            default_preset: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--preset", choices=sorted(presets), default=default_preset,
                        help=f"the starting configuration (default: {default_preset})")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    example = presets[default_preset]
    notes = field_comments(config_class)
    for f in fields(config_class):
        flag = "--" + f.name.replace("_", "-")
        kind = type(getattr(example, f.name))
        shown = f"{notes.get(f.name, '')} (preset {default_preset}: {getattr(example, f.name)!r})".lstrip()
        shown = shown.replace("%", "%%")  # argparse formats help with %
        if kind is bool:
            parser.add_argument(flag, dest=f.name, type=_boolean, metavar="true|false", default=None, help=shown)
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None, help=shown)
    return parser


def command_line(config_class: type[LoopConfig], presets: dict[str, LoopConfig], prog: str, description: str,
                 argv: Sequence[str] | None = None, run_prefix: str = "", default_preset: str = "cpu",
                 ) -> tuple[LoopConfig, bool, bool]:
    """(config, resume, quiet) from the command line: a preset, or a run's saved config, plus overrides.

    Every field of ``config_class`` is an option (``--max-steps 50``, ``--compile true``). A new
    run's folder is ``runs/<run_prefix><preset>`` unless ``--run-dir`` says otherwise.
    """
    parser = _parser(config_class, presets, prog, description, default_preset)
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in fields(config_class) if getattr(args, f.name) is not None}
    if args.resume:
        saved = Path(args.resume) / "config.json"
        if not saved.is_file():
            parser.error(f"nothing to resume: {saved} does not exist")
        base = json.loads(saved.read_text(encoding="utf-8"))
        base["run_dir"] = args.resume
    else:
        base = asdict(presets[args.preset])
        base["run_dir"] = base["run_dir"] or str(runs() / f"{run_prefix}{args.preset}")
        if not config_class.fused_kernels_apply({**base, **overrides}):
            # The preset's fused kernels have no course part to replace (with --parts mine the parts are yours,
            # and run as you wrote them). Asked for by name, a fused path is still refused, with the reason.
            base.update({path: "course" for path in config_class.KERNEL_PATHS})
    try:
        config = config_class(**{**base, **overrides})
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return config, bool(args.resume), args.quiet


def launch(task: Task, resume: bool, quiet: bool, errors: tuple[type[Exception], ...] = ()) -> RunResult | int:
    """Run a task from a command line: the result, or the exit status after a clear error (2) or an
    interruption (130)."""
    return exit_status(lambda: run_training(task, resume=resume, progress=not quiet), errors)


def exit_status(train: Callable[[], RunResult], errors: tuple[type[Exception], ...] = ()) -> RunResult | int:
    """What ``train`` returns, or the exit status of a command after a clear error (2), the message printed, or
    an interruption (130)."""
    try:
        return train()
    except (TrainingError, PartsError, *errors) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
