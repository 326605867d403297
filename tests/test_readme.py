"""README's Python code runs as written when pasted (issue 27): every ```python block, in order, in a fresh
interpreter started in the repository root."""
import re, subprocess, sys

from conftest import ROOT


def test_readme_python_blocks_run_as_written():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert blocks, "README has no python code block"
    code = "\n".join(blocks) + "\nprint('README-OK', summary['world_size'].tolist())\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "README-OK [1, 2]" in r.stdout
