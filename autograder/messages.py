"""The checks' messages in the learner's language: English as the code writes them, or Chinese.

A message is marked where it is written, its variable parts named::

    raise CheckFailed(tr("`{function}` returned None on the case {case}: did you forget `return`?").format(
        function=self.function, case=case.label))

A text defined before any language is chosen (a module's or a class's constant, read when the module is
imported) is marked with :func:`N_`, which only marks it, and translated where it is used::

    CAUSAL = N_("the causal mask compared the positions within the block")
    ...
    found.append((replay, tr(CAUSAL)))

``python -m course.tools messages`` extracts the marked messages with Babel into
``autograder/locale/autograder.pot``, merges them into the Chinese catalogue
``autograder/locale/zh_CN/LC_MESSAGES/autograder.po`` (where a translator writes each one) and compiles
it to the ``.mo`` file that gettext reads. A test fails while a message has no translation, while a
translation's placeholders differ from its message's, or while the compiled file is older than the
catalogue.

The language is the first of: :func:`set_language` (``python -m autograder check --lang zh`` calls it),
the environment's ``COURSE_LANG``, then gettext's own ``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES`` and
``LANG``, so that a learner whose system speaks Chinese reads Chinese in the notebook too. A language
without a catalogue is English.

Every text of the modules that write what a learner reads of a check (``course.tools.messages.SPOKEN``)
is marked: a test fails on an English sentence there that is neither marked nor exempt.
"""
from __future__ import annotations

import gettext
import os
from pathlib import Path

DOMAIN = "autograder"
LOCALE = Path(__file__).resolve().parent / "locale"
#: the languages with a catalogue, by the names a learner may give (zh, zh_CN, zh-CN, zh_CN.UTF-8)
LANGUAGES = {"zh": "zh_CN"}

_chosen: str | None = None
_loaded: dict[str, gettext.NullTranslations] = {}


def language_code(name: str | None) -> str | None:
    """The catalogue's name for a language a learner names, None for English or one without a catalogue."""
    if not name:
        return None
    base = name.split(".")[0].split("@")[0].replace("-", "_")
    return LANGUAGES.get(base.split("_")[0].lower())


def set_language(name: str | None) -> None:
    """Speak ``name`` from now on (None: as the environment says)."""
    global _chosen
    _chosen = name


def current() -> str | None:
    """The catalogue in use: the one chosen, else the environment's; None for English."""
    if _chosen is not None:
        return language_code(_chosen)
    for variable in ("COURSE_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(variable)
        if value:
            # LANGUAGE may list several, "zh_CN:en"; the first with a catalogue wins, English otherwise
            return next((code for code in map(language_code, value.split(":")) if code), None)
    return None


def _translations(code: str | None) -> gettext.NullTranslations:
    if code is None:
        return gettext.NullTranslations()
    if code not in _loaded:
        _loaded[code] = gettext.translation(DOMAIN, localedir=LOCALE, languages=[code], fallback=True)
    return _loaded[code]


def tr(message: str) -> str:
    """``message`` in the learner's language (the English itself where there is no translation)."""
    # gettext's translation of "" is the catalogue's header
    return _translations(current()).gettext(message) if message else message


def N_(message: str) -> str:  # noqa: N802 (gettext's own name for a marker)
    """``message`` itself, marked for the catalogue: a constant that :func:`tr` translates where it is used."""
    return message
