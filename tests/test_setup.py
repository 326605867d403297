"""Issue 64: after `make setup` the README's commands are callable by name in the same shell, whatever Python the
set-up installed into — pyenv (whose shims only `pyenv rehash` makes; uv never runs it), a venv, a system Python.
Each case runs tools/on_path.py (the set-up's last step) against a real interpreter and a real PATH."""
import os, shutil, subprocess, sys, sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

ON_PATH = ROOT / "tools" / "on_path.py"
BIN = Path(sysconfig.get_path("scripts"))


def _pyenv():
    "This interpreter's pyenv root and version name, or a skip where it is not pyenv's."
    exe = shutil.which("pyenv") or (Path.home() / ".pyenv" / "bin" / "pyenv")
    if not Path(exe).exists(): pytest.skip("pyenv is not installed")
    root = Path(subprocess.run([str(exe), "root"], capture_output=True, text=True).stdout.strip())
    try: ver = Path(sys.prefix).resolve().relative_to((root / "versions").resolve()).parts[0]
    except ValueError: pytest.skip(f"{sys.executable} is not a pyenv Python")
    return Path(exe), ver


def _sh(cmd, env):
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)


def test_fresh_pyenv_root_gets_its_shims(tmp_path):
    "A throw-away pyenv root holding this Python but no shims: what a new machine has after uv installed the package."
    exe, ver = _pyenv()
    root = tmp_path / "pyenv"
    (root / "versions").mkdir(parents=True)
    (root / "shims").mkdir()
    (root / "versions" / ver).symlink_to(Path(sys.prefix).resolve())
    (root / "version").write_text(ver + "\n")
    env = {**os.environ, "PYENV_ROOT": str(root), "PATH": os.pathsep.join([str(root / "shims"), str(exe.parent),
                                                                           "/usr/bin", "/bin"])}
    env.pop("PYENV_VERSION", None)
    before = _sh("command -v dpt || echo MISSING", env)
    assert "MISSING" in before.stdout, before.stdout        # today's failure: the script is installed, no shim finds it
    r = subprocess.run([sys.executable, ON_PATH, "--strict"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "shims made" in r.stdout and (root / "shims" / "dpt").exists()
    after = _sh("command -v dpt nbdev_export pytest && dpt --help >/dev/null && echo DPT-OK", env)
    assert after.returncode == 0 and "DPT-OK" in after.stdout, after.stdout + after.stderr
    assert after.stdout.splitlines()[0] == str(root / "shims" / "dpt")


def test_pyenv_selecting_another_version_is_named(tmp_path):
    "The shim exists but pyenv runs another version here: one line naming `pyenv local`."
    exe, ver = _pyenv()
    root = tmp_path / "pyenv"
    (root / "versions").mkdir(parents=True)
    (root / "versions" / ver).symlink_to(Path(sys.prefix).resolve())
    (root / "version").write_text("system\n")
    env = {**os.environ, "PYENV_ROOT": str(root), "PATH": os.pathsep.join([str(root / "shims"), str(exe.parent),
                                                                           "/usr/bin", "/bin"])}
    env.pop("PYENV_VERSION", None)
    r = subprocess.run([sys.executable, ON_PATH, "--strict"], capture_output=True, text=True, env=env, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"pyenv local {ver}" in r.stdout and "`dpt` in your shell is not this Python's" in r.stdout, r.stdout
    assert r.stdout.count("to call them by name") == 1


def test_venv_not_activated_names_its_activate(tmp_path):
    "A venv whose bin is not on PATH: the set-up names the activate line, and with it on PATH all is well."
    v = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", v], check=True)
    r = subprocess.run([sys.executable, "-m", "pip", "--python", v / "bin" / "python", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--disable-pip-version-check", "-e", ROOT],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and (v / "bin" / "dpt").exists(), r.stderr[-2000:]
    path = os.pathsep.join(["/usr/bin", "/bin"])
    env = {**os.environ, "PATH": path}
    r = subprocess.run([v / "bin" / "python", ON_PATH, "--strict"], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and f"source {v / 'bin' / 'activate'}" in r.stdout, r.stdout + r.stderr
    env["PATH"] = os.pathsep.join([str(v / "bin"), path])
    r = subprocess.run([v / "bin" / "python", ON_PATH, "--strict"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "(venv:" in r.stdout, r.stdout + r.stderr


def test_system_python_bin_missing_from_path_is_named(tmp_path):
    "A Python that is neither pyenv's nor an environment, whose scripts folder is not on PATH: the line that adds it."
    if sys.prefix != sys.base_prefix: pytest.skip("runs in a venv")
    env = {**os.environ, "PYENV_ROOT": str(tmp_path / "no-pyenv"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, ON_PATH, "--strict"], capture_output=True, text=True, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f'export PATH="{BIN}:$PATH"' in r.stdout, r.stdout
    assert "`dpt` in your shell is not this Python's" in r.stdout
