"""Making untrusted text inert, per output format (pure).

Trial flags, file names, task ids and reasons that quote model output come from agents and models:
every renderer passes them through the function for its format. :func:`clean` drops control
characters (invalid in XML, confusing everywhere); :func:`md_escape` and :func:`md_code` neutralise
GitHub Markdown (which renders inline HTML); :func:`esc` is HTML escaping after :func:`clean`.
"""

from __future__ import annotations

import html
import re

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")


def clean(text: str) -> str:
    """Drop control characters (invalid in XML, confusing everywhere) from untrusted text."""
    return _CONTROL.sub("\ufffd", text)


def md_escape(text: str) -> str:
    """Make untrusted text inert in a GitHub Markdown table cell (GitHub renders inline HTML)."""
    text = clean(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")
    text = text.replace("[", "\\[").replace("]", "\\]")
    return " ".join(text.split())


def md_code(text: str) -> str:
    """Untrusted text as an inline code span (no backticks inside; pipes escaped for tables)."""
    return "`" + " ".join(clean(text).replace("`", "'").replace("|", "\\|").split()) + "`"


def esc(value: object) -> str:
    """Any value as HTML text or attribute content."""
    return html.escape(clean(str(value)), quote=True)
