"""The bench with the verify pass's projection blocks on or off, for a side-by-side pair.

Runs `python -m specwhisper.bench` with the given arguments; BLOCKS=0 first sets
`loop.BLOCKED_ROWS = range(0)`, so every pass width uses the [D, V] copy of the output matrix
(the lever off). BLOCKS=1 (the default) runs the package as it is.

With projection-blocks.diff (beside this file) applied to a checkout, from its root:

    BLOCKS=0 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 \\
        python docs/rejected/projection-blocks/bench_blocks.py \\
        --main whisper-base --assistant self-int8 <a clip set's flags> --repeats 3 --peer \\
        --encoder-dtype bfloat16 --out bench-out/blocks-0
"""

import os
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import loop

if __name__ == "__main__":
    if os.environ.get("BLOCKS", "1") == "0":
        loop.BLOCKED_ROWS = range(0)  # the [D, V] copy for every width
    sys.argv[0] = "specwhisper.bench"
    runpy.run_module("specwhisper.bench", run_name="__main__")
