"""The last step of `make setup`: leave the console scripts it installed callable by name in the user's shell, and say
so plainly when they are not (issue 64).

Run with the interpreter the set-up used: `python3 tools/on_path.py [--strict]`. It finds the folder that interpreter's
installer put `dpt` in, then, by how that Python lives:
  - pyenv (the folder is under `$(pyenv root)/versions/`): `pyenv rehash`, which makes the shims a shell finds commands
    through (pip runs it after its installs, a new login shell at its start; uv never does);
  - a venv or conda environment whose `bin` is not on PATH: names the `activate` line to run;
  - a system or `--user` Python whose scripts folder is not on PATH: names the folder and the line that adds it.
It ends by resolving `dpt` the way the shell will (PATH, then through pyenv's shim to the real file) and says whether
that is this Python's `dpt`. Exit 0 when every script resolves to this Python's; otherwise 0 with the advice printed,
or 1 under --strict (CI)."""
import argparse, os, shutil, subprocess, sys, sysconfig
from pathlib import Path

# the README's and the Makefile's commands: the package's own console scripts, then the dev tools called by name
SCRIPTS = ("dpt", "nbdev_export", "nbdev_clean", "nbdev_test", "pytest", "jupyter-lab")


def package_scripts():
    "Console scripts of dptoolkit itself (from its installed metadata), then the dev tools the README names."
    from importlib.metadata import distribution, PackageNotFoundError
    try: own = [e.name for e in distribution("dptoolkit").entry_points if e.group == "console_scripts"]
    except PackageNotFoundError: own = []
    return list(dict.fromkeys([*own, *SCRIPTS]))


def scripts_dir(name="dpt"):
    "The folder this interpreter's installs put console scripts in: its own scheme's, else the --user scheme's."
    cands = [sysconfig.get_path("scripts")]
    try: cands.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    except KeyError: pass
    for d in cands:
        if d and (Path(d) / name).exists(): return Path(d)
    return Path(cands[0])


def pyenv_root():
    "pyenv's root folder, or None where pyenv is not installed."
    if os.environ.get("PYENV_ROOT"): return Path(os.environ["PYENV_ROOT"])
    exe = shutil.which("pyenv")
    if exe:
        r = subprocess.run([exe, "root"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip(): return Path(r.stdout.strip())
    home = Path.home() / ".pyenv"
    return home if (home / "versions").is_dir() else None


def _under(p, root):
    try: Path(os.path.realpath(p)).relative_to(os.path.realpath(root)); return True
    except ValueError: return False


def pyenv_exe(root):
    "The pyenv command of that root (on PATH or in the root itself)."
    for c in (shutil.which("pyenv"), root / "bin" / "pyenv", root / "libexec" / "pyenv"):
        if c and Path(c).exists(): return str(c)
    return None


def pyenv_version(bin_dir, root):
    "The name of the pyenv version whose folder holds bin_dir (a version may be a link, as pyenv-virtualenv makes)."
    vs = root / "versions"
    for v in (sorted(vs.iterdir()) if vs.is_dir() else []):
        if _under(bin_dir, v): return v.name
    return None


def kind(bin_dir, root=None):
    "How this Python lives: 'pyenv', 'conda', 'venv' or 'system' (a system or --user install)."
    if root is not None and pyenv_version(bin_dir, root): return "pyenv"
    prefix = Path(sys.prefix)
    if (prefix / "conda-meta").is_dir() and _under(bin_dir, prefix): return "conda"
    if sys.prefix != sys.base_prefix and _under(bin_dir, prefix): return "venv"
    return "system"


def on_path(d, path=None):
    "Is folder d on PATH (compared as real paths)?"
    parts = (os.environ.get("PATH", "") if path is None else path).split(os.pathsep)
    return any(p and os.path.realpath(p) == os.path.realpath(d) for p in parts)


def resolve(name, root=None):
    "Where the shell finds `name`: its real file (a pyenv shim followed to the version it runs), or None; and how."
    hit = shutil.which(name)
    if hit is None: return None, "is not on PATH"
    if root is not None and _under(hit, root / "shims"):
        exe = pyenv_exe(root)
        r = subprocess.run([exe, "which", name], capture_output=True, text=True) if exe else None
        if r is None or r.returncode != 0:
            why = (r.stderr.strip().splitlines() or ["pyenv could not run"])[0] if r is not None else "no pyenv command"
            return None, f"pyenv's shim {hit} runs none here ({why})"
        return Path(r.stdout.strip()), f"through pyenv's shim {hit}"
    return Path(hit), "on PATH"


def same(a, b): return a is not None and os.path.realpath(a) == os.path.realpath(b)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strict", action="store_true", help="exit 1 when a script does not resolve to this Python's")
    a = ap.parse_args(argv)
    bin_dir = scripts_dir()
    names = [n for n in package_scripts() if (bin_dir / n).exists()]
    if "dpt" not in names:
        print(f"setup: {bin_dir / 'dpt'} was not installed: is dptoolkit installed into {sys.executable}?")
        return 1
    root = pyenv_root()
    how = kind(bin_dir, root)
    advice = None
    if how == "pyenv":
        exe = pyenv_exe(root)
        r = subprocess.run([exe, "rehash"], capture_output=True, text=True, env={**os.environ, "PYENV_ROOT": str(root)}) \
            if exe else None
        if r is None or r.returncode != 0:
            advice = f"run `pyenv rehash` (it failed here: {(r.stderr.strip() if r else 'no pyenv command')[:200]})"
        elif not on_path(root / "shims"):
            advice = "put pyenv's shims on PATH: eval \"$(pyenv init -)\" (or open a new login shell)"
    elif not on_path(bin_dir):
        advice = {"venv": f"activate the environment first: source {Path(sys.prefix) / 'bin' / 'activate'}",
                  "conda": f"activate the environment first: conda activate {sys.prefix}",
                  "system": f"{bin_dir} is not on PATH; add it: export PATH=\"{bin_dir}:$PATH\""}[how]
    wrong = []
    for n in names:
        found, via = resolve(n, root if how == "pyenv" else None)
        if not same(found, bin_dir / n): wrong.append((n, found, via))
    if not wrong:
        print(f"setup: {', '.join(names)} callable by name ({how}: {bin_dir}{', shims made' if how == 'pyenv' else ''})")
        return 0
    n, found, via = wrong[0]
    more = f" (nor are {', '.join(w[0] for w in wrong[1:])})" if wrong[1:] else ""
    print(f"setup: `{n}` in your shell is not this Python's {bin_dir / n}{more}: "
          + (f"it resolves to {found} ({via})" if found else via))
    if advice is None and how == "pyenv":
        ver = pyenv_version(bin_dir, root)
        advice = f"pyenv selects another version here; choose this one: pyenv local {ver} (or pyenv shell {ver})"
    if advice is None:
        advice = f"put {bin_dir} before the folder shown on PATH: export PATH=\"{bin_dir}:$PATH\""
    print(f"setup: to call them by name, {advice}; until then: {sys.executable} -m dptoolkit.cli demo")
    return 1 if a.strict else 0


if __name__ == "__main__":
    sys.exit(main())
