"""Where a learner's values first part from the computation, for a mistake nobody catalogued.

A check lists the stages of its own computation of a case (:class:`Stage`: the scores, the
scaled scores, the weights, ...; each with every value that is right there), and the learner's
process sends back the values its lines made, in order (:class:`harness.observe.Step`). This
module compares the two in the grader's process and says, in the learner's terms, up to which of
their lines the values agree and which line makes the first value after that which is none of
the computation's. It never decides a score; it only shapes the message.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from autograder.messages import N_, tr
from autograder.unchecked import Code, Held, in_turn, joined, never_ran, quoted_line, unchecked
from harness.observe import RAISED, Step


@dataclass(frozen=True)
class Stage:
    """One step of the course's computation: what it is called, in words a learner knows, and
    every value that is right at that step (float64)."""

    name: str
    values: tuple[torch.Tensor, ...]

    @staticmethod
    def of(name: str, *values: torch.Tensor) -> Stage:
        return Stage(name, tuple(values))

    @property
    def said(self) -> str:
        """The name in the learner's language: a check may mark its names with ``N_`` (or translate them itself)."""
        return tr(self.name) if self.name else ""


#: whether a learner's value equals a stage's within the check's tolerance
Agree = Callable[[torch.Tensor, torch.Tensor], bool]


def _stage_of(step: Step, stages: Sequence[Stage], inputs: Sequence[torch.Tensor], agree: Agree) -> int | None:
    """The latest stage ``step``'s value agrees with; -1 for one of the inputs; None for neither."""
    value = step.value
    if value is None or value.is_complex():
        return None
    for k in range(len(stages) - 1, -1, -1):
        if any(v.shape == value.shape and agree(value, v) for v in stages[k].values):
            return k
    if any(t.shape == value.shape and t.dtype == value.dtype and agree(value, t) for t in inputs):
        return -1
    return None


def _a_count(step: Step) -> bool:
    """Whether a step is a lone Python int one of the learner's variables held (or the function returned)."""
    value = step.value
    return (value is not None and value.dim() == 0 and not value.is_floating_point() and value.dtype != torch.bool
            and (step.made_by.startswith("=") or step.made_by == "return"))


def _comparable(steps: Sequence[Step], stages: Sequence[Stage]) -> list[Step]:
    """The steps, with the values of lone ints dropped where they would only agree by chance (a count, an
    index or a cost of 0 or 1 equals some value of any computation): all of them unless the computation has
    single numbers among its stages, and else those of every variable but the one the function returns
    (``return r``), when it returns a variable that held ints."""
    if not any(v.dim() == 0 for stage in stages for v in stage.values):
        return [replace(s, value=None) if _a_count(s) else s for s in steps]
    returned = steps[-1].source.removeprefix("return").strip() if steps and steps[-1].made_by == "return" else ""
    if not returned.isidentifier() or not any(_a_count(s) and s.made_by == "=" + returned for s in steps):
        return list(steps)
    return [replace(s, value=None) if _a_count(s) and s.made_by not in ("=" + returned, "return") else s for s in steps]


def _unfinished(steps: Sequence[Step]) -> list[Step]:
    """The steps, with the values of Python lists still being filled dropped: a list that the same variable
    later holds as the beginning of a longer one (a sequence rebuilt one token at a time) is no value of the
    computation's yet, nor a wrong one; only its last state counts."""
    out = list(steps)
    for i, step in enumerate(steps):
        value = step.value
        if value is None or value.dim() != 1 or not step.made_by.startswith("="):
            continue
        later = next((s for s in steps[i + 1:] if s.made_by == step.made_by and s.function == step.function), None)
        if later is not None and later.value is not None and later.value.dim() == 1 \
                and len(later.value) > len(value) and torch.equal(later.value[:len(value)], value):
            out[i] = replace(step, value=None)
    return out


def _chance(step: Step) -> bool:
    """Whether a value may agree with a step of the computation by chance: a single number, a Python value, or a
    few ids or flags (the next token of each row, which another step may repeat)."""
    value = step.value
    return value is not None and (value.numel() <= 1 or step.made_by.startswith("=")
                                  or not value.is_floating_point() and value.numel() <= 16)


#: operations that reduce over an axis
_REDUCTIONS = frozenset({"any", "all", "sum", "mean", "amax", "amin", "max", "min", "prod", "logsumexp", "nansum",
                         "nanmean", "norm", "std", "var", "count_nonzero"})


#: what :func:`_found` gives a value that may agree by chance with a stage past the next: neither a sign that the
#: stage is reached nor a wrong value (``step ** -0.5`` computed first is 1 at step 1, the computation's second step)
_LATER = -2


def _found(steps: Sequence[Step], stages: Sequence[Stage], inputs: Sequence[torch.Tensor], agree: Agree) -> list[int | None]:
    """The stage each step's value agrees with (:func:`_stage_of`). A value that may agree by chance counts only
    up to the stage after the furthest reached so far: the computation's 5 three layers on is no sign that a 5 made
    now is right, and no sign that it is wrong either (:data:`_LATER`)."""
    found, reached = [], -1
    for step in steps:
        chance = _chance(step)
        k = _stage_of(step, stages[:reached + 2] if chance else stages, inputs, agree)
        if k == -1 and step.made_by.rsplit(".", 1)[-1] in _REDUCTIONS:
            k = None  # a reduction that gives back its input reduced over an axis of size 1: the wrong axis
        elif k is None and chance and _stage_of(step, stages, (), agree) is not None:
            found.append(_LATER)
            continue
        found.append(k)
        reached = max(reached, k if k is not None else -1)
    return found


def _furthest(found: Sequence[int | None]) -> int:
    """The furthest stage the values reach; -1 for none (or only the inputs)."""
    return max([-1, *(k for k in found if k is not None)])


def _numeric(step: Step) -> bool:
    """Whether a step holds a number of the kind a float64 stage compares with: a float, or a Python int."""
    return step.value is not None and (step.value.is_floating_point() or _a_count(step))


def _where(step: Step) -> str:
    if step.source:
        return tr("line {line} of your `{function}`, `{source}`").format(line=step.line, function=step.function,
                                                                        source=step.source)
    return tr("line {line} of your `{function}`").format(line=step.line, function=step.function)


#: what the tensors a function was given are called, among the computation's steps
_INPUTS = N_("your inputs")

#: operators as a learner writes them
_SYMBOLS = {"add": "+", "radd": "+", "sub": "-", "rsub": "-", "mul": "*", "rmul": "*", "truediv": "/", "div": "/",
            "rtruediv": "/", "matmul": "@", "rmatmul": "@", "pow": "**", "rpow": "**", "neg": "unary -",
            "invert": "~", "getitem": "indexing [...]", "iadd": "+=", "isub": "-=", "imul": "*=", "itruediv": "/=",
            "setitem": "[...] ="}


def _maker(step: Step, place: str | None) -> str:
    """The value a step is, made on (or, a Python variable's, after) ``place``: a line, or None for the same line
    as the last value that agrees."""
    if step.made_by.startswith("return"):
        if place is None:
            return tr("the value it returns on the same line")
        return tr("the value it returns on {place}").format(place=place)
    if step.made_by.startswith("="):  # a Python variable, as that line left it
        if place is None:
            return tr("the value of `{name}` after the same line").format(name=step.made_by[1:])
        return tr("the value of `{name}` after {place}").format(name=step.made_by[1:], place=place)
    operation = _SYMBOLS.get(step.made_by, step.made_by)
    if place is None:
        return tr("what `{operation}` gives on the same line").format(operation=operation)
    return tr("what `{operation}` gives on {place}").format(operation=operation, place=place)


def _either(items: Sequence[str]) -> str:
    """``a or b or c``, in the learner's language."""
    out = items[0] if items else ""
    for item in items[1:]:
        out = tr("{earlier} or {last}").format(earlier=out, last=item)
    return out


def _parting(value: torch.Tensor, expected: torch.Tensor, agree: Agree) -> str:
    """Where two values of one shape part: how many positions, and the first."""
    a, e = value.double(), expected.double()
    if a.dim() == 0:  # one number: its size sets the scale, so say both
        return "" if agree(value, expected) else tr(" (you have {mine}, the computation {theirs})").format(
            mine=f"{a.item():.6g}", theirs=f"{e.item():.6g}")
    close = torch.isclose(a, e, atol=1e-6, rtol=1e-5) | (torch.isnan(a) & torch.isnan(e))
    differing = (~close).nonzero()
    if not len(differing):
        return ""
    index = tuple(int(i) for i in differing[0])
    where = tr("first at index {index}").format(index=index) if index else ""
    return tr(": they part at {count} of {total} positions, {where} (you have {mine}, the computation {theirs})").format(
        count=len(differing), total=a.numel(), where=where, mine=f"{a[index].item():.6g}",
        theirs=f"{e[index].item():.6g}")


def _agreeing(found: Sequence[int | None], furthest: int) -> set[int]:
    """The steps whose values agree with the furthest stage reached; none when only inputs were."""
    return {i for i, k in enumerate(found) if k == furthest} if furthest >= 0 else set()


def _culprit(steps: Sequence[Step], found: Sequence[int | None], furthest: int, stages: Sequence[Stage],
             since: int | None = None) -> int | None:
    """The step that stands for the computation's next stage, among the values after the last that
    agrees which agree with nothing: the first made from a value that agrees with the furthest stage
    (the learner's next step from there), else the first of either stage's shape, else the first of
    the next stage's kind. In each, one made by the graded function itself comes first (a sub-module
    it calls counts as one step, not its insides). A value of another shape may be a correct
    intermediate the computation does not name (``gamma * centred`` before the division), and a mask
    or an index made on the way (``~mask``) is no candidate for a wrong number. ``since`` puts the search
    after another step than the last that agrees (see :func:`locate`)."""
    following = stages[-1]
    floating = following.values[0].is_floating_point()
    shapes = {tuple(v.shape) for stage in stages for v in stage.values}
    agreeing = _agreeing(found, furthest)
    last = max(agreeing, default=-1) if since is None else since
    outer = steps[-1].function if steps[-1].made_by == "return" else None
    # a Python list's length is a value like any other: a merge made wrong changes it
    lists = any(len(s) == 1 for s in shapes)
    # a value that agrees with nothing first; one that may be a later step's only where there is none (a 5 made
    # where the computation has 3, its 5 being a step later, is wrong when nothing else is)
    for wrong in ((None,), (None, _LATER)):
        after = [i for i in range(last + 1, len(steps)) if found[i] in wrong and steps[i].value is not None
                 and _numeric(steps[i]) == floating]
        made_from = [i for i in after if agreeing & set(steps[i].uses)]
        # (made from constants alone, as the mel points are, and no table of one constant to be filled)
        own = [i for i in after if tuple(steps[i].value.shape) in {tuple(v.shape) for v in following.values}
               and steps[i].made_by.rsplit(".", 1)[-1] not in _FILLS and _from_constants(steps, found, i)]
        if made_from and own and tuple(steps[made_from[0]].value.shape) not in shapes:
            # the next step's own shape, made apart from the value that agrees: the computation's next step
            # starts a branch of its own (the mel points beside the bins' frequencies), and this is that branch
            made_from = own
        for group in (made_from,
                      [i for i in after if tuple(steps[i].value.shape) in shapes
                       or lists and steps[i].made_by.startswith("=") and steps[i].value.dim() == 1], after):
            if group:
                return next((i for i in group if steps[i].function == outer), group[0])
    return None


def _reach(start: int, following: Callable[[int], Sequence[int]]) -> set[int]:
    """The steps reached from ``start`` through ``following`` (the steps it uses, or those that use it)."""
    seen, todo = set(), list(following(start))
    while todo:
        j = todo.pop()
        if j not in seen:
            seen.add(j)
            todo += following(j)
    return seen


def _agrees(found: Sequence[int | None], i: int) -> bool:
    return found[i] is not None and found[i] >= 0


def _from_constants(steps: Sequence[Step], found: Sequence[int | None], i: int) -> bool:
    """Whether step ``i`` is made from constants alone (an arange, a Python number): from nothing that agrees, nor
    from the arguments, whose slices are steps made from nothing recorded."""
    made = _reach(i, lambda k: steps[k].uses) | {i}
    return not any(_agrees(found, k) for k in made) and all(
        steps[k].uses or steps[k].made_by.startswith("=") or steps[k].made_by.rsplit(".", 1)[-1] in _FACTORIES
        for k in made)


def _skipped(steps: Sequence[Step], found: Sequence[int | None], stages: Sequence[Stage], furthest: int
             ) -> tuple[int, int] | None:
    """(stage, step) for a stage before the furthest that no value agrees with, where the learner made a value of
    its shape that feeds the rest of the function and nothing made from it agrees with any stage: the
    computation has two branches (the bins' frequencies and the mel points), the learner's other branch reaches
    further, and this one went wrong first. A value of the stage's shape whose descendants do agree (the stage
    computed another way: bins counted in their own units) is no suspect, nor one made from the arguments or from
    a value that agrees: that is the branch the rest of :func:`locate` follows, from the values that agree."""
    matched = {found[i] for i in range(len(steps)) if _agrees(found, i)}
    users: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        for u in step.uses:
            users.setdefault(u, []).append(i)

    for j in range(furthest):
        if j in matched:
            continue
        shapes = {tuple(v.shape) for v in stages[j].values}
        floating = stages[j].values[0].is_floating_point()
        # a branch of its own: made from no value that agrees (else the values that agree are its way there,
        # which the rest of locate follows), and making none
        suspects = [i for i, step in enumerate(steps) if found[i] is None and step.value is not None
                    and tuple(step.value.shape) in shapes and _numeric(step) == floating and users.get(i)
                    and step.made_by.rsplit(".", 1)[-1] not in _FILLS  # a table to fill is no attempt at a stage
                    and not any(_agrees(found, d) for d in _reach(i, lambda k: users.get(k, ())))
                    and _from_constants(steps, found, i)]
        # the end of the first chain of suspects: what the line that finishes the stage gives, not the arange
        # it starts from (a suspect made from a suspect takes its place)
        chosen = suspects[0] if suspects else None
        while chosen is not None:
            later = [u for u in users.get(chosen, ()) if u in suspects]
            if not later:
                return j, chosen
            chosen = later[0]
    return None


def _unmatched_behind(steps: Sequence[Step], found: Sequence[int | None], start: int | Sequence[int],
                      limit: int) -> Iterator[int]:
    """The steps ``start`` (one step, or several) was made from, directly or through one another, whose values
    agree with none of the computation's, in the order a depth-first walk back reaches them (at most ``limit``)."""
    todo, seen = [u for i in ([start] if isinstance(start, int) else start) for u in steps[i].uses], set()
    while todo and len(seen) < limit:
        i = todo.pop()
        if i in seen or found[i] not in (None, _LATER):  # a value that may be a later step's is not known right
            continue
        seen.add(i)
        yield i
        todo += steps[i].uses


def _unmatched_sources(steps: Sequence[Step], found: Sequence[int | None], culprit: int) -> list[Step]:
    """The earlier lines whose values the culprit's line made its values from (directly, or through other
    values that agree with nothing) when those values agree with none of the computation's steps: a mask
    or a size made wrong a line before shows there, not on the line that uses it. Every value the line
    makes around the culprit counts: in ``a * wrong + b * right`` the culprit may be ``b * right``."""
    here = (steps[culprit].line, steps[culprit].function)
    first = last = culprit
    while first > 0 and (steps[first - 1].line, steps[first - 1].function) == here:
        first -= 1
    while last + 1 < len(steps) and (steps[last + 1].line, steps[last + 1].function) == here:
        last += 1
    return _by_line(steps[i] for i in _unmatched_behind(steps, found, range(first, last + 1), 32)
                    if (steps[i].line, steps[i].function) != here and steps[i].source)


def _made_from(sources: Sequence[Step]) -> str:
    """The sentence that points at the earlier lines a wrong value was made from (:func:`_unmatched_sources`)."""
    lines = joined([quoted_line(s.line, s.source) for s in sources])
    if len(sources) == 1:
        return tr(" It is made from what {lines} gives, which is none of the computation's steps: look there too."
                  ).format(lines=lines)
    return tr(" It is made from what {lines} give, which is none of the computation's steps: look there too."
              ).format(lines=lines)


def _by_line(steps: Iterator[Step]) -> list[Step]:
    """The first of ``steps`` on each line, in the order of the lines, at most three."""
    lines: dict[tuple[int, str], Step] = {}
    for step in steps:
        lines.setdefault((step.line, step.function), step)
    return [lines[k] for k in sorted(lines)][:3]


def _became_float(steps: Sequence[Step]) -> str:
    """Where a variable that held an int first holds a float, when the function returns a float: the line that
    turned a count into a float, or ""."""
    if not steps or steps[-1].made_by != "return" or steps[-1].value is None or not steps[-1].value.is_floating_point():
        return ""
    counted = set()
    for s in steps:
        if not s.made_by.startswith("=") or s.value is None or s.value.dim():
            continue
        if _a_count(s):
            counted.add(s.made_by)
        elif s.made_by in counted and s.value.is_floating_point():
            return tr("Your values agree with the computation's, but `{name}` held an int until {where}, "
                      "made it a float: `/` gives a float even where it divides exactly (`//` keeps an int)."
                      ).format(name=s.made_by[1:], where=_where(s))
    return ""


def _factor(value: torch.Tensor, base: torch.Tensor) -> float | None:
    """The one number ``value`` is ``base`` times, entry by entry, or None when there is none."""
    a, b = value.double(), base.double()
    if a.shape != b.shape or not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
        return None
    nonzero = b.abs() > 1e-12 * max(1.0, float(b.abs().max()))
    if int(nonzero.sum()) < 2 or bool((a[~nonzero].abs() > 1e-12).any()):
        return None
    ratios = a[nonzero] / b[nonzero]
    c = float(ratios.median())
    return c if c != 0 and bool(torch.allclose(ratios, torch.full_like(ratios, c), rtol=1e-5, atol=0.0)) else None


def _scaled(step: Step, expected: torch.Tensor, made_from: Sequence[Step], name: str) -> str:
    """Where the culprit is a right value times a wrong number (a scale from the wrong size, say): the two
    numbers, which say more than the values they give."""
    for base in made_from:
        if base.value is None or base.value.shape != step.value.shape:
            continue
        mine, theirs = _factor(step.value, base.value), _factor(expected, base.value)
        if mine is not None and theirs is not None and not math.isclose(mine, theirs, rel_tol=1e-4):
            return tr(" Your value is {mine} (1/{mine_inverse}) times {stage}; the computation's is {theirs} "
                      "(1/{theirs_inverse}) times it: the number your line scales by is the one to check.").format(
                mine=f"{mine:.6g}", mine_inverse=f"{1 / mine:.6g}", stage=name, theirs=f"{theirs:.6g}",
                theirs_inverse=f"{1 / theirs:.6g}")
    return ""


def _unmatched_lists(steps: Sequence[Step], found: Sequence[int | None], culprit: int,
                     stages: Sequence[Stage]) -> list[Step]:
    """The Python lists made before the culprit that have the shape of one of the computation's lists and agree
    with none of its values (strides filled in wrong, say): a wrong list shows only where it is used."""
    shapes = {tuple(v.shape) for stage in stages for v in stage.values if v.dim() == 1}
    return _by_line(s for i, s in enumerate(steps[:culprit]) if found[i] is None and s.made_by.startswith("=")
                    and s.value is not None and tuple(s.value.shape) in shapes)


def _depends(steps: Sequence[Step], found: Sequence[int | None], line: int, function: str, code: Code, held: Held,
             made: str = "") -> str:
    """What the learner's line depends on that the record cannot check (:mod:`autograder.unchecked`), as a
    sentence to append; the variables whose values agreed with the computation are no suspects."""
    checked = {s.made_by[1:] for s, k in zip(steps, found) if k not in (None, _LATER) and s.made_by.startswith("=")}
    said = unchecked(code, held, function, line, checked, made.removeprefix("=") if made.startswith("=") else "")
    return " " + said if said else ""


def locate(steps: Sequence[Step], stages: Sequence[Stage], inputs: Sequence[torch.Tensor], agree: Agree,
           truncated: bool = False, code: Code = (), held: Held = (), ran: Sequence[tuple[str, Sequence[int]]] = ()
           ) -> str:
    """The sentence that says where the values first part, or "" when the trace cannot say. With the learner's
    ``code`` and what its variables ``held``, a line that makes a wrong value from right tensors is said what
    else it depends on; with the lines that ``ran`` (a function of Python values), a function that stops short
    of a step is told the line that would have taken it and never ran."""
    if not steps or not stages:
        return ""
    recorded, steps = steps, _unfinished(_comparable(steps, stages))
    found = _found(steps, stages, inputs, agree)
    furthest = _furthest(found)
    final = len(stages) - 1
    last = max(_agreeing(found, furthest), default=-1)
    if furthest == final:
        step = steps[last]
        if step.made_by.startswith("return") and step.function == steps[-1].function:  # "return[1]" of a tuple too
            return _became_float(recorded)  # it returns the right value: what is wrong is not a value (its type, say)
        where = _where(step)
        return tr("{where}, computes {stage} correctly, but that value is not what your function returns: look at what "
                  "happens to it after that line.").format(where=f"{where[0].upper()}{where[1:]}",
                                                           stage=stages[final].said)
    skipped = _skipped(steps, found, stages, furthest)
    if skipped is not None:
        j, wrong = skipped
        step = steps[wrong]
        expected = next(v for v in stages[j].values if tuple(v.shape) == tuple(step.value.shape))
        text = tr("Your values agree with the computation as far as {reached}, but not on the way there: none of them "
                  "is {stage}. The value of that shape is {maker}{parting}, and nothing made from it agrees with the "
                  "computation.").format(reached=stages[furthest].said, stage=stages[j].said,
                                         maker=_maker(step, _where(step)),
                                         parting=_parting(step.value, expected, agree))
        sources = _unmatched_sources(steps, found, wrong)
        return text + (_made_from(sources) if sources else
                       _depends(steps, found, step.line, step.function, code, held, step.made_by))
    following = stages[furthest + 1]
    near = stages[max(furthest, 0):furthest + 2]  # the furthest stage reached and the next
    culprit = _culprit(steps, found, furthest, near)
    if culprit is None and last >= 0:
        # a later value that agrees with the same stage again (a sequence a merge of the wrong pair left as it
        # was) hides a wrong one made before it: look after the first that agrees instead
        first_agreeing = min(_agreeing(found, furthest))
        earlier = _culprit(steps, found, furthest, near, since=first_agreeing)
        # only a value of the next step's own shape, made before the last that agrees: the rest may be right values
        # the computation does not name (the output made from weights that are right)
        if earlier is not None and earlier < last and steps[earlier].value is not None \
                and tuple(steps[earlier].value.shape) in {tuple(v.shape) for v in following.values}:
            culprit, last = earlier, first_agreeing
    head = (tr("Up to {where}, your values agree with the computation ({stage})").format(
        where=_where(steps[last]), stage=stages[furthest].said)
            if last >= 0 else tr("Beyond your inputs, none of your values agrees with a step of the computation"))
    if culprit is None:
        returned = next((s for s in reversed(steps) if s.made_by.startswith("return")), None)
        if returned is None or furthest < 0:
            return ""
        said = never_ran(code, steps[-1].function, dict(ran).get(steps[-1].function, ())) if not truncated else ""
        return tr("{head}, and your function returns that value: none of your values after it is {stage} or a later "
                  "step (they are missing, or they leave that value as it was).").format(
            head=head, stage=following.said) + (f" {said}" if said else "")
    step = steps[culprit]
    is_result = step.made_by == "return" and culprit == len(steps) - 1
    if is_result:  # nothing before it stands for the next step (a line that does all the work): it is the result
        following = stages[final]
    same = last >= 0 and (steps[last].line, steps[last].function) == (step.line, step.function)
    maker = _maker(step, None if same else _where(step))
    if last >= 0:
        text = tr("{head}; the first value after that which does not is {maker}").format(head=head, maker=maker)
    else:
        text = tr("{head}; the first that should is {maker}").format(head=head, maker=maker)
    shapes = {tuple(v.shape) for v in following.values}
    agreed = {tuple(v.shape): v for v in stages[furthest].values} if furthest >= 0 else {}
    # a number made before it that may be a later step's (the terms computed before the scale): the learner's steps
    # come in another order than the computation's, so which of them this one stands for is not known
    ahead = [k for k in (_stage_of(steps[i], stages, (), agree) for i in range(last + 1, culprit) if found[i] == _LATER)
             if k is not None]
    if ahead and step.value is not None and step.value.dim() == 0:
        candidates = stages[furthest + 1:max(ahead) + 2]
        listed = [tr("{stage}, {values}").format(
            stage=c.said, values=_either(list(dict.fromkeys(f"{v.item():.6g}" for v in c.values if v.dim() == 0))))
            for c in candidates]
        text += tr(", which is {value}. Your steps come in another order than the computation's, so which of its steps "
                   "that value stands for is not known; those that may come next are {candidates}.").format(
            value=f"{step.value.item():.6g}", candidates=in_turn(listed))
    elif is_result and tuple(step.value.shape) in shapes:
        expected = next(v for v in following.values if tuple(v.shape) == tuple(step.value.shape))
        text += tr(". The computation's result is {stage}{parting}.").format(
            stage=following.said, parting=_parting(step.value, expected, agree))
    elif step.value is not None and tuple(step.value.shape) not in shapes and tuple(step.value.shape) in agreed \
            and not step.made_by.startswith("="):  # a Python list of the same length as before is no sign of that
        text += tr(": it changes {reached}, which the computation's next step, {stage}, takes as it is{parting}."
                   ).format(reached=stages[furthest].said, stage=following.said,
                            parting=_parting(step.value, agreed[tuple(step.value.shape)], agree))
    elif step.value is not None and tuple(step.value.shape) in shapes:
        expected = next(v for v in following.values if tuple(v.shape) == tuple(step.value.shape))
        text += tr(". The computation's next step is {stage}{parting}.").format(
            stage=following.said, parting=_parting(step.value, expected, agree))
        agreeing = _agreeing(found, furthest)
        text += _scaled(step, expected, [steps[i] for i in step.uses if i in agreeing],
                        stages[furthest].said if furthest >= 0 else "")
    elif step.made_by.startswith("=") and len(step.shape) == 1 and all(len(s) == 1 for s in shapes):
        text += tr(". The computation's next step is {stage}, of length {lengths}; that list has length {length}."
                   ).format(stage=following.said, lengths=_either([str(s[0]) for s in sorted(shapes)]),
                            length=step.shape[0])
    else:
        text += tr(". The computation's next step is {stage}, of shape {shapes}; that value has shape {shape}."
                   ).format(stage=following.said, shapes=_either([str(s) for s in sorted(shapes)]), shape=step.shape)
    sources = _unmatched_sources(steps, found, culprit) or _unmatched_lists(steps, found, culprit, stages)
    if sources:
        text += _made_from(sources)
    else:
        text += _depends(steps, found, step.line, step.function, code, held, step.made_by)
    if truncated:
        text += tr(" (Only the first part of your function's work was recorded.)")
    return text


#: operations that make a tensor of one constant: a table to be filled, whose values are no step of a computation
_FILLS = frozenset({"zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full"})
#: operations that make a tensor from numbers alone, none of the function's arguments
_FACTORIES = _FILLS | {"arange", "linspace", "logspace", "tensor", "as_tensor", "eye"}


def _crash_roots(steps: Sequence[Step], found: Sequence[int | None], crash: int,
                 shapes: set[tuple[int, ...]]) -> list[tuple[Step, Step]]:
    """The steps behind the values the crashing operation was given that agree with none of the
    computation's values while what they were made from does (or they were made from nothing): the
    first lines to go wrong on the way to the crash, on other lines than the crash's own; each with
    the last value its line made on the way (the one the line hands on). A table of one constant to be
    filled, of the shape of one of the computation's values (``shapes``), is none of them: only its shape
    can be wrong."""
    here = (steps[crash].line, steps[crash].function)
    roots, latest = {}, {}
    for i in _unmatched_behind(steps, found, crash, 64):
        place = (steps[i].line, steps[i].function)
        latest[place] = max(latest.get(place, i), i)  # a line's last value is the one it hands on
        made_from_right = all(found[j] not in (None, _LATER) for j in steps[i].uses)
        container = steps[i].made_by.rsplit(".", 1)[-1] in _FILLS and tuple(steps[i].shape) in shapes
        if made_from_right and place != here and steps[i].source and not container:
            roots.setdefault(place, steps[i])
    return [(roots[k], steps[latest[k]]) for k in sorted(roots)][:3]


def locate_crash(steps: Sequence[Step], stages: Sequence[Stage], inputs: Sequence[torch.Tensor], agree: Agree,
                 code: Code = (), held: Held = (), at: tuple[int, str] | None = None, follow_back: bool = True) -> str:
    """For a call that raised inside a torch operation, the sentence that says whether what that operation
    was given is right, and if not, which earlier line first made a value that is none of the computation's
    from values that are (unless ``follow_back`` is off: where the stages do not cover the values such a line
    would be judged by). Where no earlier line is to blame, or the crash is not a torch operation's (``at``: the
    learner's line that raised, and its function), what the crashing line depends on that the record cannot
    check; "" when there is nothing to say."""
    crash = next((i for i in range(len(steps) - 1, -1, -1) if steps[i].made_by.startswith(RAISED)), None)
    if not stages:
        return ""
    steps = _comparable(steps, stages)
    found = [None if s.made_by.startswith(RAISED) else k for s, k in zip(steps, _found(steps, stages, inputs, agree))]
    if crash is None:
        return _depends(steps, found, *at, code, held).strip() if at else ""

    def depends() -> str:  # what the crashing line depends on, only where nothing earlier is blamed
        return _depends(steps, found, steps[crash].line, steps[crash].function, code, held)

    given = [i for i in steps[crash].uses if i < crash]
    operation = f"`{steps[crash].made_by.removeprefix(RAISED)}`"
    # each tensor it was given (one at least) is a step's, an argument or a parameter
    known = len(steps[crash].shape) == 2 and steps[crash].shape[0] == 0 < steps[crash].shape[1]
    if known and all(found[i] is not None and found[i] != _LATER for i in given):
        named = sorted({_INPUTS if found[i] < 0 else stages[found[i]].name for i in given}) or [_INPUTS]
        return tr("The tensors {operation} was given on that line are right ({named}, as the computation has them): "
                  "what goes wrong is what the line asks of them, its sizes, dimensions or arguments.").format(
            operation=operation, named=joined([tr(n) if n else n for n in named])) + depends()
    shapes = {tuple(v.shape) for stage in stages for v in stage.values}
    roots = _crash_roots(steps, found, crash, shapes) if follow_back else []
    if not roots:
        return depends().strip()
    lines = joined([tr("line {line}, `{source}` (shape {shape})").format(line=s.line, source=s.source, shape=s.shape)
                    for _, s in roots])
    several = len(roots) > 1
    made_from = all(first.uses for first, _ in roots)
    if several and made_from:
        said = tr("What {operation} was given there comes from {lines}: their values are none of the computation's, "
                  "though what they were made from agrees with it. Look there first: a crash shows where a wrong value "
                  "was used, not where it was made.")
    elif several:
        said = tr("What {operation} was given there comes from {lines}: their values are none of the computation's. "
                  "Look there first: a crash shows where a wrong value was used, not where it was made.")
    elif made_from:
        said = tr("What {operation} was given there comes from {lines}: its value is none of the computation's, "
                  "though what it was made from agrees with it. Look there first: a crash shows where a wrong value "
                  "was used, not where it was made.")
    else:
        said = tr("What {operation} was given there comes from {lines}: its value is none of the computation's. "
                  "Look there first: a crash shows where a wrong value was used, not where it was made.")
    # the earliest of them went wrong from right values: what it reads that the record cannot check is a suspect
    return said.format(operation=operation, lines=lines) + _depends(steps, found, roots[0][0].line,
                                                                    roots[0][0].function, code, held)
