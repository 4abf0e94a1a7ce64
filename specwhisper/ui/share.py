"""Sharing a result: a deep link that reopens the page with the same inputs and the result shown
(gradio's deep links: the button saves this visitor's page as it is and copies a `?deep_link=`
address to the clipboard), and the copy-ready `<gradio-app>` embed of the app for a blog post.

The embed's script is the gradio front end that this app's own server serves (the module its
page loads), so it always matches the server the element talks to and needs no other host.
The app's address is the Space's own (from SPACE_ID) on Hugging Face, else the address the
visitor reached this page at.

This module builds the section and its texts; it runs no comparison.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

SHARE_INTRO = (
    "**Copy a link to this result**: whoever opens it sees this page with the same audio, "
    "settings and result, without running it again. Run a comparison first; the link saves "
    "the page as it is when you click. The result stays; the audio and the JSON download in "
    "it are kept for about an hour."
)
EMBED_LABEL = "Embed this app in a blog post or web page (HTML)"
_ENTRY = re.compile(r"""import\(\s*["']\./(assets/[\w.-]+\.js)["']\s*\)""")


@dataclass(frozen=True)
class Share:
    """The share section: the deep-link button and the embed code."""

    link: gr.DeepLinkButton
    embed: gr.Code


def share_section(demo: gr.Blocks) -> Share:
    """The deep-link button and, beside it, the embed code, in a closed accordion. The code is
    written at each page load of `demo`, for the address the page was reached at (a private
    event: neither the API nor agents see it)."""
    with gr.Accordion("Share this result", open=False):
        gr.Markdown(SHARE_INTRO)
        with gr.Row(equal_height=False):
            with gr.Column(min_width=200, scale=1):
                # no icon: gradio's default is a file whose address names its install folder
                link = gr.DeepLinkButton(
                    "Copy a link to this result", copied_value="Link copied", icon=None
                )
            with gr.Column(min_width=300, scale=3):
                embed = gr.Code(
                    embed_for_request(),
                    language="html",
                    label=EMBED_LABEL,
                    buttons=["copy"],
                    interactive=False,
                    wrap_lines=True,
                )
    demo.load(embed_for_request, None, embed, api_visibility="private")
    return Share(link, embed)


def embed_for_request(request: gr.Request | None = None) -> str:
    """The embed code for this app, as reached by `request`, or on its Space. Without a request
    (as the page is built) and off a Space, none yet: the page load writes it."""
    base_url = str(request.request.base_url) if request is not None else ""
    url = app_url(os.environ.get("SPACE_ID"), base_url)
    return embed_code(url) if url else ""


def app_url(space_id: str | None, base_url: str) -> str:
    """Where a visitor's browser reaches this app: https://{owner}-{name}.hf.space on a Space
    (Hugging Face lower-cases it and writes '_' and '.' as '-'), else the page's own base URL."""
    if space_id and "/" in space_id:
        host = re.sub(r"[_.]", "-", space_id.replace("/", "-")).lower()
        return f"https://{host}.hf.space"
    return base_url.rstrip("/")


def embed_code(url: str) -> str:
    """The two lines a blog post needs: the web component's script and the element."""
    return (
        f'<script type="module" src="{url}/{frontend_entry()}"></script>\n'
        f'<gradio-app src="{url}"></gradio-app>'
    )


@functools.cache
def frontend_entry() -> str:
    """The installed gradio front end's entry module, e.g. "assets/index-DphvyggB.js", which
    the server serves and which defines <gradio-app>. Read from the package's own gradio.js
    (a one-line `import("./assets/index-….js")`); the server does not serve gradio.js itself."""
    loader = Path(gr.__file__).parent / "templates" / "frontend" / "gradio.js"
    match = _ENTRY.search(loader.read_text(encoding="utf-8"))
    if match is None:
        raise RuntimeError(f"no entry module named in {loader}")
    return match.group(1)
