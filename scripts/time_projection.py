"""The output projection over a few rows, each way the matrix can be held.

Two measurements, 64 MB written before each call to flush the cache (in a real verify pass the
weights stream from memory):

- default: a random [51,865 x 512] fp32 matrix, rows 1-64: `hidden @` a [D, V] copy, `F.linear`
  on the [V, D] matrix, blocks of 128 to 4096 vocabulary rows
  (`torch.cat([hidden @ block.t() for block in blocks])`), and oneDNN's packed copy
  (specwhisper.packed); median of 20 calls after 3.
- `--model whisper-base`: that checkpoint's own matrix as the loop holds it (its [D, V] copy
  and its packed copy), rows 1-24, the two ways interleaved; median of 12 calls after 3.

    OMP_NUM_THREADS=1 taskset -c 0 python scripts/time_projection.py [--threads N]
    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 \
        python scripts/time_projection.py --model whisper-base
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import loop, packed

FLUSH = torch.empty(16 * 2**20)  # 64 MB, written before each call


def flushed_ms(fn, n: int, warmup: int = 3) -> float:
    times = []
    for _ in range(n + warmup):
        FLUSH.add_(1)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(1e3 * statistics.median(times[warmup:]), 2)


def random_matrix() -> None:
    torch.manual_seed(0)
    n_vocab, d_model = 51865, 512
    weight = torch.randn(n_vocab, d_model) * 0.05
    weight_t = weight.t().contiguous()
    blocks = {size: weight.split(size) for size in (128, 256, 1024, 4096)}
    rows_copy = packed.pack(weight) if packed.available() else None
    for rows in (1, 2, 3, 4, 6, 8, 12, 16, 24, 64):
        x = torch.randn(rows, d_model)
        result = {
            "[D, V] copy": flushed_ms(lambda x=x: x @ weight_t, 20),
            "F.linear": flushed_ms(lambda x=x: F.linear(x, weight), 20),
        }
        for size, parts in blocks.items():
            ms = flushed_ms(lambda x=x, p=parts: torch.cat([x @ b.t() for b in p], 1), 20)
            result[f"blocks of {size}"] = ms
        if rows_copy is not None:
            result["packed"] = flushed_ms(lambda x=x: packed.linear(x, rows_copy, None), 20)
        print(rows, result)


def model_matrix(name: str) -> None:
    from specwhisper import checkpoints, loading

    model = loading.CACHE.get(checkpoints.resolve(name), torch.device("cpu"), torch.float32).model
    loop.projection(model)  # builds the [D, V] copy the loop uses
    weight_t, rows_copy = model._specwhisper_proj_t[1], packed.packed_copy(model.proj_out)
    for rows in (1, 2, 6, 10, 12, 13, 14, 16, 20, 24):
        h, times = torch.randn(rows, weight_t.shape[0]), {"[D, V] copy": [], "packed": []}
        for _ in range(15):
            for kind in times:
                FLUSH.add_(1)
                t0 = time.perf_counter()
                if kind == "packed":
                    packed.linear(h, rows_copy, None)
                else:
                    h @ weight_t
                times[kind].append(time.perf_counter() - t0)
        print(rows, {k: round(1e3 * statistics.median(v[3:]), 2) for k, v in times.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a checkpoint's own matrix (e.g. whisper-base)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model_matrix(args.model)
    else:
        random_matrix()


if __name__ == "__main__":
    main()
