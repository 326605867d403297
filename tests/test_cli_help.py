"""`dpt --help` and every `dpt X --help` answer at once (no torch import on the way) and render (a stray % in a help
text breaks argparse's formatting only when help is printed)."""
import subprocess, sys, time

from conftest import dpt
from dptoolkit.cli import build_parser


def test_every_help_renders_without_importing_torch():
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for cmd in [None, *sub.choices]:
        r = dpt(*([cmd] if cmd else []), "--help", check=0)
        assert r.stdout.startswith("usage: dpt"), (cmd, r.stdout[:200])
    code = "import sys; from dptoolkit.cli import build_parser; build_parser().format_help(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_every_command_has_a_description_examples_that_parse_and_help_on_every_argument():
    import argparse, shlex
    from dptoolkit.cli import COMMANDS
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for name, sp in sub.choices.items():
        assert sp.description and len(sp.description) > 40, name
        examples = COMMANDS[name]["examples"]
        assert examples and all(e.startswith(f"dpt {name}") for e in examples), name
        for e in examples:
            args = parser.parse_args(shlex.split(e)[1:])          # an example that does not parse fails here (exit 2)
            assert args.cmd == name and args.fn is COMMANDS[name]["fn"]
        for a in sp._actions:
            assert a.help, f"dpt {name}: {a.option_strings or a.dest} has no help text"
        assert "examples:" in sp.format_help()
