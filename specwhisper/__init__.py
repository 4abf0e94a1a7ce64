"""specwhisper: Whisper baseline vs speculative decoding, token for token.

The engine package behind the Space. It imports without gradio; the page (specwhisper.ui, with
app.py on top) and the benchmark (specwhisper.bench) sit on it.

Names, used the same way everywhere:
- *main* and *assistant*: the two checkpoints a person picks; the main's tokens are the answer,
  the assistant proposes them ("self-int8": the main's own decoder in int8).
- *drafter*: the object that proposes tokens in our loop, built from the assistant (drafters).
- *baseline*: the main alone, plain `generate`; the left column.
- *speculative*: our speculative loop (engine "specwhisper"); the right column.
- *peer*: transformers' assisted generation with the same pair (engine "transformers").
- *reference*: another engine (faster-whisper) shown for context, not held to the same tokens.
- *reference text*: what is really said in a clip (a manifest's `reference` column), which WER
  scores every transcript against; never the reference engine's transcript.
- *gamma* (γ): draft tokens per step; *alpha*: per-token acceptance; *c*: one draft token's
  time over one main decoder step's (metrics).
Counts start with `n_` and times end in `_s`; one count has one name everywhere. Every ratio
between two times is a speed-up: the slower time over the subject's (metrics.ratio), so above 1
means the subject is faster.
"""

__version__ = "0.2.0"
