"""What a ZeroGPU worker would pay to get its model: load from disk, copy, or inherit by fork.

Measures whisper-base (fp32 weights and processor, files in the page cache), one thread, median
of 5 after one warm-up: `from_pretrained` from disk (what loading inside every worker costs), a
full in-memory copy of the weights (the host side of moving the server's copy), and forking a
child that reads every inherited weight (what a worker forked after the server loaded pays).
No GPU is needed; the host-to-GPU copy itself is not measured. Prints one JSON line.

    OMP_NUM_THREADS=1 python scripts/zerogpu_load.py [--model models/whisper-base]
"""

import argparse
import json
import multiprocessing as mp
import statistics
import time

import torch
from transformers import WhisperForConditionalGeneration, WhisperProcessor


def median_s(fn, n: int = 5) -> float:
    fn()  # warm-up
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/whisper-base", help="a transformers folder")
    args = parser.parse_args()
    torch.set_num_threads(1)

    def load() -> torch.nn.Module:
        WhisperProcessor.from_pretrained(args.model)
        model = WhisperForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32)
        return model.eval()

    model = load()

    def read_all() -> None:
        for p in model.parameters():
            float(p.detach().sum())

    def fork_and_read() -> None:  # a forked worker reads every weight it inherited
        child = mp.get_context("fork").Process(target=read_all)
        child.start()
        child.join()

    weights_mb = sum(p.nbytes for p in model.parameters()) / 2**20
    copy_s = median_s(lambda: [p.detach().clone() for p in model.parameters()])
    print(
        json.dumps(
            {
                "weights_MB": round(weights_mb),
                "load_from_disk_s": round(median_s(load), 3),
                "copy_in_memory_s": round(copy_s, 3),
                "fork_and_read_s": round(median_s(fork_and_read), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
