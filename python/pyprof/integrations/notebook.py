"""How %%cprof shows its result in a notebook: the self-contained HTML report
(export/report.py) in a sandboxed iframe, so its script and styles stay apart
from the notebook's and nothing is fetched from the network, with the text
tables under it."""
from __future__ import annotations

import html as _html

from ..export import report


def html(result) -> str:
    note = ""
    if result.error is not None:
        note = (f"<p><b>The cell raised {_html.escape(type(result.error).__name__)}</b>: "
                f"the profile covers what ran before it.</p>")
    page = report.render(result.session)
    return (f'{note}<iframe sandbox="allow-scripts" style="width:100%;height:640px;'
            f'border:1px solid #ddd" srcdoc="{_html.escape(page, quote=True)}"></iframe>'
            f"<details><summary>text tables</summary><pre>{_html.escape(result.text)}</pre>"
            f"</details>")
