"""Benchmark: a manifest of clips -> baseline vs speculative Whisper, per clip and in total.

    python -m specwhisper.bench --main whisper-tiny.en --assistant self-int8 \\
        --manifest ../shared/data/speech/manifest.tsv --category read --repeats 3 --peer

For every clip it times the plain `generate` baseline and the speculative engine (and, with
`--peer`, transformers' own assisted generation with the same assistant) alternately, after a
warm-up and between device syncs, with the page's own code (`compare.compare_loaded`), and
keeps the medians. With `--reference faster-whisper[:int8|float32]` it also times
faster-whisper (CTranslate2) on the main's weights in the same runs, for context (see
reference.py). It prints a table (progress bar on stderr), writes `results.json` and
`speedups.png` to `--out`, and its last stdout line is one JSON object with the totals,
hardware and library versions.

The formulas (speed-up, acceptance alpha, cost ratio c, Leviathan's prediction) are
specwhisper.metrics'; totals apply them to all clips' decoding runs pooled. It does not
download anything a manifest names, retry failed clips, or judge speed: clips whose
transcripts differ are reported in the JSON, and the exit code is still 0. Bad input (manifest,
audio file, checkpoint, pair, language), and a GPU running out of memory, is one line on
stderr and exit code 2.
"""
