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
