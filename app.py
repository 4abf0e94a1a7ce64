"""specwhisper's Space: Whisper with and without speculative decoding, side by side.

The page lives in specwhisper.ui; this file builds it and launches it. `python app.py` (or a
Space) also loads the default pair before the first visitor (see specwhisper.ui.zerogpu for why
that is the ZeroGPU way); nothing imports this module.
"""

try:  # first, before torch: ZeroGPU on Hugging Face Spaces (absent elsewhere)
    import spaces  # noqa: F401
except ImportError:  # pragma: no cover - spaces is in requirements.txt
    pass

import logging

from specwhisper.ui import build_demo, launch_options, preload_default_pair, preload_wanted

demo = build_demo()
if preload_wanted(__name__):
    preload_default_pair()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    demo.launch(**launch_options())
