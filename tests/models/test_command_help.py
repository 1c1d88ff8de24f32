"""Every model runs as `python -m transformer.<model> <command>`, with --help at both levels, and every
option of the training commands says what it does, in the words of its field's comment."""
from __future__ import annotations

import dataclasses

import pytest

from transformer import loop
from transformer.bert import __main__ as bert_main
from transformer.bert import train as bert
from transformer.cli import field_comments
from transformer.g2p import __main__ as g2p_main
from transformer.g2p import train
from transformer.gpt import __main__ as gpt_main
from transformer.gpt import train as gpt
from transformer.loop.cli import _parser

COMMANDS = [
    (train.TrainConfig, train.PRESETS),
    (gpt.GPTTrainConfig, gpt.PRESETS),
    (bert.PretrainConfig, bert.PRETRAIN_PRESETS),
    (bert.FinetuneConfig, bert.FINETUNE_PRESETS),
]


@pytest.mark.parametrize("config_class, presets", COMMANDS, ids=[c.__name__ for c, _ in COMMANDS])
def test_every_option_has_a_description(config_class, presets):
    parser = _parser(config_class, presets, "prog", "description", "cpu")
    undescribed = [a.option_strings[0] for a in parser._actions
                   if a.option_strings and not (a.help or "").split(" (preset")[0].strip()]
    assert not undescribed, f"options without a description: {undescribed}"
    comments = field_comments(config_class)
    for f in dataclasses.fields(config_class):
        assert comments.get(f.name), f"{config_class.__name__}.{f.name} has no comment to describe its option"


def test_the_help_is_the_fields_comment():
    parser = _parser(train.TrainConfig, train.PRESETS, "prog", "", "cpu")
    parts = next(a for a in parser._actions if "--parts" in a.option_strings)
    assert parts.help.startswith(field_comments(train.TrainConfig)["parts"]) and "(preset cpu: 'reference')" in parts.help
    assert field_comments(train.TrainConfig)["parts_dir"] == "where your notebooks are (default: exercises/)"
    # a subclass that declares a field again keeps its base's description
    assert field_comments(train.TrainConfig)["warmup"] == field_comments(loop.LoopConfig)["warmup"]


def test_a_field_without_a_comment_is_found():
    @dataclasses.dataclass
    class Config:
        described: int = 1  # what it is
        bare: int = 2

    assert field_comments(Config) == {"described": "what it is"}


PACKAGES = [g2p_main, gpt_main, bert_main]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_one_command_shape_with_help_at_both_levels(package, capsys):
    prog = f"python -m {package.__package__}"
    assert package.main(["--help"]) == 0
    listing = capsys.readouterr().out
    for name, command in package.COMMANDS.items():
        assert f"  {name}" in listing and command.summary in listing
        with pytest.raises(SystemExit) as exit_:
            package.main([name, "--help"])
        assert exit_.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: {prog} {name} "), name
    assert package.main([]) == 2 and "no command given" in capsys.readouterr().err
    assert package.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err
