"""The checks' messages in Chinese (autograder/messages.py, catalogues made by course/tools/messages.py)."""
from __future__ import annotations

import subprocess

import pytest

from autograder import messages
from autograder.checks import get
from autograder.framework import CheckFailed, run_check
from course.layout import REPO, chapters
from course.tools import messages as catalogues
from tests.conftest import PYTHON


def test_every_message_has_its_chinese_with_the_same_placeholders_and_the_catalogues_are_current():
    assert len([m for m in catalogues.template() if m.id]) >= 14, "the shared messages are not marked"
    assert catalogues.stale() == [], "run `python -m course.tools messages` and translate what it lists"


def test_every_text_a_learner_reads_of_a_check_is_marked_for_translation():
    assert catalogues.unmarked() == [], "mark each with tr(...) or N_(...) (autograder/messages.py)"


def test_the_marking_rule_sees_an_unmarked_sentence_and_an_f_string():
    source = '''
"""A docstring of many English words is left alone."""
from autograder.messages import N_, tr
ADVICE = N_("divide the scores by the square root")
LOST = "divide the scores by the square root"


def judge(case, result, shape):
    """Its docstring too."""
    if "must match the size" in result.message:
        raise CheckFailed(tr("the scores were not divided on the case {case}").format(case=case.label))
    raise CheckFailed(f"the output has the shape {shape} on the case {case.label}")


def hints():
    return [Hint("RuntimeError", N_("give the mask a last axis"), containing="must match the size"),
            Hint("RuntimeError", tr(f"give the mask {1} last axis")),
            "kept as the code reads it"  # english: a name the learner types
            ]
'''
    assert catalogues.unmarked_in(source, "f.py") == [
        "f.py:5: 'divide the scores by the square root'",
        "f.py:12: 'the output has the shape   on the case '",
        "f.py:17: 'give the mask   last axis'",
    ]


def test_the_marking_rule_sees_a_marker_that_babel_cannot_extract():
    # on Python 3.11 Babel reads an f-string as one token, so this tr() reaches no catalogue and stays English
    source = 'verdict = f"<b>{tr(\'passed\')}</b>"\nverdict = "<b>" + tr("passed") + "</b>"\n'
    assert catalogues.unmarked_in(source, "f.py") == [
        "f.py:1: a marker inside an f-string, which Babel does not extract"]


def test_the_placeholder_rule_sees_a_translation_that_loses_one():
    catalog = catalogues.Catalog(locale="zh_CN")
    catalog.add("{name} raised {error}", string="{name} 引发了错误")
    catalog.add("{count} values", string="")
    assert catalogues.problems("zh_CN", catalog) == [
        "zh_CN: the translation of '{name} raised {error}' has the placeholders ['name'], not ['error', 'name']",
        "zh_CN: no translation of '{count} values'"]


@pytest.mark.parametrize("name, expected", [("zh", "zh_CN"), ("zh_CN.UTF-8", "zh_CN"), ("zh-CN", "zh_CN"),
                                            ("en_US.UTF-8", None), ("C.UTF-8", None), ("", None), ("fr", None)])
def test_a_language_is_found_by_any_of_its_names(name, expected):
    assert messages.language_code(name) == expected


def test_a_check_speaks_the_chosen_language_and_english_by_default(monkeypatch):
    def stub(x, dim=-1):
        raise NotImplementedError()

    def message() -> str:
        with pytest.raises(CheckFailed) as failed:
            run_check(get("attention.softmax"), stub)
        return str(failed.value)

    assert message().endswith("is not implemented yet: replace `raise NotImplementedError()` with your code.")
    monkeypatch.setenv("COURSE_LANG", "zh_CN.UTF-8")
    assert message() == "`softmax` 尚未实现：请把 `raise NotImplementedError()` 换成你的代码。"
    messages.set_language("en")
    try:
        assert "not implemented yet" in message()  # what is chosen outranks the environment
    finally:
        messages.set_language(None)


def test_check_lang_zh_reports_in_chinese(tmp_path):
    chapter = next(c for c in chapters(REPO) if c.assignment == "ch06_positional")
    done = subprocess.run([PYTHON, "-m", "autograder", "check", "--lang", "zh", str(chapter.zh_release)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "尚未实现：请把 `raise NotImplementedError()` 换成你的代码" in done.stdout, done.stdout
    assert "可见测试的得分：0 / " in done.stdout
    # the notes on the cells that raised, which the grader writes beside the checks' messages
    assert "注意：第 4 个代码单元格（`" in done.stdout and "code cell" not in done.stdout, done.stdout
    refused = subprocess.run([PYTHON, "-m", "autograder", "check", "--lang", "fr", str(chapter.zh_release)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "no messages in 'fr'" in refused.stderr


def test_why_a_notebook_cannot_be_read_is_said_in_chinese(tmp_path):
    from autograder.submissions import Unreadable, read_submission

    said = {}
    messages.set_language("zh")
    try:
        for name, content in [("empty", ""), ("cut", '{"cells": ['), ("list", "[1, 2]"), ("v2", '{"cells": [], "nbformat": 2}')]:
            path = tmp_path / f"{name}.ipynb"
            path.write_text(content)
            with pytest.raises(Unreadable) as unreadable:
                read_submission(path, 1 << 20)
            said[name] = str(unreadable.value)
    finally:
        messages.set_language(None)
    assert said["empty"] == "笔记本文件是空的" and said["list"] == "这个文件是 JSON，但不是笔记本"
    assert said["cut"].startswith("笔记本不是有效的 JSON（") and said["v2"] == "不支持笔记本格式版本 2"
