"""`report.html`: the Markdown report as one self-contained page.

Figures are inlined as base64 ``data:`` URIs, so the file can be mailed or attached to a
ticket alone; tables sort by a click on a header (a few lines of inline script, no
network). Markdown is rendered with markdown-it-py (installed with Rich).
"""

from __future__ import annotations

import base64
import html
import os
import re
import tempfile
from pathlib import Path

from ..errors import ArtifactError

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:72rem;
margin:2rem auto;padding:0 1rem;line-height:1.5;color:#1a1a1a}
table{border-collapse:collapse;margin:1rem 0;font-size:.92rem}
th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}
th{background:#f2f2f2;cursor:pointer;user-select:none}
th.asc::after{content:" ▲"}th.desc::after{content:" ▼"}
img{max-width:100%;height:auto;border:1px solid #eee}
code{background:#f6f6f6;padding:0 .2rem}
"""

# Click a header to sort its table by that column (numbers numerically, text otherwise).
_JS = """
document.querySelectorAll('table').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var body=t.tBodies[0]; if(!body) return;
      var asc=!th.classList.contains('asc');
      t.querySelectorAll('th').forEach(function(h){h.classList.remove('asc','desc');});
      th.classList.add(asc?'asc':'desc');
      var num=function(s){var m=s.replace(/[,\\s]/g,'').match(/^[-+]?[0-9.]+(e[-+]?[0-9]+)?/i);
        return m?parseFloat(m[0]):NaN;};
      var rows=Array.from(body.rows).sort(function(a,b){
        var x=a.cells[i].textContent.trim(), y=b.cells[i].textContent.trim();
        var nx=num(x), ny=num(y);
        var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);
        return asc?c:-c;});
      rows.forEach(function(r){body.appendChild(r);});
    });
  });
});
"""

_IMG = re.compile(r'<img src="([^"]+)" alt="([^"]*)"')


def render_html(markdown: str, base: Path, title: str = "prefixbench study report") -> str:
    """The page for ``markdown``; image paths are resolved against ``base`` and inlined."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)

    def inline(m: re.Match) -> str:
        src = html.unescape(m.group(1))
        path = (base / src) if not Path(src).is_absolute() else Path(src)
        try:
            data = base64.b64encode(path.read_bytes()).decode("ascii")
        except OSError:
            return m.group(0)  # left as a link; the Markdown report says what is missing
        return f'<img src="data:image/png;base64,{data}" alt="{m.group(2)}"'

    body = _IMG.sub(inline, body)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n"
        f"<body>\n{body}\n<script>{_JS}</script>\n</body></html>\n"
    )


def write_html(markdown: str, path: Path, base: Path) -> Path:
    """Write the page atomically, with the file mode of the Parquet files."""
    from prefixbench.io.artifacts import _UMASK

    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render_html(markdown, Path(base)))
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise ArtifactError(
            f"cannot write the HTML report ({e.strerror or e.__class__.__name__})",
            where=str(path),
            fix="free some disk space or choose another --out",
        ) from None
    return path
