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


def test_readme_own_data_commands_run_as_written(tmp_path):
    """Issue 91: the front page's "your own data in three commands" run as written, in order (from a folder whose
    data/ is the repository's, so the run folder lands there): inspect, config, then two CPU ranks train."""
    import json, shlex
    from conftest import dpt
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Your own data in three commands\n\n```sh\n(.*?)```", text, flags=re.S)
    assert block, "README has no 'Your own data in three commands' block"
    cmds = [shlex.split(l) for l in block.group(1).strip().splitlines()]
    assert [c[:2] for c in cmds] == [["dpt", "inspect"], ["dpt", "config"], ["dpt", "train"]], cmds
    (tmp_path / "data").symlink_to(ROOT / "data")
    out = [dpt(*c[1:], cwd=tmp_path, check=0, timeout=900).stdout for c in cmds]
    assert "head_camera" in out[0] and "episodes: 3" in out[0], out[0]
    assert out[1].startswith("name: robot_dp_14") and "#   world_size: 2" in out[1], out[1][-2000:]
    res = json.loads((tmp_path / "runs" / "first" / "result.json").read_text())
    assert res["steps"] == 20 and res["world_size"] == 2 and res["completed"], res
