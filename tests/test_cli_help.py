"""`ember --version`, and every flag of every subcommand has help that names its default."""

import argparse
import subprocess
import sys

import pytest

import ember
from ember.cli import build_parser
from ember.conformance.certify import parser as certify_parser


def _parsers():
    root = build_parser()
    yield "ember", root
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name != "certify":  # parsed by its own parser, below
                    yield f"ember {name}", sub
    yield "ember certify", certify_parser()


@pytest.mark.parametrize("prog, parser", list(_parsers()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_flag_has_help_with_its_default(prog, parser):
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        assert action.help, f"{prog} {action.dest}: no help"
        if action.option_strings:
            assert "default" in action.help, f"{prog} {action.option_strings[0]}: help does not show the default"


def test_version_prints_and_exits_zero():
    run = subprocess.run([sys.executable, "-m", "ember.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == f"ember {ember.__version__}"


def test_recipe_defaults_are_the_recipes():
    from ember.train import recipes

    for model in recipes.RECIPES:
        epochs = recipes.recipe("text" if model in recipes.TEXT_MODELS else "mnist", model)["epochs"]
        assert f"{model} {epochs}" in recipes.default_help("epochs")
