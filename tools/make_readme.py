"""README.md from nbs/index.ipynb without Quarto: markdown cells as they are, code cells as Python blocks
(hidden cells and nbdev directives left out). `nbdev_readme` does the same where Quarto exists."""
import json, re, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent

def render(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    out = []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown":
            src = re.sub(r"\]\((\d\d[a-z]?_\w+)\.ipynb\)", r"](nbs/\1.ipynb)", src)   # chapter links work on the repo page
            out.append(src.strip())
        elif c["cell_type"] == "code":
            lines = src.splitlines()
            if any(l.strip() in ("#| hide", "#|hide") for l in lines): continue
            code = "\n".join(l for l in lines if not l.startswith("#|")).strip()
            if code: out.append("```python\n" + code.replace('"../data/', '"data/') + "\n```")
    text = "\n\n".join(out) + "\n"
    return text + "\n<!-- generated from nbs/index.ipynb by tools/make_readme.py; edit the notebook, not this file -->\n"

if __name__ == "__main__":
    text = render(root / "nbs" / "index.ipynb")
    target = root / "README.md"
    if "--check" in sys.argv:
        if not target.exists() or target.read_text() != text:
            print("check: README.md is out of step with nbs/index.ipynb; run `python tools/make_readme.py`", file=sys.stderr)
            sys.exit(1)
    else:
        target.write_text(text)
