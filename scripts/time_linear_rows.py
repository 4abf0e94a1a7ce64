"""Why a verify pass over k tokens costs more than k = 1: matmul time by number of rows.

Measures whisper-base's Linear shapes (random weights, one thread or --threads, weights in
cache) and its 51,865-row output projection for 1, 2, 4, 6 and 8 rows, three ways: `F.linear`
on the [out, in] weight, `addmm` with an [in, out] copy, and oneDNN's packed copy
(specwhisper.packed). Median of 200 calls after 5 (50 for the output projection). Prints
`F.linear / addmm / packed` in microseconds; `~` marks where addmm's result differs from
F.linear's in the last bits, `=` where they are equal.

    OMP_NUM_THREADS=1 taskset -c 1 python scripts/time_linear_rows.py [--threads N]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import packed

SHAPES = [(512, 512), (512, 1536), (512, 2048), (2048, 512), (512, 51865)]  # (in, out)


def median_us(fn, n: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def shape_row(n_in: int, n_out: int) -> str:
    weight, bias = torch.randn(n_out, n_in), torch.randn(n_out)
    weight_t = weight.t().contiguous()
    rows_copy = packed.pack(weight)
    n = 50 if n_out > 10000 else 200
    cells = []
    for k in (1, 2, 4, 6, 8):
        x = torch.randn(k, n_in)
        a = median_us(lambda x=x: F.linear(x, weight, bias), n)
        b = median_us(lambda x=x: torch.addmm(bias, x, weight_t), n)
        c = median_us(lambda x=x: packed.linear(x, rows_copy, bias), n)
        same = torch.equal(F.linear(x, weight, bias), torch.addmm(bias, x, weight_t))
        cells.append(f"k{k}: {a:.0f}/{b:.0f}/{c:.0f}us{'=' if same else '~'}")
    return f"{n_in} {n_out} " + " ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    for n_in, n_out in SHAPES:
        print(shape_row(n_in, n_out))


if __name__ == "__main__":
    main()
