"""The web page: one audio, Whisper with and without speculative decoding, side by side, and
its public `compare` endpoint (also an MCP tool). The only part of specwhisper that imports
gradio; the engine below it never does. app.py builds the page from here and launches it.

One concern per module:
  layout     build_demo: the page composed from its sections, and the events wiring them
  form       the form section: audio and examples, the pair, language, task, advanced settings
  api        the `compare` endpoint's fields as one table: hidden inputs and the request built
  handlers   what the endpoint and Compare run: request, audio, loading, device, rendering
  device     the ZeroGPU-decorated calls that run models, and the GPU time they reserve
  stopping   timed runs stop between model passes when their visitor cancels or leaves
  errors     errors worded for a person
  verdict    the headline (IDENTICAL or MISMATCH, speed-up, precision), a failed run's
             sentence, and the two columns
  timebars   where each column's time went, what bounds the speed-up, the repeats' spread
  reference_view  the optional third column: faster-whisper, another engine, for context
  tokens     the draft-token view and the step table
  figure     the spectrogram, and the strip of where in the audio the draft was kept or not
  share      the deep link to a result, and the <gradio-app> embed code
  snippet    "run it yourself": specwhisper's loop, and plain_snippet, the same run in plain
             transformers
  exports    the Markdown table and the JSON download
  estimate   how long Compare takes on this machine, said before it starts
  batch      batch mode's handler: reads the files, asks specwhisper.batch, presents
  batch_view batch mode's results drawn
  choices    the mains, the assistants that fit, the starting pair, the examples
  texts      the page's fixed texts and choice lists
  startup    preloading the default pair, and the launch options
  hardware   what torch sees, logged at start-up; a Space's GPU that torch cannot use, said

It does not decode or time models itself.
"""

from specwhisper.ui.layout import build_demo
from specwhisper.ui.startup import launch_options, preload_default_pair, preload_wanted

__all__ = ["build_demo", "launch_options", "preload_default_pair", "preload_wanted"]
