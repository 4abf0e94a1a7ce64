"""specwhisper: Whisper baseline vs speculative decoding, token for token.

The engine package behind the Space. It imports without gradio; app.py and bench.py sit on top.
"""

__version__ = "0.1.0"
