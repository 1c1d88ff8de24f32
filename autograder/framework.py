"""What every check is made of.

A check never calls the learner's function and judges the result in one breath. It has two
halves that only exchange plain data:

* ``cases(hidden)`` lists the calls to make: inputs built from a fixed seed, as tensors,
  numbers, strings and :class:`Provided` objects;
* ``judge(case, result)`` (and ``judge_all``) look at what came back and either accept it or
  raise :class:`CheckFailed` with a message that tells the learner what is wrong and where
  to look.

In a notebook both halves run in one process (:func:`run_check`). The grader runs the calls in
a sandbox and the judging in its own process, so nothing the learner's code does can touch the
verdict. The oracle is always PyTorch or closed-form mathematics, never the course's solutions.
What runs beside the learner's code (cases built, calls made, results reduced to data) lives in
:mod:`harness.calls`, apart from the judging here.

A new chapter brings one module ``autograder/checks/<notebook>.py`` (or a package of that name, one
module per topic) holding a :class:`Check` subclass per graded function, listed in ``CHECKS``, and
``STATED``: for each function, the rules its instructions state, as :class:`Stated` entries. A check
must fill in

* ``function``: the learner's function (or class) name, as the exercise writes it; ``oracle``: what it
  is compared with, in words, for the success line;
* ``cases(hidden)``: the calls, drawn from ``self.generator(hidden)`` (a seed of this check's own; the
  hidden cases' from the course secret, so every hidden input, sizes too, must draw from it: see
  :func:`draw` and :func:`relabelling`). A :class:`Case` calls a function with ``args``/``kwargs``, or
  builds a module from ``init`` and ``state`` (its weights, by the exercise's names); ``tag="invalid"``
  (:data:`INVALID`) marks arguments the function must refuse by raising ``invalid_raises``;
* ``rules``: the judge, as small :class:`Rule` s (``@rule("a (B, D) tensor")`` above a method) that
  ``judge`` runs in order on each case; each raises :class:`CheckFailed` when the result is wrong, with
  what is wrong and where to look: :func:`expect_tensor`, :func:`expect_shape`, then :func:`expect_close`
  against the oracle in float64 with ``diagnoses`` (the values known mistakes give, each with its advice:
  a mistake is named only when it gives the learner's value). Each mistake of the catalogue states the
  rule that must catch it;

and may fill in ``rules_across`` (properties across cases: changing a future token changes no earlier
output), ``stages(case)`` (the oracle's intermediate values in order, so that a wrong value no diagnosis
explains is located at the learner's first line that leaves them: :mod:`autograder.locate`), ``hints``
(a :class:`Hint` per exception worth explaining), ``forbidden`` and ``forbidden_ops`` (what the exercise
asks the learner to build instead of calling), and the rules the base class judges on every function
from outside its process, on by default or declared: ``result_dtype`` (the dtype of its floating results:
the arguments' by default), ``follows_device`` (its result stays on the arguments' device),
``trained_through`` (gradients reach its arguments and parameters), ``may_return_view`` (it may return a
view of an argument; none may change one in place) and ``detached_attributes`` (what it stores detached
from the graph). The mistakes the check must catch
live in ``tests/mistakes/<notebook>.py``; ``python -m course.tools new-chapter`` writes a chapter whose
example check uses each of these (``course/tools/scaffold.py``)::

    class MaskedMeanCheck(Check):
        function = "masked_mean"
        oracle = "the mean of the kept vectors, in float64"
        trained_through = True                 # a model learns through it (probed)
        hints = (Hint("RuntimeError", "give the mask a last axis", containing="must match the size"),)
        def cases(self, hidden): g = self.generator(hidden); return [Case("x (2, 5, 3)", (x, mask)), ...]
        @rule("a (B, D) tensor")
        def _shape(self, case, result): expect_shape(expect_tensor(result, "the result", case), ...)
        @rule("the mean of the kept vectors")
        def _values(self, case, y): expect_close(y, oracle(*case.args), "the result", case, diagnoses=...)
        rules = (_shape, _values)
        def stages(self, case): return [Stage.of("the sum of the kept vectors", total), ...]

    CHECKS = [MaskedMeanCheck]
    STATED = {"masked_mean": (Stated("the padding is left out", "x (2, 5, 3)", "the mask was ignored"),)}
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import importlib
import inspect
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

# What the learner's side is made of, for the checks that build cases and read results.
from autograder.messages import N_, tr
from harness.calls import (  # noqa: F401
    DEEPLY_NESTED,
    Case,
    ModuleResult,
    Opaque,
    Raised,
    StateMismatch,
    Tripwires,
    UsedForbidden,
    call_learner,
    materialize,
    raised,
    remember_cell,
    shared_names,
    to_plain,
)
from harness.observe import Observed, Observer, tensors_in
from harness.probes import PROBE_SECONDS, probe
from harness.providers import PROVIDERS, Provided, provider, seeded  # noqa: F401
from harness.wire import OPAQUE_DTYPE

from . import course_secret
from .locate import Stage, locate, locate_crash
from .unchecked import WHOLE_RESULT as WHOLE_RESULT  # a check names the whole result with it (Rule.returns)
from .unchecked import default_differs, made_on, readers, refusals, unchecked


class CheckFailed(AssertionError):
    """A learner-facing verdict: the message says what is wrong and where to look.

    In a notebook IPython shows it through :meth:`_render_traceback_`: the message and the
    learner's own frames, without the grader's. Elsewhere it is an ordinary exception.
    """

    #: the frames of the learner's code where the learner's exception was raised, formatted
    learner_frames: tuple[str, ...] = ()
    #: the catalogued mistakes that give the learner's value on this case (their advice, numbers
    #: left out), the first named by the message: the verdict names one only if it explains every
    #: other failing case too
    names: tuple[str, ...] | None = None
    #: for each of ``names``, its advice as written for this case, and the words before it
    advice: dict[str, str] = {}  # noqa: RUF012 (never mutated: each failure gets its own)
    what: str = ""
    #: a wrong value that no catalogued mistake explains
    unexplained: bool = False
    #: the message without the mistake's name, for when the name does not hold on every case
    plain: str = ""
    #: the rule that gives ``plain``, where that is a later rule than the one that named the mistake
    plain_rule: str = ""
    #: the case a failure of several cases' results (``judge_all``) is about, for locating its wrong value
    case: Case | None = None
    #: the name of the rule that failed (:class:`Rule`): what the catalogue of mistakes states for each mistake
    rule: str = ""
    #: the arguments the failure is about (:attr:`Rule.about`)
    about: tuple[str, ...] = ()
    #: the value of the result the failure is about (:attr:`Rule.returns`)
    returns: tuple[int, str] | None = None

    def _render_traceback_(self) -> list[str]:
        lines = [f"{type(self).__name__}: {self}"]
        if self.learner_frames:
            lines += ["", tr("Where it happened in your code (most recent call last):"), *self.learner_frames]
        return lines


#: the tag of a case whose arguments the function must refuse, by raising ``Check.invalid_raises``
INVALID = "invalid"
#: where the chapters' checks live: a check's id is "<notebook>.<function>", its notebook the
#: first module name below this package
CHECKS_PACKAGE = __name__.rpartition(".")[0] + ".checks"


@dataclass(frozen=True)
class Hint:
    """What to tell a learner whose function raised one of the exceptions ``raised`` (type names; none: any).

    A check lists its hints in ``hints``; the first that applies gives the message. It applies when
    the exception's message contains one of ``containing`` (when given) and ``when(case, result)``
    holds (when given). ``text`` is added below the report of the exception (what was raised, where,
    on which case); with ``whole`` it is the whole message. A callable ``text(name, case, result)``
    (``name`` is the function's, in backquotes) may return "" to say that the hint does not apply.
    """

    raised: str | tuple[str, ...]
    text: str | Callable[[str, Case, Raised], str]
    containing: str | tuple[str, ...] = ()
    when: Callable[[Case, Raised], bool] | None = None
    whole: bool = False

    def message(self, name: str, case: Case, result: Raised) -> str:
        """The learner's message, or "" when this hint does not fit ``result``."""
        types = (self.raised,) if isinstance(self.raised, str) else self.raised
        fragments = (self.containing,) if isinstance(self.containing, str) else self.containing
        if (types and result.type not in types) or (fragments and not any(f in result.message for f in fragments)):
            return ""
        if self.when is not None and not self.when(case, result):
            return ""
        text = self.text(name, case, result) if callable(self.text) else tr(self.text)
        if not text or self.whole:
            return text
        return raised_message(name, case, result) + "\n" + text


def mismatched(name: str, case: Case, result: Raised, advice: str) -> str:
    """"`f`'s parameters do not match on the case ...: <which>", then ``advice``: a StateMismatch's report."""
    return tr("{name}'s parameters do not match on the case {case}: {message} {advice}").format(
        name=name, case=case.label, message=raised_text(result), advice=tr(advice))


def mismatch_text(details: Mapping[str, tuple]) -> str:
    """What a StateMismatch's ``details`` say, in the learner's language: the submodules one object serves under
    two names, the parameters missing and those the exercise does not ask for, where the learner's class makes
    the first of those or a parameter of the wrong shape, and what to do."""
    missing, unexpected = details.get("missing", ()), details.get("unexpected", ())
    shared = [tuple(pair) for pair in details.get("shared", ()) if len(pair) == 2]
    aliases = [alias for alias, _ in shared]
    really_missing = [n for n in missing if not any(n == a or n.startswith(f"{a}.") for a in aliases)]
    parts = [tr("{alias} and {original} are one and the same object, so they share their weights (PyTorch lists "
                "them once, under {original}): give {alias} weights of its own by creating a new object for it "
                "instead of reusing {original}").format(alias=alias, original=original)
             for alias, original in shared[:3] if any(n == alias or n.startswith(f"{alias}.") for n in missing)]
    if really_missing:
        parts.append(tr("it has no parameter named {names}").format(names=", ".join(really_missing[:6])))
    if unexpected:
        parts.append(tr("it has parameters the exercise does not ask for: {names}").format(
            names=", ".join(unexpected[:6])))
    made, shape = details.get("made", ()), details.get("shape", ())
    made_at = tr("{attribute} is made on line {line} of your `{method}`, `{text}`").format(
        attribute=made[0], line=made[1], method=made[2], text=made[3]) if len(made) == 4 else ""
    detail = made_at
    if len(shape) == 3:
        detail = tr("{name} has shape {shape}, expected {expected}").format(
            name=shape[0], shape=shape[1], expected=shape[2]) + (tr(" ({note})").format(note=made_at) if made_at else "")
    if detail:
        parts.append(detail)
    said = functools.reduce(lambda earlier, later: tr("{earlier}; {later}").format(earlier=earlier, later=later),
                            parts) if parts else ""
    if really_missing or unexpected or detail:
        return tr("{said}. Use exactly the submodule names and shapes the exercise gives.").format(said=said)
    return tr("{said}.").format(said=said)


def raised_text(result: Raised) -> str:
    """The message of what ``result`` raised, for a report of it: what the learner's code raised, as it said it;
    what the course's code in the learner's process raised (a StateMismatch, the toys' EncodedAgain and
    Recomputed), worded here from the facts it sent, in the learner's language."""
    details = result.details or {}
    if result.type == "StateMismatch":
        return mismatch_text(details)
    if result.type == "EncodedAgain" and len(details.get("encoded", ())) == 1:
        return tr("model.encode was called {count} times in one decoding: the memory does not change from step to "
                  "step, so encode the source once, before the loop, and pass that memory to every model.decode "
                  "(model(src, ys) encodes too).").format(count=details["encoded"][0])
    if result.type == "Recomputed" and len(details.get("read", ())) == 3:
        name, count, budget = details["read"]
        return tr("the model's `{name}` has now read {count} positions, more than the {budget} that the prompt and "
                  "the generated tokens hold together: positions already in the cache were computed again").format(
                      name=name, count=count, budget=budget)
    return result.message


def opaque_kind(value: Opaque) -> str:
    """What a value that is not plain data is, in the learner's language: its type's name, or what the
    learner's side said of it (a value nested too deeply, a tensor of a dtype that cannot travel)."""
    if value.type == DEEPLY_NESTED:
        return tr("deeply nested value")
    if value.type.startswith(OPAQUE_DTYPE):
        return tr("tensor of dtype {dtype}").format(dtype=value.type.removeprefix(OPAQUE_DTYPE))
    return value.type


def describe(value: Any) -> str:
    """A returned value as a learner would recognise it: a tensor by its shape, anything else by repr."""
    if isinstance(value, torch.Tensor):
        return tr("a tensor of shape {shape}").format(shape=tuple(value.shape))
    return repr(value)


def stable_seed(*parts: Any, key: bytes | None = None) -> int:
    """A seed for torch.Generator that depends on ``parts`` only (not on Python's hash salt); with ``key``,
    an HMAC of them, which only the key's holder can compute (the hidden cases' course secret)."""
    message = "\x1f".join(map(str, parts)).encode()
    digest = (hashlib.sha256(message) if key is None else hmac.new(key, message, hashlib.sha256)).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # 63 bits: manual_seed takes any of them


def draw(g: torch.Generator, low: int, high: int) -> int:
    """An integer from ``low`` to ``high`` (both included), drawn from ``g``: a hidden case's size."""
    return int(torch.randint(low, high + 1, (), generator=g))


def relabelling(g: torch.Generator, symbols: Sequence) -> dict:
    """A one-to-one renaming of ``symbols`` drawn from ``g``: a hidden case keeps a crafted input's
    shape (its repeats, ties and runs) while its symbols stay unknowable."""
    order = torch.randperm(len(symbols), generator=g).tolist()
    return {a: symbols[i] for a, i in zip(symbols, order)}


@dataclass(frozen=True)
class Rule:
    """One thing a check requires of what the learner's function did, under a name that says what
    ("rows sum to one", "masked keys get zero weight").

    ``test(check, case, result)`` passes silently or raises :class:`CheckFailed`; the failure then
    carries the name (``CheckFailed.rule``), and each mistake of the catalogue states the rule that
    must catch it. A check lists its rules in ``rules``, which the default :meth:`Check.judge` runs
    in order on each case (the first that fails gives the message), and the properties of several
    calls in ``rules_across``, whose ``test(check, cases, results)`` sees every valid case. The rules
    every function keeps are the base class's own (:data:`BASE_RULES`).
    """

    name: str
    test: Callable[..., None]
    #: the arguments of the learner's function a failure of the rule is about (the budget, the seed): where no
    #: line of the learner's is located, the message quotes the lines that use them
    about: tuple[str, ...] = ()
    #: the value of the learner's result a failure of the rule is about, where the rule's value has no stages to
    #: locate it by: (its position in the returned tuple, or ``WHOLE_RESULT``; its name in words). The message
    #: then quotes the learner's lines that make it.
    returns: tuple[int, str] | None = None

    def __call__(self, check: Check, *given: Any) -> None:
        try:
            self.test(check, *given)
        except CheckFailed as failure:
            failure.rule = failure.rule or self.name
            failure.about = failure.about or self.about
            failure.returns = failure.returns or self.returns
            raise


def rule(name: str, about: tuple[str, ...] = (), returns: tuple[int, str] | None = None
         ) -> Callable[[Callable[..., None]], Rule]:
    """``@rule("rows sum to one")`` above a function in a check's class body makes it a :class:`Rule`
    of that name, to be listed in the class's ``rules``; ``about`` names the arguments its failures concern,
    ``returns`` the value of the result they concern."""
    return lambda test: Rule(name, test, about, returns)


#: the name a failure of a check's own ``judge`` (one not yet made of ``rules``) carries
WHOLE_JUDGE = "judge"
#: the name a failure of a check's own ``judge_all`` (one not made of ``rules_across``) carries
ACROSS_CASES = "across cases"


def module_output(result: Any, function: str, case: Case) -> torch.Tensor:
    """The tensor a module's forward returned (a :class:`ModuleResult`'s output), as "`function`'s output"."""
    out = result.output if isinstance(result, ModuleResult) else result
    return expect_tensor(out, tr("`{function}`'s output").format(function=function), case)


def tagged_pair(cases: Sequence[Case], results: Sequence[Any], first: str = "pair-a",
                second: str = "pair-b") -> tuple[Case, Any, Any] | None:
    """For a rule across cases that compares two calls differing in one respect (a future token, the values
    at padded positions): the case tagged ``first`` with both results, or None when the two are not among
    the cases (a hidden run without them, say)."""
    by_tag = {c.tag: (c, r) for c, r in zip(cases, results) if c.tag in (first, second)}
    if first not in by_tag or second not in by_tag:
        return None
    (case, a), (_, b) = by_tag[first], by_tag[second]
    return case, a, b


def case_tensors(case: Case) -> list[torch.Tensor]:
    """The tensors a case gives the function: those of its arguments, then its module's parameters."""
    return [*tensors_in((*case.args, *case.kwargs.values())), *(case.state or {}).values()]


def _deferrable(result: Any) -> bool:
    """An exception that a returned value on another case may explain better (not a stub, not a mismatch)."""
    return isinstance(result, Raised) and not result.is_stub() and result.type != "StateMismatch"


class Check:
    """A graded function's checks. Subclasses define ``cases`` and ``rules`` (or their own ``judge``).

    The base class owns what every check shares: the seed of its cases (:meth:`generator`, derived
    from the check's id), the report of an exception with the hints a check declares (``hints``),
    and the cases of invalid arguments (tagged :data:`INVALID`), which must raise ``invalid_raises``.
    """

    #: the name of the learner's function, as written in the exercise
    function: ClassVar[str]
    #: what the function is compared with, for the success line
    oracle: ClassVar[str] = N_("the reference computation")
    #: functions or layers the learner must not call, because the exercise is to build them
    forbidden: ClassVar[tuple[str, ...]] = ()
    #: further fragments of the names of torch functions and ATen operators that compute the same
    #: thing under another name ("softmin", "group_norm"): the tripwires watch for them too
    forbidden_ops: ClassVar[tuple[str, ...]] = ()
    #: what a forbidden operator is reached by, in the learner's terms, where its name does not say it
    forbidden_note: ClassVar[str] = ""
    #: what to tell a learner whose function raised a given exception (the first that applies)
    hints: ClassVar[tuple[Hint, ...]] = ()
    #: the exception that cases tagged "invalid" must raise
    invalid_raises: ClassVar[str] = "ValueError"
    #: for such a case: what to tell a learner who raised another exception instead
    invalid_hint: ClassVar[str] = N_("raise ValueError with a message that says what is wrong.")
    #: for such a case: what to tell a learner whose function returned ({name}, {label}, {got}, {argument})
    invalid_returned: ClassVar[str] = N_("{name} returned {got} on the case {label}: raise ValueError instead.")
    #: the argument the invalid cases get wrong, which the refusal's message must name ("": any message will do)
    invalid_argument: ClassVar[str] = ""
    #: judge every returned value before reporting an exception another case raised: a wrong value names
    #: a mistake more precisely than the exception the same mistake raises elsewhere
    values_first: ClassVar[bool] = False

    @property
    def check_id(self) -> str:
        """"<notebook>.<function>", as the notebooks call the check."""
        module = type(self).__module__
        notebook = module.removeprefix(CHECKS_PACKAGE + ".").split(".")[0]
        return f"{notebook}.{self.function}"

    def seed(self, *parts: Any) -> int:
        """A seed of this check's own: no other check, and no other ``parts``, draws from it."""
        return stable_seed(self.check_id, *parts)

    def generator(self, hidden: bool, *parts: Any) -> torch.Generator:
        """The generator the visible (or hidden) cases draw from; ``parts`` name a further stream.

        Hidden cases draw from the course secret (:mod:`autograder.course_secret`): the course's
        code alone cannot rebuild them."""
        if hidden:
            return seeded(stable_seed(self.check_id, *parts, key=course_secret.current()))
        return seeded(self.seed("visible", *parts))

    def cases(self, hidden: bool) -> list[Case]:
        raise NotImplementedError

    #: what a result must be, each a named :class:`Rule` run by :meth:`judge` in this order
    rules: ClassVar[tuple[Rule, ...]] = ()
    #: properties that span several calls (a masked value changes nothing), run by :meth:`judge_all`
    rules_across: ClassVar[tuple[Rule, ...]] = ()

    def judge(self, case: Case, result: Any) -> None:
        """Raise CheckFailed if ``result`` is wrong for ``case`` (never called on invalid cases): the first
        of ``rules`` that fails."""
        if not self.rules:
            raise NotImplementedError
        for i, each in enumerate(self.rules):
            try:
                each(self, case, result)
            except CheckFailed as failure:
                if failure.names is not None and failure.plain is None:
                    failure.plain, failure.plain_rule = self._later_message(self.rules[i + 1:], case, result)
                raise

    def _later_message(self, later: Sequence[Rule], case: Case, result: Any) -> tuple[str, str]:
        """What the rules after one that named a mistake say of a result (the message and the rule), for
        when that mistake does not explain every failing case: a rule of known mistakes leaves the words
        for an unexplained value to the rules that describe the value."""
        for each in later:
            try:
                each(self, case, result)
            except CheckFailed as failure:
                return str(failure), failure.rule
        return tr("`{function}`'s result is wrong on the case {case}.").format(function=self.function, case=case.label), ""

    def worked_out(self, case: Case, what: Callable[[Case], Any]) -> Any:
        """``what(case)`` (the oracle's value, say), worked out once for the case being judged however many
        of its rules ask for it."""
        memo = self.__dict__.get("_worked_out")
        if memo is None or memo[0] is not case:
            memo = self.__dict__["_worked_out"] = (case, {})
        if what not in memo[1]:
            memo[1][what] = what(case)
        return memo[1][what]

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        """Properties that span several calls (e.g. a masked value changes nothing); valid cases only:
        the first of ``rules_across`` that fails."""
        for each in self.rules_across:
            each(self, cases, results)

    @staticmethod
    def explaining_mistake(cases: Sequence[Case], results: Sequence[Any],
                           mistakes: Sequence[tuple[Callable[..., Any], str]]) -> str | None:
        """The message of the first catalogued mistake that gives every one of ``results`` on its case, or None.
        On one case several mistakes can give the same value, so a mistake is named only when it explains
        all of them."""
        for mistaken, message in mistakes:
            if all(mistaken(*c.args) == r for c, r in zip(cases, results)):
                return message
        return None

    def wrong_argument(self, case: Case) -> str:
        """The argument an invalid case gets wrong (``invalid_argument`` unless the cases differ)."""
        return self.invalid_argument

    def refusal_lacks(self, case: Case, message: str) -> str:
        """What the message of a right refusal (``invalid_raises`` on an invalid case) should say but
        does not, or "": by default, the name of the wrong argument."""
        argument = self.wrong_argument(case)
        spellings = {argument, argument.replace("_", "-"), argument.replace("_", " ")}
        if not argument or any(name in message.lower() for name in spellings):
            return ""
        return tr('right, but say which argument is wrong and why, for instance '
                  'ValueError(f"{argument} must be ..., got {{{argument}}}").').format(argument=argument)

    def stages(self, case: Case) -> list[Stage]:
        """The stages of the course's computation of ``case``, in order, the last being the result
        (see :mod:`autograder.locate`); a check that lists them has its learners' lines traced, so
        that a wrong value nobody catalogued is located at the line where it first goes wrong."""
        return []

    def traces(self, case: Case, hidden: bool) -> bool:
        """Whether the learner's lines are traced on ``case``: on the visible cases of a check that locates, except
        a large one, whose loops the trace would slow many times over and whose values nothing locates."""
        return self.traced and not hidden and not case.large

    @property
    def traced(self) -> bool:
        return type(self).stages is not Check.stages

    def verdict(self, cases: Sequence[Case], results: Sequence[Any], observed: Sequence[Observed | None] = ()) -> str:
        """Judge every result; return the success line or raise CheckFailed.

        The valid cases come first (a wrong value is bigger news than a missing refusal), each
        phase in the order of the cases: what is not a result, the results, the properties that
        span several calls, the rules every function keeps (:meth:`judge_effects`); then the
        invalid cases. ``observed`` holds what each call did besides returning, where it was
        recorded (:mod:`harness.observe`).
        """
        seen = list(observed) + [None] * (len(cases) - len(observed))
        valid = [(c, r, o) for c, r, o in zip(cases, results, seen) if c.tag != INVALID]
        late = [(c, r, o) for c, r, o in valid if self.values_first and _deferrable(r)]
        early = [(c, r, o) for c, r, o in valid if not (self.values_first and _deferrable(r))]
        for case, result, seen_ in early:
            self._reject(case, result, seen_)
            self.judge_dtype(case, result)
        self._judge_each(early)
        for case, result, seen_ in late:
            self._reject(case, result, seen_)
            self.judge_dtype(case, result)
        try:
            self.judge_all([c for c, _, _ in valid], [r for _, r, _ in valid])
        except CheckFailed as failure:
            failure.rule = failure.rule or ACROSS_CASES
            own = next((o for c, _, o in valid if c is failure.case), None) if failure.case else None
            seen_ = own or next((o for _, _, o in valid if o), None)  # the source is every case's
            # in the order _judge_each says them: a default the case relies on is the cause, whatever the values show
            default = self._default_relied_on(failure.case, failure, seen_)
            where = self.where_values_part(failure.case, own) if failure.names is None and own and not default else ""
            if where:
                raise _failure(f"{failure}\n{where}", unexplained=True, rule=failure.rule) from None
            hint = default or self._unlocated(failure.case, failure, seen_)
            if hint:
                raise _failure(f"{failure}\n{hint}", unexplained=failure.unexplained, rule=failure.rule) from None
            raise
        for case, result, seen_ in valid:
            if seen_ is not None and not isinstance(result, (Raised, UsedForbidden)):
                self.judge_effects(case, seen_)
        for case, result, seen_ in zip(cases, results, seen):
            if case.tag == INVALID:
                self._reject(case, result)
                self._judge_refusal(case, result, seen_)
        return tr("✓ {function}: all {count} cases agree with {oracle}").format(
            function=self.function, count=len(cases), oracle=tr(self.oracle))

    def _judge_each(self, triples: Sequence[tuple[Case, Any, Observed | None]]) -> None:
        """``judge`` on each case in turn. A message that names a catalogued mistake is kept only when
        no other failing case contradicts it (a wrong value it does not explain, or another mistake);
        any other message about a value gets the place where the learner's values part, when traced."""
        first, common = None, ()
        for case, result, seen in triples:
            try:
                self.judge(case, result)
            except CheckFailed as failure:
                failure.rule = failure.rule or WHOLE_JUDGE
                if first is None:
                    first, common = (failure, case, seen), failure.names or ()
                    if failure.names is None:
                        break
                elif failure.unexplained or failure.names is not None:
                    common = tuple(k for k in common if k in (failure.names or ()))
                    if not common:
                        break
        if first is None:
            return
        failure, case, seen = first
        if failure.names is not None:
            if not common:
                failure = _failure(failure.plain, unexplained=True, rule=failure.plain_rule or failure.rule)
            elif common[0] != failure.names[0]:  # the mistake that explains every case, in this case's words
                renamed = _failure(failure.what + failure.advice[common[0]], rule=failure.rule)
                renamed.names, renamed.plain, renamed.what = common, failure.plain, failure.what
                renamed.advice = {k: failure.advice[k] for k in common}
                failure = renamed
        if failure.names is None:
            where = (self._default_relied_on(case, failure, seen) or self.where_values_part(case, seen)
                     or self._unlocated(case, failure, seen))
            if where:
                failure = _failure(f"{failure}\n{where}", unexplained=failure.unexplained, rule=failure.rule)
        raise failure

    def _default_relied_on(self, case: Case | None, failure: CheckFailed, seen: Observed | None) -> str:
        """Where the learner's ``def`` line gives an argument the failing case leaves out another default than the
        exercise's: the sentence that says so (the cause, whatever the values show), else ""."""
        reference = self._reference_function()
        if seen is None or not seen.code or failure.names is not None or case is None or case.init is not None \
                or reference is None:
            return ""
        try:
            parameters = list(inspect.signature(reference).parameters.values())
        except (TypeError, ValueError):
            return ""
        given = {p.name for p in parameters[:len(case.args)]} | set(case.kwargs)
        defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
        return default_differs(seen.code, self.function, defaults, given)

    def _unlocated(self, case: Case | None, failure: CheckFailed, seen: Observed | None) -> str:
        """For a failure no line is located for: the learner's lines that use the arguments it is about, or those
        that make the value of the result it is about; or ""."""
        if seen is None or not seen.code or failure.names is not None:
            return ""
        if failure.about:
            return readers(seen.code, self.function, failure.about)
        if not failure.returns:
            return ""
        returned = next((s.line for s in reversed(seen.steps) if s.made_by == "return" and s.function == self.function),
                        None)
        part, what = failure.returns  # what: the value's name in words, a check's constant marked N_()
        return made_on(seen.code, self.function, part, tr(what), returned_on=returned)

    def _reference_function(self) -> Callable | None:
        """The course's own version of the graded function, whose signature is the exercise's."""
        notebook = type(self).__module__.split(".")[2] if type(self).__module__.startswith("autograder.checks.") else ""
        try:
            return getattr(importlib.import_module(f"reference.{notebook}"), self.function, None) if notebook else None
        except ImportError:
            return None

    def where_values_part(self, case: Case, seen: Observed | None) -> str:
        """The sentence that locates a wrong value in the learner's lines, or ""."""
        compared = self._compared(case, seen)
        return locate(seen.steps, *compared, seen.truncated, code=seen.code, held=seen.held, ran=seen.ran) \
            if compared else ""

    #: whether a crash on a wrong value is followed back to the earlier line that made it; off where the values
    #: past the stages (those of a later step, or of a random choice made another right way) would blame a right line
    crash_followed_back: ClassVar[bool] = True

    def where_crash_began(self, case: Case, seen: Observed | None, at: tuple[int, str] | None = None) -> str:
        """For a call that raised: whether what the torch operation that raised was given is right, and if not,
        the earlier line that first made a value none of the computation's; where neither, what the line that
        raised (``at``, when no torch operation did) depends on that the record cannot check; or ""."""
        compared = self._compared(case, seen)
        if compared:
            return locate_crash(seen.steps, *compared, code=seen.code, held=seen.held, at=at,
                                follow_back=self.crash_followed_back)
        # no value to compare (it crashed before making one, or the check has no stages): what the line depends on
        return unchecked(seen.code, seen.held, at[1], at[0], compared=False) if at is not None and seen is not None \
            else ""

    def _compared(self, case: Case, seen: Observed | None) -> tuple | None:
        """What the learner's trace is compared with: the stages of ``case``, its input tensors, and the
        agreement of two values; None when there is no trace or no stage applies."""
        if seen is None or not seen.steps or not self.traced:
            return None
        try:
            stages = self.stages(case)
        except Exception:  # a stage that does not apply to this case: say nothing rather than guess
            return None
        if not stages:  # none for this case (its values are kept by their shapes only, say)
            return None
        inputs = tensors_in((*case.args, *case.kwargs.values()))
        dtype = next((t.dtype for t in inputs if t.is_floating_point()), None)
        if case.state:
            dtype = next((t.dtype for t in case.state.values() if t.is_floating_point()), dtype)
        return stages, inputs, lambda a, e: reproduces(a, e, dtype, tighter=10.0)

    #: the dtype of every floating tensor returned: "arguments" (the one PyTorch promotes the case's floating
    #: arguments and module parameters to), a torch.dtype, or None where the check judges it itself
    result_dtype: ClassVar[Any] = "arguments"

    def judge_dtype(self, case: Case, result: Any) -> None:
        """Fail when a floating tensor of ``result`` is not in ``result_dtype``: a learner who made a tensor with
        a fixed dtype (``torch.tensor(1.0)``, ``dtype=torch.float32``, ``.float()``) silently changes the
        precision the caller chose, and a float64 check can no longer tell right from nearly right."""
        self._dtype(self, case, result)

    @rule("dtype")
    def _dtype(self, case: Case, result: Any) -> None:
        expected, from_inputs = self.result_dtype, False
        if expected == "arguments":
            values = case_tensors(case)
            dtypes = [t.dtype for t in values if t.is_floating_point()]
            if not dtypes:
                return
            # float64 inputs to a float32 module give float64, as PyTorch's own arithmetic does
            expected, from_inputs = functools.reduce(torch.promote_types, dtypes), True
        if expected is None:
            return
        output = result.output if isinstance(result, ModuleResult) else result
        found = [(i, t) for i, t in enumerate(tensors_in(output)) if t.is_floating_point() and t.dtype != expected]
        if found:
            i, t = found[0]
            what = (tr("`{function}`'s result") if isinstance(output, torch.Tensor)
                    else tr("value {index} of what `{function}` returned")).format(function=self.function, index=i + 1)
            message = (tr("{what} has dtype {dtype} but the inputs were {expected} on the case {case}: keep the input's "
                          "dtype (a tensor made with a fixed dtype, such as torch.tensor(1.0) or dtype=torch.float32, or "
                          "a .float(), changes it).") if from_inputs else
                       tr("{what} has dtype {dtype} but the exercise asks for {expected} on the case {case}: keep the "
                          "input's dtype (a tensor made with a fixed dtype, such as torch.tensor(1.0) or "
                          "dtype=torch.float32, or a .float(), changes it)."))
            raise CheckFailed(message.format(what=what, dtype=t.dtype, expected=expected, case=case.label))

    #: the result follows the arguments to their device (probed on one visible case, :mod:`harness.probes`);
    #: off for functions that draw from a generator the caller holds on the CPU
    follows_device: ClassVar[bool] = True
    #: a model trains through the function: gradients must reach its arguments and parameters (probed)
    trained_through: ClassVar[bool] = False

    def probe_plan(self, cases: Sequence[Case]) -> list[tuple[str, ...]]:
        """The probes to run beside each of ``cases`` (visible ones): each probe once, on the valid case with
        floating tensors (in its arguments or its module's parameters) that gives the function the most
        tensors, so that its optional ones (a mask, say) are used; for the gradient, one without dropout
        where there is one."""
        def tensors(case: Case) -> int:
            values = case_tensors(case)
            provided = any(isinstance(a, Provided) for a in (*case.args, *case.kwargs.values()))
            usable = case.tag != INVALID and not provided and any(t.is_floating_point() for t in values)
            return len(values) if usable else 0

        counts = [tensors(c) for c in cases]
        plan: list[list[str]] = [[] for _ in cases]
        if max(counts, default=0) == 0:
            return [()] * len(cases)
        if self.follows_device:
            plan[counts.index(max(counts))].append("device")
        if self.trained_through:
            calm = [n if not c.train else 0 for n, c in zip(counts, cases)]
            plan[(calm if max(calm) else counts).index(max(calm) or max(counts))].append("gradient")
        return [tuple(p) for p in plan]

    #: the exercise lets the function return a view of an argument (a reshape, say)
    may_return_view: ClassVar[bool] = False
    #: attributes the exercise says to store detached from the autograd graph
    detached_attributes: ClassVar[tuple[str, ...]] = ()

    def judge_effects(self, case: Case, seen: Observed) -> None:
        """The rules every graded function keeps beside its values: it leaves the caller's arguments
        as they were, returns no view of them unless the exercise allows it, stores detached what the
        exercise says to store detached, and keeps its result attached to the parameters it trains."""
        for each in self._EFFECTS:
            each(self, case, seen)

    @rule("unchanged arguments")
    def _unchanged(self, case: Case, seen: Observed) -> None:
        if seen.written:
            args = ", ".join(f"`{a}`" for a in seen.written)
            line = next((s for s in seen.steps if _writes_in_place(s.made_by)), None)
            raise CheckFailed(tr(
                "`{function}` changed the caller's {args} in place on the case {case}{line}: a function must leave its "
                "arguments as they were, or the caller's tensor silently changes. An operation ending in `_` (`sub_`, "
                "`masked_fill_`), `x -= ...` or `x[...] = ...` writes into the tensor you were given; compute a new one "
                "instead (`x = x - m`)."
            ).format(function=self.function, args=args, case=case.label,
                     line=tr(" (line {line}: `{source}`)").format(line=line.line, source=line.source) if line else ""))

    @rule("no view")
    def _no_view(self, case: Case, seen: Observed) -> None:
        if seen.aliased and not self.may_return_view:
            args = ", ".join(f"`{a}`" for a in seen.aliased)
            raise CheckFailed(tr(
                "`{function}` returned a view of its argument {args} on the case {case} (the two share memory): a "
                "caller who then changes one changes the other. Return a new tensor (an arithmetic result, or "
                "`.clone()`)."
            ).format(function=self.function, args=args, case=case.label))

    @rule("detached")
    def _detached(self, case: Case, seen: Observed) -> None:
        stored = [a for a in seen.attached if a in self.detached_attributes]
        if stored:
            raise CheckFailed(tr(
                "`{function}` stores `{name}` still attached to the autograd graph on the case {case}: the exercise "
                "says to store it detached (`self.{name} = weights.detach()`), so that keeping it for a plot does not "
                "keep the whole graph of the step alive."
            ).format(function=self.function, name=stored[0], case=case.label))

    @rule("device")
    def _device(self, case: Case, seen: Observed) -> None:
        device = seen.findings.get("device", ())
        if device:
            raise CheckFailed(device_message(f"`{self.function}`", case, device))

    @rule("gradient")
    def _gradient(self, case: Case, seen: Observed) -> None:
        gradient = seen.findings.get("gradient", ())
        if gradient:
            raise CheckFailed(gradient_message(f"`{self.function}`", case, gradient))

    _EFFECTS = (_unchanged, _no_view, _detached, _device, _gradient)

    def _reject(self, case: Case, result: Any, seen: Observed | None = None) -> None:
        try:
            self.reject_non_results(case, result)
        except CheckFailed as failure:
            if isinstance(result, Raised):
                guard = result.details.get("guard")
                if guard and case.tag != INVALID:
                    failure = _failure(tr(
                        "{failure}\nThis case is valid, so the condition that sent your function to that raise, "
                        "line {line}, `{source}`, should not hold on it.").format(
                            failure=failure, line=guard[0], source=guard[1]),
                        unexplained=failure.unexplained, rule=failure.rule)
                at = result.line_at()
                if guard and case.tag != INVALID and at is not None and guard[0].isdigit():
                    at = (int(guard[0]), at[1])  # a guard sent a valid case to a raise: what its condition depends on
                began = self.where_crash_began(case, seen, at) if case.tag != INVALID and _deferrable(result) else ""
                # a default of the learner's own that the case relies on is the cause, wherever the crash shows
                began = (self._default_relied_on(case, failure, seen) if case.tag != INVALID else "") or began
                if began:
                    failure = _failure(f"{failure}\n{began}", unexplained=failure.unexplained, rule=failure.rule)
                failure.learner_frames = result.frames  # the learner's traceback goes with the message
            raise failure from None

    def _judge_refusal(self, case: Case, result: Any, seen: Observed | None = None) -> None:
        try:
            self._refuses(self, case, result)
        except CheckFailed as failure:
            # the learner's refusals that did not run, with their conditions
            said = refusals(seen.code, self.function) if seen is not None else ""
            if said:
                raise _failure(f"{failure}\n{said}", unexplained=failure.unexplained, rule=failure.rule) from None
            raise
        self._refusal_names(self, case, result)

    @rule("refusal")
    def _refuses(self, case: Case, result: Any) -> None:
        if not isinstance(result, Raised):
            raise CheckFailed(tr(self.invalid_returned).format(
                name=f"`{self.function}`", label=case.label, got=describe(result), argument=self.wrong_argument(case)))

    @rule("refusal names the argument")
    def _refusal_names(self, case: Case, result: Raised) -> None:
        lacks = self.refusal_lacks(case, result.message)
        if lacks:
            raise CheckFailed(tr("`{function}` raised {error}({message}) on the case {case}: {lacks}").format(
                function=self.function, error=result.type, message=repr(result.message), case=case.label, lacks=lacks))

    def reject_non_results(self, case: Case, result: Any) -> None:
        """Fail on what is not a result: a forbidden call, an exception (on a valid case, or the wrong one on an
        invalid case), None."""
        for each in self._NON_RESULTS:
            each(self, case, result)

    @rule("no forbidden built-in")
    def _not_forbidden(self, case: Case, result: Any) -> None:
        if isinstance(result, UsedForbidden):
            raise CheckFailed(tr(
                "`{function}` calls {names}, which this exercise asks you to build yourself{note}; write it with "
                "basic tensor operations instead."
            ).format(function=self.function, names=", ".join(result.names),
                     note=tr(" ({note})").format(note=tr(self.forbidden_note)) if self.forbidden_note else ""))

    @rule("implemented")
    def _implemented(self, case: Case, result: Any) -> None:
        if isinstance(result, Raised) and result.is_stub():
            name = f"`{self.function}`"
            owner = result.origin.split(".")[0]
            if owner and owner != self.function:
                raise CheckFailed(tr(
                    "{name} could not run because `{origin}` is not implemented yet: it calls `{owner}`, so finish "
                    "that first (its own test cell comes earlier)."
                ).format(name=name, origin=result.origin, owner=owner))
            raise CheckFailed(tr(
                "{name} is not implemented yet: replace `raise NotImplementedError()` with your code."
            ).format(name=name))

    @rule("refusal")
    def _refused_rightly(self, case: Case, result: Any) -> None:
        """On an invalid case, raising ``invalid_raises`` is the right answer; any other exception is not."""
        if isinstance(result, Raised) and case.tag == INVALID and result.type not in (self.invalid_raises, "StateMismatch"):
            raise CheckFailed(
                tr("`{function}` raised {error} ({message}) on the case {case}; {hint}").format(
                    function=self.function, error=result.type, message=raised_text(result), case=case.label,
                    hint=tr(self.invalid_hint))
                + raised_where(result)
            )

    def _hinted(self, case: Case, result: Raised) -> None:
        for hint in self.hints:
            message = hint.message(f"`{self.function}`", case, result)
            if message:
                raise CheckFailed(message)

    @rule("parameters match")
    def _parameters_match(self, case: Case, result: Any) -> None:
        if isinstance(result, Raised) and result.type == "StateMismatch":
            self._hinted(case, result)
            raise CheckFailed(tr("`{function}`'s parameters do not match the exercise on the case {case}: {message}")
                              .format(function=self.function, case=case.label, message=raised_text(result)))

    @rule("raises nothing")
    def _raises_nothing(self, case: Case, result: Any) -> None:
        if isinstance(result, Raised) and case.tag != INVALID and result.type != "StateMismatch":
            self._hinted(case, result)
            raise CheckFailed(raised_message(f"`{self.function}`", case, result))

    @rule("returns a value")
    def _returns_a_value(self, case: Case, result: Any) -> None:
        if result is None or (isinstance(result, ModuleResult) and result.output is None):
            raise CheckFailed(tr("`{function}` returned None on the case {case}: did you forget `return`?").format(
                function=self.function, case=case.label))

    _NON_RESULTS = (_not_forbidden, _implemented, _refused_rightly, _parameters_match, _raises_nothing, _returns_a_value)


class LossCheck(Check):
    """A check of a training loss over targets some of which are padding. Its first rule is the loss's form
    (:func:`expect_loss`: a 0-dimensional finite tensor, NaN where every target is padding); a subclass names
    the loss (``what``), what it averages (``mean_of``) and how to compute it stably (``stable_hint``), says
    which targets are real (:meth:`real_targets`), and lists ``rules = (LossCheck._loss, <its values>)``, whose
    values rule judges only a case with something to average (:meth:`nothing_to_average`)."""

    what: ClassVar[str]
    mean_of: ClassVar[str]
    stable_hint: ClassVar[str]

    def real_targets(self, case: Case) -> torch.Tensor:
        raise NotImplementedError

    def nothing_to_average(self, case: Case) -> bool:
        return not bool(self.real_targets(case).any())

    @rule("a scalar loss, NaN when every target is padding")
    def _loss(self, case: Case, result: Any) -> None:
        expect_loss(result, tr(self.what), case, case.args[0].dtype, tr(self.mean_of), tr(self.stable_hint),
                    nothing_to_average=self.nothing_to_average(case))


#: the rules every check keeps, the base class's own: what is not a result, the dtype, what a call must leave
#: alone, the refusal of invalid arguments
BASE_RULES: tuple[Rule, ...] = (*Check._NON_RESULTS, Check._dtype, *Check._EFFECTS, Check._refuses, Check._refusal_names)
#: the names a failure can carry besides its rules': a whole judge or judge_all of a check's own, and the
#: learner's function not callable or not ending in time
OTHER_RULE_NAMES = (WHOLE_JUDGE, ACROSS_CASES, "callable", "ends in time")  # english: rule names


def rule_names(check: Check) -> tuple[str, ...]:
    """Every name a failure of ``check`` can carry (:attr:`CheckFailed.rule`)."""
    return tuple(dict.fromkeys(r.name for r in (*BASE_RULES, *check.rules, *check.rules_across))) + OTHER_RULE_NAMES


def device_message(name: str, case: Case, finding: tuple[str, ...]) -> str:
    """What the device probe's ``finding`` (:mod:`harness.probes`) tells the learner."""
    moved = tr("on the case {case}, run again with its arguments moved to another device (PyTorch's `meta` device, "
               "standing in for a GPU)").format(case=case.label)
    create = tr("create each tensor beside the arguments: `torch.zeros(..., device=x.device)`, "
                "`torch.arange(T, device=x.device)`, or `x.new_zeros(...)`.")
    if finding[0] == "raised":
        # the five parts of where it raised (harness.probes), then the plain tensor attributes
        where = where_text(finding[1:6]) if len(finding) >= 6 else ""
        where = tr(" ({where})").format(where=where) if where else ""
        attributes = [a for a in finding[6:] if a]
        kept = tr(" `{attribute}` is a plain tensor attribute, which `.to(device)` leaves on the CPU: keep it with "
                  "`self.register_buffer(\"{buffer}\", ...)` instead.").format(
                      attribute=attributes[0], buffer=attributes[0].removeprefix("self.")) if attributes else ""
        return tr("{name} mixes a tensor made on the CPU with its arguments {moved}, and that raised a device "
                  "mismatch{where}: on a GPU it would fail the same way.{kept} ").format(
                      name=name, moved=moved, where=where, kept=kept) + create[0].upper() + create[1:]
    part = (finding[1] if len(finding) > 1 else "the result").removeprefix("the ")
    on = finding[2] if len(finding) > 2 else "CPU"
    # the probe names a value of the result by its path, "result" or "result[0]" ("the result" less "the ")
    index = part.removeprefix("result") if part.startswith("result") else None
    stays = (tr("{name}'s result stays on the {device} {moved}: ") if part == "result"
             else tr("{name}'s result{index} stays on the {device} {moved}: ") if index is not None
             else tr("{name}'s {part} stays on the {device} {moved}: "))
    return stays.format(name=name, part=part, index=index, device=on, moved=moved) + create


def gradient_message(name: str, case: Case, finding: tuple[str, ...]) -> str:
    """What the gradient probe's ``finding`` (:mod:`harness.probes`) tells the learner."""
    cut = tr("`.detach()`, `.data`, `.item()` or `.tolist()` and back, `torch.no_grad()`, or a tensor rebuilt with "
             "`torch.tensor(...)`")
    if finding[0] == "detached":
        names = [n for n in finding[1:] if n]
        if names and all(n.startswith("self.") for n in names):
            what = tr("its parameters")
        elif names:
            what = functools.reduce(lambda earlier, later: tr("{earlier} and {later}").format(
                earlier=earlier, later=later), [f"`{n}`" for n in names[:4]])
        else:
            what = tr("its inputs")
        one = len(names) == 1 and not names[0].startswith("self.")
        return (tr("{name}'s result on the case {case} does not require a gradient although {what} does: it is cut "
                   "off from the autograd graph, so `loss.backward()` could never train what made it. Look for {cut} "
                   "on the way to the result.") if one else
                tr("{name}'s result on the case {case} does not require a gradient although {what} do: it is cut off "
                   "from the autograd graph, so `loss.backward()` could never train what made it. Look for {cut} on "
                   "the way to the result.")).format(name=name, case=case.label, what=what, cut=cut)
    leaf, autograd, change = (list(finding[1:4]) + ["", "", ""])[:3]
    reaching = tr("the gradient reaching `{leaf}`").format(leaf=leaf) if leaf else tr("its gradient")
    numbers = (tr(": along a random direction autograd gives {autograd}, while the result itself changes by {change}")
               .format(autograd=autograd, change=change) if autograd and change else "")
    return tr("{name}'s values are right but {reaching} is wrong on the case {case}{numbers}. Part of the computation "
              "that depends on {depends} is cut off from the autograd graph: look for {cut}.").format(
                  name=name, reaching=reaching, case=case.label, numbers=numbers,
                  depends=f"`{leaf}`" if leaf else tr("its inputs"), cut=cut)


def _mistake_key(advice: str) -> str:
    """One mistake's advice, whatever numbers it quotes: "normalised along dim=1, not dim=0" on one
    case and "dim=3, not dim=1" on another are the same mistake (ignoring ``dim``)."""
    return re.sub(r"-?\d+(\.\d+)?", "#", advice)


def failure_on(case: Case, message: str, returns: tuple[int, str] | None = None) -> CheckFailed:
    """A failure of a rule across cases (``rules_across``) that is about the value of one case: the verdict
    locates that case's wrong value in the learner's lines (``returns``: which value of the result, as
    :attr:`Rule.returns` says it, for where no stage locates it)."""
    failure = CheckFailed(message)
    failure.case, failure.returns = case, returns
    return failure


def _failure(message: str, unexplained: bool = False, rule: str = "") -> CheckFailed:
    failure = CheckFailed(message)
    failure.unexplained, failure.rule = unexplained, rule
    return failure


#: how the trace names operators that write into their input
_IN_PLACE = ("isub", "iadd", "imul", "itruediv", "idiv", "ipow", "setitem")


def _writes_in_place(made_by: str) -> bool:
    op = made_by.rsplit(".", 1)[-1]
    return op.endswith("_") and not op.startswith("_") or op in _IN_PLACE


def raised_message(name: str, case: Case, result: Raised) -> str:
    """"`f` raised X on the case ...: message", with the learner's line that raised it."""
    return tr("{name} raised {error} on the case {case}: {message}").format(
        name=name, error=result.type, case=case.label, message=raised_text(result)) + raised_where(result)


def raised_where(result: Raised) -> str:
    """The line under a report of what ``result`` raised: where it happened ("in your `f`, line 3 of its
    cell: ..."), in the learner's language, from the parts the harness sends (its own words otherwise)."""
    if not result.where:
        return ""
    parts = result.details.get("where")
    if not parts or len(parts) != 5:
        return f"\n  ({result.where.strip()})"
    return f"\n  ({where_text(parts)})"


def where_text(parts: Sequence[str]) -> str:
    """Where the learner's code raised, from the five parts the harness sends (``Raised.details["where"]``: the
    course's function it raised inside, the learner's function, the line's number, its place and its text), in
    the learner's language; "" where they name neither function."""
    inside, function, line, place, source = parts
    if not function and not inside:
        return ""
    if not function:
        where = tr("raised inside the course's `{inside}`").format(inside=inside)
    else:
        source = tr(": {source}").format(source=source) if source else ""
        # a cell and a file are named apart: in Chinese the line's number follows a cell without a space
        if place == "its cell":
            where = (tr("raised inside the course's `{inside}`, called from your `{function}`, line {line} of its "
                        "cell{source}") if inside else tr("in your `{function}`, line {line} of its cell{source}"))
        else:
            where = (tr("raised inside the course's `{inside}`, called from your `{function}`, line {line} of "
                        "{place}{source}") if inside else tr("in your `{function}`, line {line} of {place}{source}"))
        where = where.format(inside=inside, function=function, line=line, place=place, source=source)
    return where[:500].strip()


def called_and_judged(check: Check, cases: Sequence[Case], call: Callable[[int], tuple[Any, Any]]) -> str:
    """Call ``cases`` with ``call(index)`` (the result and what the call did besides) and judge them; the
    success line, or CheckFailed. The large cases (:attr:`Case.large`) are called last, and only once the
    others pass: a wrong answer is told at once, not after its longest case."""
    rounds = [[i for i, c in enumerate(cases) if not c.large], [i for i, c in enumerate(cases) if c.large]]
    done: dict[int, tuple[Any, Any]] = {}
    verdict = ""
    for indices in (r for r in rounds if r):
        for i in indices:
            done[i] = call(i)
        order = sorted(done)
        verdict = check.verdict([cases[i] for i in order], [done[i][0] for i in order], [done[i][1] for i in order])
    return verdict


def run_check(check: Check, fn: Callable, hidden: bool = False, call_seconds: float | None = None) -> str:
    """Run a check entirely in this process, as the notebooks do, each call under the grader's time limit."""
    from harness.call_limit import CallTimedOut, call_time_limit

    from .time_limit import call_seconds_default, case_seconds, endless_loop_message, stopped_message, timed_out

    if not callable(fn):
        raise _failure(tr("expected the function `{function}`, got {kind}").format(
            function=check.function, kind=type(fn).__name__), rule="callable")
    limit = call_seconds_default() if call_seconds is None else call_seconds
    cases = check.cases(hidden)
    wires = Tripwires(check.forbidden, check.forbidden_ops)
    plan = check.probe_plan(cases) if not hidden else [()] * len(cases)

    def call(index: int) -> tuple[Any, Observed]:
        case, probes, seconds = cases[index], plan[index], case_seconds(limit, cases[index])
        observer = Observer(trace=check.traces(case, hidden), source=not hidden)
        try:
            with call_time_limit(seconds):
                start = time.monotonic()
                result = call_learner(fn, case, wires, observer)
            if timed_out(result):
                raise _failure(stopped_message(check.function, seconds, case.label, result, observer.observed()),
                               rule="ends in time")
            if probes and not isinstance(result, (Raised, UsedForbidden)):
                with call_time_limit(seconds + PROBE_SECONDS):
                    observer.findings = probe(fn, case, probes, time.monotonic() - start)
        except CallTimedOut:
            raise _failure(endless_loop_message(check.function, seconds, case.label), rule="ends in time") from None
        return result, observer.observed()

    return called_and_judged(check, cases, call)


# --------------------------------------------------------------------------------------------
# Helpers for judges: each either passes silently or fails with a message a learner can act on.
# --------------------------------------------------------------------------------------------

TOLERANCES = {
    torch.float64: (1e-9, 1e-7),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 2e-2),
    torch.bfloat16: (1e-2, 4e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for comparing a result computed in ``dtype`` with a float64 oracle."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def then(sentence: str, more: str) -> str:
    """``more`` after the sentence ``sentence``, joined as the learner's language joins them (English: a space)."""
    return tr("{sentence} {more}").format(sentence=sentence, more=more)


def expect_tensor(value: Any, what: str, case: Case) -> torch.Tensor:
    what = tr(what)
    if isinstance(value, Opaque):
        raise CheckFailed(tr("{what} on the case {case} is a {kind}, not a torch.Tensor.").format(
            what=what, case=case.label, kind=opaque_kind(value)))
    if not isinstance(value, torch.Tensor):
        raise CheckFailed(tr("{what} on the case {case} is a {kind}, not a torch.Tensor.").format(
            what=what, case=case.label, kind=type(value).__name__))
    return value


def expect_tuple(value: Any, length: int, what: str, case: Case, names: str) -> tuple:
    if not isinstance(value, (tuple, list)) or len(value) != length:
        what = tr(what)
        got = (tr("a {kind}").format(kind=type(value).__name__) if not isinstance(value, (tuple, list))
               else tr("{count} values").format(count=len(value)))
        raise CheckFailed(tr("{what} should return {length} values ({names}) but returned {got} on the case {case}.")
                          .format(what=what, length=length, names=names, got=got, case=case.label))
    return tuple(value)


def expect_shape(t: torch.Tensor, shape: Sequence[int], what: str, case: Case, hint: str = "") -> None:
    if tuple(t.shape) != tuple(shape):
        message = tr("{what} has shape {shape} but should have shape {expected} on the case {case}.").format(
            what=tr(what), shape=tuple(t.shape), expected=tuple(shape), case=case.label)
        raise CheckFailed(then(message, tr(hint)) if hint else message)


def expect_dtype(t: torch.Tensor, dtype: torch.dtype, what: str, case: Case) -> None:
    if t.dtype != dtype:
        raise CheckFailed(tr(
            "{what} has dtype {dtype} but the inputs were {expected} on the case {case}: keep the input's dtype "
            "(avoid creating tensors with a fixed dtype such as torch.tensor(1.0))."
        ).format(what=tr(what), dtype=t.dtype, expected=dtype, case=case.label))


def expect_finite(t: torch.Tensor, what: str, case: Case, hint: str) -> None:
    if not torch.isfinite(t).all():
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        value = t[tuple(bad)].item()
        raise CheckFailed(then(tr("{what} contains {value} (first at index {index}) on the case {case}.").format(
            what=tr(what), value=value, index=tuple(bad), case=case.label), tr(hint)))


def expect_loss(result: Any, what: str, case: Case, dtype: torch.dtype, mean_of: str, stable_hint: str,
                nothing_to_average: bool = False) -> torch.Tensor:
    """A training loss: a 0-dimensional, finite tensor of ``dtype`` (not a Python number, which
    backward() cannot reach). ``mean_of`` says what it averages; ``stable_hint`` how to avoid log(0).
    Where every target is padding (``nothing_to_average``) the mean is 0 / 0: NaN, as F.cross_entropy
    gives and the exercises state."""
    what, mean_of, stable_hint = tr(what), tr(mean_of), tr(stable_hint)
    if isinstance(result, (float, int)) and not isinstance(result, bool):
        raise CheckFailed(tr(
            "{what} is a Python {kind} on the case {case}: return the 0-dimensional tensor itself (no .item()), so "
            "that loss.backward() can reach the model."
        ).format(what=what, kind=type(result).__name__, case=case.label))
    loss = expect_tensor(result, what, case)
    if loss.dim() != 0:
        raise CheckFailed(tr("{what} has shape {shape} on the case {case}: return one number, {mean_of}, as a "
                             "0-dimensional tensor.").format(
                                 what=what, shape=tuple(loss.shape), case=case.label, mean_of=mean_of))
    expect_dtype(loss, dtype, what, case)
    if nothing_to_average:
        if not torch.isnan(loss):
            raise CheckFailed(tr(
                "{what} is {value} on the case {case}, where every target is padding: there is nothing to average, "
                "so the mean is 0 / 0, NaN, as F.cross_entropy gives and as the instructions say. Any number here "
                "would hide from the caller a batch with no real target."
            ).format(what=what, value=f"{loss.item():.6g}", case=case.label))
        return loss
    expect_finite(loss, what, case, tr("log(softmax(x)) underflows to log(0) = -inf for large logits: {hint}").format(
        hint=stable_hint))
    return loss


def matches(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None, scale: float = 1.0) -> bool:
    """Whether ``actual`` equals ``expected`` within the tolerance of ``dtype``. ``scale`` widens the absolute
    tolerance where the computation passes through values that much larger than 1 (scores in the hundreds):
    their rounding reaches every entry made from them."""
    if actual.shape != expected.shape:
        return False
    atol, rtol = tolerance(dtype or actual.dtype)
    atol *= max(1.0, scale)
    a, e = actual.double(), expected.double()
    both_nan = torch.isnan(a) & torch.isnan(e)
    return bool((torch.isclose(a, e, atol=atol, rtol=rtol) | both_nan).all())


def reproduces(actual: torch.Tensor, candidate: torch.Tensor, dtype: torch.dtype | None = None,
               tighter: float = 1.0) -> bool:
    """Whether a mistake's value ``candidate`` is what the learner returned. Rounding in the learner's dtype is
    relative to the largest value the computation handles, not to each entry: an entry near zero that comes out
    of values in the hundreds carries their rounding error, so the absolute tolerance grows with them.
    ``tighter`` divides the tolerance: an intermediate value that is off by almost the tolerance of the result
    (eps ten times too large, say) must not pass for right."""
    if actual.shape != candidate.shape:
        return False
    atol, rtol = (t / tighter for t in tolerance(dtype or actual.dtype))
    scale = max(1.0, float(candidate.double().abs().nan_to_num(0.0, 0.0, 0.0).max())) if candidate.numel() else 1.0
    a, e = actual.double(), candidate.double()
    return bool((torch.isclose(a, e, atol=atol * scale, rtol=rtol) | (torch.isnan(a) & torch.isnan(e))).all())


def where_it_differs(actual: torch.Tensor, expected: torch.Tensor) -> str:
    a, e = actual.double(), expected.double()
    diff = (a - e).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.dim() else ()
    return tr("the largest difference is {difference} at index {index}: you returned {got} where {expected} was "
              "expected").format(difference=f"{diff.max().item():.3g}", index=index, got=f"{a[index].item():.6g}",
                                 expected=f"{e[index].item():.6g}")


def expect_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    case: Case,
    diagnoses: Sequence[tuple[Callable[[], torch.Tensor], str]] = (),
    hint: str = "",
    dtype: torch.dtype | None = None,
    scale: float = 1.0,
) -> None:
    """Fail unless ``actual`` matches the oracle (within :func:`matches`' tolerance, ``scale`` included);
    name the likely mistake when one fits.

    ``diagnoses`` are (what a known mistake would have returned, what to tell the learner)
    pairs, tried in order: a wrong answer that equals one of them is named precisely.
    """
    if matches(actual, expected, dtype, scale):
        return
    what, hint = tr(what), tr(hint)
    plain = tr("{what} is wrong on the case {case}: {where}.").format(
        what=what, case=case.label, where=where_it_differs(actual, expected))
    plain = then(plain, hint) if hint else plain
    explaining = []
    for mistaken, message in diagnoses:
        try:
            candidate = mistaken()
        except Exception:  # a diagnosis that does not apply to this case
            continue
        if reproduces(actual, candidate, dtype):
            explaining.append(message)
    raise named_failure(tr("{what} is wrong on the case {case}: ").format(what=what, case=case.label), explaining, plain)


def named_failure(what: str, explaining: Sequence[str], plain: str | None) -> CheckFailed:
    """The failure that names the first of the catalogued mistakes ``explaining`` (each one's advice:
    all of those that reproduce the learner's value on this case), after the words ``what``; or,
    when none does, the ``plain`` message. The verdict keeps a name only where it explains every
    failing case (:meth:`Check._judge_each`), so every mistake that gives this value is kept: on
    another case only one of them may. A rule of known mistakes alone, whose later rules say what is
    wrong with a value no mistake explains, passes ``plain=None`` (and raises only when ``explaining``
    holds one): :meth:`Check.judge` then takes the later rules' message as the plain one."""
    if not explaining:
        return _failure(plain or "", unexplained=True)
    # a check's constants, marked N_(), in the learner's language (tr leaves a translated or unmarked text as it is)
    what, explaining = tr(what), [tr(m) for m in explaining]
    failure = CheckFailed(what + explaining[0])
    failure.names = tuple(dict.fromkeys(_mistake_key(m) for m in explaining))
    failure.plain, failure.advice, failure.what = plain, dict(zip(map(_mistake_key, explaining), explaining)), what
    return failure




@dataclass(frozen=True)
class Stated:
    """A rule or an edge case that an exercise's instructions state, and the visible case that holds a
    learner to it: ``case`` is a fragment of that case's label or of its tag, and ``message`` a phrase of
    what a learner who breaks the rule is told. A check module lists them in ``STATED``, by function.

    No learner reads these texts: only tests/checks/test_stated_rules.py does, which runs in English and
    finds ``case`` in the English label and ``message`` in the English message. So they stay English and
    unmarked (course.tools.messages exempts ``Stated``), whatever language the messages are read in."""

    rule: str
    case: str
    message: str
