"""What every ``python -m transformer.<model> <command>`` shares: the choice of command, its parser,
and option help from the code.

Each model's package (``transformer.g2p``, ``transformer.gpt``, ``transformer.bert``) has a
``__main__`` that names its commands; :func:`dispatch` reads the first word and hands the rest of
the command line to that command. An unknown or wrong option is answered with the error first and one line on where to find the
options, not the whole usage before it. The help of an option made from a configuration
dataclass is the comment written beside its field, so the two never drift apart.
"""
from __future__ import annotations

import argparse
import inspect
import io
import sys
import textwrap
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse, with errors that lead with what is wrong."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}\n(`{self.prog} --help` lists every option)\n")


def field_comments(config_class: type) -> dict[str, str]:
    """The comment beside each field of a dataclass and of its bases: ``name: type = value  # comment``.

    A comment on the line before a field, or a group's heading comment, does not count: only the
    one on the field's own line describes it.
    """
    comments: dict[str, str] = {}
    for klass in reversed(config_class.__mro__):
        if klass is object or not hasattr(klass, "__dataclass_fields__"):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # no source (a frozen application): no help beyond the defaults
            continue
        line_tokens: dict[int, list[tokenize.TokenInfo]] = {}
        skipped = (tokenize.INDENT, tokenize.DEDENT, tokenize.NL, tokenize.NEWLINE)
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in skipped:
                line_tokens.setdefault(token.start[0], []).append(token)
        for tokens in line_tokens.values():
            # a field at the class body's level: NAME ":" ... COMMENT
            if (len(tokens) > 2 and tokens[0].type == tokenize.NAME and tokens[0].start[1] == 4
                    and tokens[1].string == ":" and tokens[-1].type == tokenize.COMMENT):
                comments[tokens[0].string] = tokens[-1].string.lstrip("#").strip()
    return comments


@dataclass(frozen=True)
class Command:
    """One word of ``python -m transformer.<model> WORD``: what it runs and the line that describes it."""

    run: Callable[[Sequence[str]], int]  # the command's own main: its options in, the exit status out
    summary: str


#: what every model's export command does
EXPORT_SUMMARY = "write a finished run's shippable form (weights, configuration, figures)"


def dispatch(prog: str, description: str, commands: dict[str, Command], argv: Sequence[str] | None = None) -> int:
    """Run the command the first word names with the rest of ``argv``; without one, or with --help, list them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    width = max(map(len, commands))
    usage = "\n".join([f"usage: {prog} {{{','.join(commands)}}} [options]", "", description, "", "commands:",
                        *(f"  {name:<{width}}  {command.summary}" for name, command in commands.items()),
                        "", f"`{prog} COMMAND --help` lists the options of a command"])
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if not argv or argv[0] not in commands:
        problem = f"unknown command {argv[0]!r}" if argv else "no command given"
        print(f"error: {problem}: choose one of {', '.join(commands)}\n(`{prog} --help` describes them)", file=sys.stderr)
        return 2
    return commands[argv[0]].run(argv[1:])
