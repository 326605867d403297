"""tools/check_style.py holds the house's shape: it passes on this checkout and names each kind of slip."""
import json, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def check(root):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "check_style.py"), str(root)], capture_output=True, text=True)


def test_this_checkout_passes():
    r = check(ROOT)
    assert r.returncode == 0, r.stderr


def test_each_slip_is_named(tmp_path):
    (tmp_path / "dptoolkit").mkdir()
    (tmp_path / "nbs").mkdir()
    (tmp_path / "dptoolkit" / "m.py").write_text("x = 1; y = 2\n" + "z = '" + "a" * 130 + "'\n")
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": "#| export\n" + "\n".join(f"v{i} = {i}" for i in range(70))}
    (tmp_path / "nbs" / "00_x.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                             "nbformat_minor": 5}))
    r = check(tmp_path)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert any("dptoolkit/m.py:1: ';' joins two statements" in l for l in lines), lines
    assert any("dptoolkit/m.py:2: 136 characters" in l for l in lines), lines
    assert any("nbs/00_x.ipynb cell 0: an exported cell of 71 lines" in l for l in lines), lines
