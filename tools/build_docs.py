"""Build the docs site into _site/ without Quarto.

For every notebook in nbs/: add nbdev `show_doc` cells after exported definitions (the API reference), execute the
whole notebook with nbclient (so every figure and table is produced by the notebook that shows it), drop hidden cells
and exported source the way nbdev's site does, render widgets as static HTML of their final state, render with
nbconvert's HTML exporter, and add a sidebar (chapters, the page's contents, search over every section, a link to the
notebook) and one shared stylesheet. Where Quarto exists, `nbdev_docs` builds nbdev's usual site instead.
Usage: python tools/build_docs.py [--out _site] [--workers 2] [--no-exec]
"""
import argparse, ast, html, json, os, re, shutil, tempfile, time
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
    names = []
    for n in tree.body:
        if not isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) or n.name.startswith("_"): continue
        patched = any(isinstance(d, ast.Name) and d.id == "patch" for d in getattr(n, "decorator_list", []))
        if patched:   # fastcore's @patch: a method added to the class its `self` is annotated with
            ann = n.args.args[0].annotation if n.args.args else None
            # a public class's documented methods (show_doc of an undocumented one prints `Call self as a function.`)
            if isinstance(ann, ast.Name) and not ann.id.startswith("_") and ast.get_docstring(n):
                names.append(f"{ann.id}.{n.name}")
        else: names.append(n.name)
    return names


def prepare(nb):
    """Cells for execution: show_doc after exported definitions; hidden/exported/eval-false handled (shown, not run;
    a picture they keep is shown too); tags for rendering."""
    # seeded kernels: a chapter's example draws the same numbers every build, so a check with too little margin fails
    # every time it is written, not one build in fifty (two red landings came from unseeded inits); no names leak
    seed = ("from nbdev.showdoc import show_doc\nimport random as _r, numpy as _np, torch as _t\n_r.seed(0)\n"
            "_np.random.seed(0)\n_t.manual_seed(0)\ndel _r, _np, _t")
    cells = [nbformat.v4.new_code_cell(seed, metadata={"tags": ["remove_cell"]})]
    for c in nb.cells:
        c.pop("outputs", None) if c.cell_type != "code" else None
        d = directives(c.source) if c.cell_type == "code" else {}
        if c.cell_type == "code":
            if "default_exp" in d: continue
            tags = []
            if "hide" in d: tags.append("remove_cell")
            if "export" in d or "exporti" in d: tags.append("remove_input" if "export" in d else "remove_cell")
            if d.get("eval") == "false" or "slow" in d or "gpu" in d:      # shown, not run (like nbdev_test's tst_flags)
                cells.append(nbformat.v4.new_markdown_cell("```python\n" + strip_directives(c.source) + "\n```"))
                pngs = [o["data"]["image/png"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
                if pngs:   # a picture the notebook keeps (made once, too slow for the build): shown as kept
                    img = '<img alt="a figure the notebook keeps" style="max-width:100%" src="data:image/png;base64,{}">'
                    cells.append(nbformat.v4.new_markdown_cell("".join(img.format(p.strip()) for p in pngs)))
                continue
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
    return nb


def chapter_title(nb, fallback):
    for c in nb.cells:
        if c.cell_type == "markdown":
            m = re.search(r"^#\s+(.+)$", c.source, re.M)
            if m: return m.group(1).strip().replace("`", "")
    return fallback


def _esc(s): return html.escape(str(s))


def widget_html(model_id, states, depth=0):
    """A static HTML rendering of a widget's final state (the page shows what the notebook showed when it finished:
    a form with its values, a progress bar at its last value), from the widget state nbclient stored."""
    w = states.get(model_id)
    if w is None or depth > 20: return ""
    name, s = w.get("model_name", ""), w.get("state", {})
    kids = lambda: "".join(widget_html(c.removeprefix("IPY_MODEL_"), states, depth + 1) for c in s.get("children", []))
    desc = f'<span class="w-desc">{_esc(s["description"])}</span>' if s.get("description") and name != "ButtonModel" else ""
    if name in ("HBoxModel", "GridBoxModel"): return f'<div class="w-hbox">{kids()}</div>'
    if name in ("VBoxModel", "BoxModel"): return f'<div class="w-vbox">{kids()}</div>'
    if name in ("TabModel", "AccordionModel"):
        titles = s.get("titles") or []
        return "".join(f'<details open class="w-tab"><summary>{_esc(titles[i] if i < len(titles) else i)}</summary>'
                       f'{widget_html(c.removeprefix("IPY_MODEL_"), states, depth + 1)}</details>' for i, c in enumerate(s.get("children", [])))
    if name in ("HTMLModel", "HTMLMathModel"): return f'<div class="w-html">{desc}{s.get("value", "")}</div>'
    if name == "LabelModel": return f'<span class="w-label">{_esc(s.get("value", ""))}</span>'
    if name in ("FloatProgressModel", "IntProgressModel"):
        lo, hi, v = s.get("min", 0), s.get("max", 100) or 1, s.get("value", 0)
        style = " w-" + s["bar_style"] if s.get("bar_style") else ""
        return f'{desc}<progress class="w-progress{style}" value="{v - lo}" max="{hi - lo}"></progress>'
    if name in ("TextModel", "IntTextModel", "FloatTextModel", "BoundedIntTextModel", "BoundedFloatTextModel", "TextareaModel",
                "IntSliderModel", "FloatSliderModel", "FloatLogSliderModel"):
        return f'<label class="w-field">{desc}<input disabled value="{_esc(s.get("value", ""))}"></label>'
    if name in ("DropdownModel", "RadioButtonsModel", "ToggleButtonsModel", "SelectModel"):
        labels, i = s.get("_options_labels", []), s.get("index")
        opts = "".join(f'<option{" selected" if j == i else ""}>{_esc(l)}</option>' for j, l in enumerate(labels))
        return f'<label class="w-field">{desc}<select disabled>{opts}</select></label>'
    if name == "SelectMultipleModel":
        labels, chosen = s.get("_options_labels", []), set(s.get("index") or [])
        opts = "".join(f'<option{" selected" if j in chosen else ""}>{_esc(l)}</option>' for j, l in enumerate(labels))
        return f'<label class="w-field">{desc}<select multiple disabled size="{min(6, max(2, len(labels)))}">{opts}</select></label>'
    if name in ("CheckboxModel", "ToggleButtonModel"):
        return f'<label class="w-field"><input type="checkbox" disabled{" checked" if s.get("value") else ""}> {_esc(s.get("description", ""))}</label>'
    if name == "ButtonModel": return f'<button class="w-button" disabled>{_esc(s.get("description", ""))}</button>'
    if name == "OutputModel":
        parts = []
        for o in s.get("outputs", []):
            d = o.get("data", {})
            if "text/html" in d: parts.append("".join(d["text/html"]) if isinstance(d["text/html"], list) else d["text/html"])
            elif "image/png" in d: parts.append(f'<img src="data:image/png;base64,{d["image/png"]}">')
            elif "text/plain" in d: parts.append(f'<pre>{_esc("".join(d["text/plain"]) if isinstance(d["text/plain"], list) else d["text/plain"])}</pre>')
            elif o.get("output_type") == "stream": parts.append(f'<pre>{_esc("".join(o.get("text", "")))}</pre>')
        return f'<div class="w-output">{"".join(parts)}</div>'
    return f'<span class="w-other">{desc}{_esc(s.get("value", ""))}</span>' if "value" in s else ""


TMP_PATH = re.compile(r"(?:/private)?/tmp/(?:tmp[\w-]+|pytest-of-[\w-]+/pytest-\d+/[\w.-]+)")


def tidy_text(t):
    "Outputs name the example's own files: a temporary folder (different at every build) is shown as `…`."
    return TMP_PATH.sub("…", t)


def tidy_output(o, states):
    data = o.get("data", {})
    view = data.get("application/vnd.jupyter.widget-view+json")
    if view is not None:
        rendered = widget_html(view.get("model_id", ""), states)
        o["data"] = {"text/html": rendered} if rendered else {}
    if "text" in o: o["text"] = tidy_text("".join(o["text"]) if isinstance(o["text"], list) else o["text"])
    for k in ("text/plain", "text/html", "text/markdown"):
        if k in o.get("data", {}):
            v = o["data"][k]; o["data"][k] = tidy_text("".join(v) if isinstance(v, list) else v)
    return o


def render(args):
    src, out_dir, execute = args
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    nb = prepare(nbformat.read(src, as_version=4))
    t0 = time.time()
    if execute:
        # immediate: the kernel is killed once its last cell has run, not asked to end (an interpreter's end with torch
        # loaded is 1.2 s of CPU, 43 times beside the tests); what a chapter started dies with its kernel, as it must
        # startup_timeout: a kernel that took over nbclient's 60 s to start (a slow day, the tests beside it) failed
        # the whole build on 2026-12-02; a slow start is not a broken chapter
        NotebookClient(nb, timeout=900, startup_timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(NBS)}}, store_widget_state=True,
                       shutdown_kernel="immediate").execute()
    states = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for c in nb.cells:
        if c.cell_type == "code":
            c.source = strip_directives(c.source)
            for o in c.get("outputs", []):
                md = o.get("data", {}).get("text/markdown")
                if md:   # show_doc's source link carries Quarto attributes and points at the repo host: drop it
                    md = "".join(md) if isinstance(md, list) else md
                    o["data"]["text/markdown"] = re.sub(r"\[source\]\([^)]*\)\{[^}]*\}", "", md).replace("{target=\"_blank\"}", "")
            # widgets (forms, tqdm bars) as static HTML of their final state; no live widget manager (it comes from a CDN)
            c.outputs = [tidy_output(o, states) for o in c.get("outputs", [])]
    nb.metadata.pop("widgets", None)
    exp = HTMLExporter(template_name="lab", exclude_input_prompt=True, exclude_output_prompt=True)
    exp.register_preprocessor(TagRemovePreprocessor(remove_cell_tags={"remove_cell"}, remove_input_tags={"remove_input"},
                                                    enabled=True), enabled=True)
    body, _ = exp.from_notebook_node(nb)
    title = chapter_title(nb, src.stem)
    name = "index.html" if src.stem == "index" else f"{src.stem}.html"
    (out_dir / name).write_text(body)
    return src.stem, title, name, time.time() - t0


SITE_CSS = """
#dpt-side{position:fixed;top:0;left:0;bottom:0;width:250px;overflow-y:auto;background:#f8fafc;border-right:1px solid #e2e8f0;
 padding:14px 12px 40px;font:14px/1.45 system-ui,sans-serif;box-sizing:border-box;z-index:100}
#dpt-side .brand{display:block;font-weight:700;font-size:18px;color:#111827;text-decoration:none;margin-bottom:10px}
#dpt-side ol{list-style:none;margin:0;padding:0} #dpt-side li{margin:2px 0}
#dpt-side a{color:#334155;text-decoration:none} #dpt-side a:hover{color:#1d4ed8}
#dpt-side li.current>a{color:#1d4ed8;font-weight:600} #dpt-side ol.toc{margin:2px 0 6px 10px;font-size:13px}
#dpt-side ol.toc li.h3{margin-left:10px}
#dpt-search{width:100%;box-sizing:border-box;padding:6px 8px;margin-bottom:6px;border:1px solid #cbd5e1;border-radius:6px}
#dpt-results{margin-bottom:10px} #dpt-results a{display:block;padding:4px 2px;border-bottom:1px solid #e2e8f0}
#dpt-results small{display:block;color:#64748b} #dpt-side .source{margin-top:14px;font-size:13px;color:#64748b}
body.jp-Notebook{margin-left:262px!important;max-width:1100px}
.w-hbox{display:flex;gap:8px;align-items:center;flex-wrap:wrap} .w-vbox{display:flex;flex-direction:column;gap:4px}
.w-field{display:inline-flex;gap:6px;align-items:center} .w-progress{width:280px} .w-desc{color:#334155}
@media (max-width:900px){#dpt-side{position:static;width:auto;border:0} body.jp-Notebook{margin-left:0!important}}
"""

SEARCH_JS = """(function(){
var box=document.getElementById('dpt-search'),out=document.getElementById('dpt-results'),idx=null;
function load(then){if(idx)return then();var s=document.createElement('script');s.src='search.js';
 s.onload=function(){idx=window.DPT_SEARCH;then();};document.head.appendChild(s);}
function esc(t){return t.replace(/[&<>"]/g,function(c){return{'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c];});}
function run(){var q=box.value.toLowerCase().trim();out.innerHTML='';if(q.length<2)return;var w=q.split(/\\s+/),hits=[];
 idx.forEach(function(e){var t=e.title.toLowerCase(),x=e.text.toLowerCase();
  if(w.every(function(k){return t.indexOf(k)>=0||x.indexOf(k)>=0;})){
   var sc=w.filter(function(k){return t.indexOf(k)>=0;}).length*10+(e.anchor?0:1);hits.push([sc,e]);}});
 hits.sort(function(a,b){return b[0]-a[0];});
 hits.slice(0,12).forEach(function(h){var e=h[1],i=e.text.toLowerCase().indexOf(w[0]),a=document.createElement('a');
  a.href=e.file+(e.anchor?'#'+e.anchor:'');a.innerHTML=esc(e.page)+(e.anchor?' › '+esc(e.title):'')+
  '<small>'+esc(e.text.substr(Math.max(0,i-40),120))+'</small>';out.appendChild(a);});
 if(!hits.length)out.textContent='no match';}
box.addEventListener('focus',function(){load(function(){});});
box.addEventListener('input',function(){load(run);});})();"""


def _plain(fragment):
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).replace("¶", "").strip()


def headings(body):
    "(level, anchor, text) of a page's h2 and h3 headings (nbconvert gives each an id)."
    return [(int(m.group(1)), m.group(2), _plain(m.group(3)))
            for m in re.finditer(r'<h([23])[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', body, re.S)]


def sections(page, file, body):
    "Search entries: the page, then one per h2/h3 section with its text."
    main = body.split("<body", 1)[-1]
    parts = re.split(r'(<h[123][^>]*\bid="[^"]+"[^>]*>.*?</h[123]>)', main, flags=re.S)
    out, title, anchor = [], page, ""
    for part in parts:
        m = re.match(r'<h([123])[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', part, re.S)
        if m: title, anchor = _plain(m.group(3)), (m.group(2) if m.group(1) != "1" else ""); continue
        text = _plain(re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", part, flags=re.S))
        if text: out.append(dict(page=page, file=file, title=title, anchor=anchor, text=text[:3000]))
    return out


def finish_site(out_dir, pages):
    """One stylesheet for every page (nbconvert inlines ~260 KB of CSS per page), a sidebar with the chapters and the
    current page's contents, a search box over every section (search.js, loaded on first use; works from file:// too),
    a link to each chapter's notebook (copied into the site), and no request to a CDN."""
    assets = out_dir / "assets"; assets.mkdir(exist_ok=True)
    (out_dir / "nbs").mkdir(exist_ok=True)
    index, css_files = [], {}
    bodies = {name: (out_dir / name).read_text() for _, _, name, _ in pages}
    for stem, title, name, _ in pages:
        text = bodies[name]
        head, rest = text.split("</head>", 1)
        styles = re.findall(r"<style[^>]*>.*?</style>", head, flags=re.S)
        css = "\n".join(re.sub(r"^<style[^>]*>|</style>$", "", st) for st in styles) + SITE_CSS
        import hashlib
        key = hashlib.sha1(css.encode()).hexdigest()[:10]
        if key not in css_files: (assets / f"site-{key}.css").write_text(css); css_files[key] = True
        head = re.sub(r"<style[^>]*>.*?</style>\s*", "", head, flags=re.S)
        head += f'<link rel="stylesheet" href="assets/site-{key}.css"><link rel="icon" href="data:,">'
        text = head + "</head>" + rest
        text = re.sub(r'href="(?:nbs/)?(\d\d[a-z]?_[\w-]+)\.ipynb"', r'href="\1.html"', text)       # chapter links
        text = text.replace(f"<title>{stem}</title>", f"<title>dptoolkit · {html.escape(title)}</title>")
        # an offline site: no CDN scripts (require.js, MathJax, widget manager)
        text = re.sub(r'<script[^>]+src="https?://[^"]*"[^>]*>\s*</script>', "", text)
        text = re.sub(r'<script type="module">(?:(?!</script>).)*?https?://(?:(?!</script>).)*</script>', "", text, flags=re.S)
        toc = "".join(f'<li class="h{lvl}"><a href="#{a}">{html.escape(t)}</a></li>' for lvl, a, t in headings(text))
        items = "".join(f'<li class="{"current" if n == name else ""}"><a href="{n}">{html.escape(t)}</a>'
                        + (f'<ol class="toc">{toc}</ol>' if n == name and toc else "") + "</li>" for s, t, n, _ in pages if s != "index")
        shutil.copy(NBS / f"{stem}.ipynb", out_dir / "nbs" / f"{stem}.ipynb")
        side = (f'<aside id="dpt-side"><a class="brand" href="index.html">dptoolkit</a>'
                f'<input id="dpt-search" type="search" placeholder="Search the docs" aria-label="Search the docs">'
                f'<div id="dpt-results"></div><nav><ol>{items}</ol></nav>'
                f'<div class="source">Source: <a href="nbs/{stem}.ipynb">nbs/{stem}.ipynb</a></div></aside>')
        index += sections(title, name, text)   # the page's own text, before the sidebar goes in
        text = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + side, text, count=1)
        text = text.replace("</body>", '<script src="assets/search-ui.js"></script></body>', 1)
        (out_dir / name).write_text(text)
    (assets / "search-ui.js").write_text(SEARCH_JS)
    (out_dir / "search.js").write_text("window.DPT_SEARCH=" + json.dumps(index, ensure_ascii=False) + ";")


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--out", default=str(ROOT / "_site"))
    ap.add_argument("--workers", type=int, default=1)  # two kernels at once thrash a 2-core machine
    ap.add_argument("--no-exec", action="store_true")
    ap.add_argument("--only", help="comma-separated notebook names to build (a quick look at a few pages)")
    a = ap.parse_args()
    out = Path(a.out)
    if out.exists(): shutil.rmtree(out)
    out.mkdir(parents=True)
    nbs = sorted(NBS.glob("[0-9][0-9]*_*.ipynb")) + [NBS / "index.ipynb"]
    if a.only: nbs = [p for p in nbs if p.stem in a.only.split(",") or p.stem == "index"]
    # the chapters' temporary folders (tempfile.mkdtemp: stores, runs, checkpoints; 1.4 GB for the interop chapter) go
    # into one folder of this build, removed at its end: repeated builds do not fill the disk
    scratch = tempfile.mkdtemp(prefix="dpt-docs-")
    os.environ["TMPDIR"] = scratch
    try:
        with ProcessPoolExecutor(a.workers) as ex:
            pages = list(ex.map(render, [(p, out, not a.no_exec) for p in nbs]))
    finally: shutil.rmtree(scratch, ignore_errors=True)
    pages = [pages[-1]] + pages[:-1]
    finish_site(out, pages)
    (out / "pages.json").write_text(json.dumps([dict(stem=s, title=t, file=n) for s, t, n, _ in pages], indent=1))
    for s, t, n, dt in pages: print(f"{n:26s} {t:45s} {dt:5.1f} s")
    print(f"site: {out} ({len(pages)} pages)")


if __name__ == "__main__":
    main()
