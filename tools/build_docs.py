"""Build the docs site into _site/ without Quarto.

For every notebook in nbs/: add nbdev `show_doc` cells after exported definitions (the API reference), execute the
whole notebook with nbclient (so every figure and table is produced by the notebook that shows it), drop hidden cells
and exported source the way nbdev's site does, render with nbconvert's HTML exporter, and add a navigation bar that
links every chapter. Where Quarto exists, `nbdev_docs` builds nbdev's usual site instead.
Usage: python tools/build_docs.py [--out _site] [--workers 2] [--no-exec]
"""
import argparse, ast, html, json, re, shutil, sys, time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
DIRECTIVE = re.compile(r"^\s*#\|\s*([\w-]+)\s*:?\s*(.*)$")


def directives(src):
    out = {}
    for line in src.splitlines():
        m = DIRECTIVE.match(line)
        if m: out[m.group(1)] = m.group(2).strip()
        elif line.strip(): break
    return out


def strip_directives(src):
    return "\n".join(l for l in src.splitlines() if not DIRECTIVE.match(l)).strip("\n")


def public_names(src):
    try: tree = ast.parse(strip_directives(src))
    except SyntaxError: return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")]


def prepare(nb):
    "Cells for execution: show_doc after exported definitions; hidden/exported/eval-false handled; tags for rendering."
    cells = [nbformat.v4.new_code_cell("from nbdev.showdoc import show_doc", metadata={"tags": ["remove_cell"]})]
    for c in nb.cells:
        c.pop("outputs", None) if c.cell_type != "code" else None
        d = directives(c.source) if c.cell_type == "code" else {}
        if c.cell_type == "code":
            if "default_exp" in d: continue
            tags = []
            if "hide" in d: tags.append("remove_cell")
            if "export" in d or "exporti" in d: tags.append("remove_input" if "export" in d else "remove_cell")
            if d.get("eval") == "false" or "slow" in d or "gpu" in d:      # shown, not run (like nbdev_test's tst_flags)
                c = nbformat.v4.new_markdown_cell("```python\n" + strip_directives(c.source) + "\n```")
                cells.append(c); continue
            if "echo" in d and d["echo"] == "false": tags.append("remove_input")
            c.metadata = {"tags": tags}
            c.outputs, c.execution_count = [], None
            cells.append(c)
            if "export" in d:
                for name in public_names(c.source):
                    cells.append(nbformat.v4.new_code_cell(f"show_doc({name})", metadata={"tags": ["remove_input"]}))
        else:
            cells.append(c)
    nb.cells = cells
    for c in nb.cells: c.pop("id", None)
    return nb


def chapter_title(nb, fallback):
    for c in nb.cells:
        if c.cell_type == "markdown":
            m = re.search(r"^#\s+(.+)$", c.source, re.M)
            if m: return m.group(1).strip().replace("`", "")
    return fallback


def render(args):
    src, out_dir, execute = args
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    nb = prepare(nbformat.read(src, as_version=4))
    t0 = time.time()
    if execute:
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NBS)}}).execute()
    for c in nb.cells:
        if c.cell_type == "code":
            c.source = strip_directives(c.source)
            for o in c.get("outputs", []):
                md = o.get("data", {}).get("text/markdown")
                if md:   # show_doc's source link carries Quarto attributes and points at the repo host: drop it
                    md = "".join(md) if isinstance(md, list) else md
                    o["data"]["text/markdown"] = re.sub(r"\[source\]\([^)]*\)\{[^}]*\}", "", md).replace("{target=\"_blank\"}", "")
            for o in c.get("outputs", []):  # tqdm/ipywidgets views cannot render statically: keep their text
                if o.get("output_type") in ("display_data", "execute_result") and "application/vnd.jupyter.widget-view+json" in o.get("data", {}):
                    o["data"].pop("application/vnd.jupyter.widget-view+json")
    nb.metadata.pop("widgets", None)      # no live widget state in a static page (it would pull the widget manager from a CDN)
    exp = HTMLExporter(template_name="lab", exclude_input_prompt=True, exclude_output_prompt=True)
    exp.register_preprocessor(TagRemovePreprocessor(remove_cell_tags={"remove_cell"}, remove_input_tags={"remove_input"},
                                                    enabled=True), enabled=True)
    body, _ = exp.from_notebook_node(nb)
    title = chapter_title(nb, src.stem)
    name = "index.html" if src.stem == "index" else f"{src.stem}.html"
    (out_dir / name).write_text(body)
    return src.stem, title, name, time.time() - t0


NAV_CSS = """<style>
#dpt-nav{position:sticky;top:0;z-index:100;background:#1f2937;padding:8px 16px;display:flex;flex-wrap:wrap;gap:14px;font:14px system-ui,sans-serif}
#dpt-nav a{color:#e5e7eb;text-decoration:none} #dpt-nav a.current{color:#fbbf24;font-weight:600}
#dpt-nav .brand{color:#fff;font-weight:700;margin-right:10px}
</style>"""


def add_nav(out_dir, pages):
    for stem, title, name, _ in pages:
        links = "".join(f'<a href="{n}" class="{"current" if n == name else ""}">{html.escape(t)}</a>' for s, t, n, _ in pages if s != "index")
        nav = f'{NAV_CSS}<nav id="dpt-nav"><a class="brand" href="index.html">dptoolkit</a>{links}</nav>'
        p = out_dir / name
        text = p.read_text()
        text = re.sub(r'href="(\d\d_[\w-]+)\.ipynb"', r'href="\1.html"', text)       # chapter links
        text = re.sub(r'href="nbs/(\d\d_[\w-]+)\.ipynb"', r'href="\1.html"', text)
        text = text.replace(f"<title>{stem}</title>", f"<title>dptoolkit · {html.escape(title)}</title>")
        text = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav, text, count=1)
        # an offline site: no CDN scripts (require.js, MathJax, widget manager), and a favicon so nothing 404s
        text = re.sub(r'<script[^>]+src="https?://[^"]*"[^>]*>\s*</script>', "", text)
        text = re.sub(r'<script type="module">(?:(?!</script>).)*?https?://(?:(?!</script>).)*</script>', "", text, flags=re.S)
        text = text.replace("</head>", '<link rel="icon" href="data:,"></head>', 1)
        p.write_text(text)


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--out", default=str(ROOT / "_site"))
    ap.add_argument("--workers", type=int, default=1)  # two kernels at once thrash a 2-core machine
    ap.add_argument("--no-exec", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    if out.exists(): shutil.rmtree(out)
    out.mkdir(parents=True)
    nbs = sorted(NBS.glob("[0-9][0-9]_*.ipynb")) + [NBS / "index.ipynb"]
    with ProcessPoolExecutor(a.workers) as ex:
        pages = list(ex.map(render, [(p, out, not a.no_exec) for p in nbs]))
    pages = [pages[-1]] + pages[:-1]
    add_nav(out, pages)
    (out / "pages.json").write_text(json.dumps([dict(stem=s, title=t, file=n) for s, t, n, _ in pages], indent=1))
    for s, t, n, dt in pages: print(f"{n:26s} {t:45s} {dt:5.1f} s")
    print(f"site: {out} ({len(pages)} pages)")


if __name__ == "__main__":
    main()
