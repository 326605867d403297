"""The house's shape, held by `make test` (issue 28): in the exported library no line over 120 characters (nbdev's own
generated `__all__` lines aside) and no `;`-joined statements; in the notebooks no exported cell over 60 lines.
Prints one line per finding (file:line and what) and exits 1 if there is any.
Usage: python tools/check_style.py [REPO_ROOT]"""
import glob, io, json, re, sys, tokenize
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
WIDTH, CELL = 120, 60


def library():
    for f in sorted((ROOT / "dptoolkit").glob("*.py")):
        if f.name == "_modidx.py": continue
        src = f.read_text()
        for i, line in enumerate(src.splitlines(), 1):
            if len(line) > WIDTH and not line.startswith("__all__"):
                yield f"{f.relative_to(ROOT)}:{i}: {len(line)} characters (at most {WIDTH})"
        for t in tokenize.generate_tokens(io.StringIO(src).readline):
            if t.type == tokenize.OP and t.string == ";":
                yield f"{f.relative_to(ROOT)}:{t.start[0]}: ';' joins two statements (one per line)"


def notebooks():
    for p in sorted((ROOT / "nbs").glob("*.ipynb")):
        for k, c in enumerate(json.loads(p.read_text())["cells"]):
            s = "".join(c["source"])
            if c["cell_type"] == "code" and re.search(r"^#\|\s*export\s*$", s, re.M) and len(s.splitlines()) > CELL:
                first = next((l for l in s.splitlines() if not l.startswith("#|")), "")[:60]
                yield (f"{p.relative_to(ROOT)} cell {k}: an exported cell of {len(s.splitlines())} lines (at most "
                       f"{CELL}; split it with a paragraph between): {first}")


if __name__ == "__main__":
    found = [*library(), *notebooks()]
    for f in found: print(f"style: {f}", file=sys.stderr)
    sys.exit(1 if found else 0)
