"""The web page: one audio, Whisper with and without speculative decoding, side by side, and
its public `compare` endpoint (also an MCP tool). The only part of specwhisper that imports
gradio; the engine below it never does. app.py builds the page from here and launches it.

One concern per module:
  layout     build_demo: the page composed from its sections, and the events wiring them
  form       the form section: audio and examples, the pair, language, task, advanced settings
  api        the `compare` endpoint's fields as one table: hidden inputs and the request built
  handlers   what the endpoint and Compare run: request, audio, loading, device, rendering
  zerogpu    the ZeroGPU-decorated calls that load and run models
  gpu_time   the ZeroGPU time a call asks for, from its work; the audio limit on ZeroGPU
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
  batch_mode batch mode's handler and its views: reads the files, asks specwhisper.batch_mode,
             draws the result
  choices    the mains, the assistants that fit, the starting pair, the examples
  texts      the page's fixed texts and choice lists
  startup    preloading the default pair, and the launch options
  hardware   what torch sees, logged at start-up; a Space's GPU that torch cannot use, said

To add a view under Compare: (1) a renderer, result -> value, in the module of its concern;
(2) a field in handlers.Shown and a component of that name in layout.Results (results_section);
(3) one keyword in handlers.drawn, and its empty value in handlers.EMPTY. The outputs follow
Shown's fields by name; tests/test_layout.py fails when the two disagree.

It does not decode or time models itself.
"""

from specwhisper.ui.layout import build_demo
from specwhisper.ui.startup import launch_options, preload_default_pair, preload_wanted

__all__ = ["build_demo", "launch_options", "preload_default_pair", "preload_wanted"]
