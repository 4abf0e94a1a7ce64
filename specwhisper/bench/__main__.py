"""`python -m specwhisper.bench`: the benchmark's command line (cli.main)."""

import sys

from specwhisper.bench.cli import main

sys.exit(main())
