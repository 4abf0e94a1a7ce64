"""The encoder's time for one 30 s window, in fp32 and in bf16.

Measures whisper-base's encoder alone (transformers' module, random features of one 30 s
window), one thread, median of 5 calls after one warm-up call, for an fp32 copy and a bf16 copy
of the same weights. On a CPU with AMX-BF16 tiles the bf16 copy is the faster; without AMX it
is the slower. Both columns of a comparison pay the encoder, so this bounds what a draft can do.

    OMP_NUM_THREADS=1 taskset -c 0 python scripts/time_encoder.py [--model models/whisper-base]
"""

import argparse
import copy
import statistics
import time

import torch
from transformers import WhisperForConditionalGeneration


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
    model = WhisperForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32)
    encoder = model.model.encoder.eval()
    bf16 = copy.deepcopy(encoder).to(torch.bfloat16)
    x = torch.randn(1, model.config.num_mel_bins, 3000)  # one 30 s window of features
    with torch.inference_mode():
        a = median_s(lambda: encoder(x))
        b = median_s(lambda: bf16(x.bfloat16()))
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"{capability}: fp32 {a:.3f} s, bf16 {b:.3f} s, bf16 speed {a / b:.2f}x")


if __name__ == "__main__":
    main()
