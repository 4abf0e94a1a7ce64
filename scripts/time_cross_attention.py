"""The draft's cross-attention product at batch 4, in fp32 and in bf16.

Measures `(q @ kt).softmax(-1) @ v` for one draft token of a batch of 4 rows over whisper-base's
1500 encoder frames (q [4, 8, 1, 64], kt [4, 8, 64, 1500], v [4, 8, 1500, 64]; random values),
one thread, mean of 50 calls after one untimed call; then the same with q, kt and v in bf16
and the softmax in fp32. Whether a bf16 copy of the keys/values pays depends on the CPU's bf16
instructions (`int8_forward.cross_dtype`). Six decoder layers run this per draft token.

    OMP_NUM_THREADS=1 taskset -c 0 python scripts/time_cross_attention.py
"""

import time

import torch


def mean_ms(fn, n: int = 50) -> float:
    fn()  # one untimed call
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return 1e3 * (time.perf_counter() - t0) / n


def main() -> None:
    torch.set_num_threads(1)
    q, kt, v = torch.randn(4, 8, 1, 64), torch.randn(4, 8, 64, 1500), torch.randn(4, 8, 1500, 64)
    qb, ktb, vb = q.bfloat16(), kt.bfloat16(), v.bfloat16()
    fp32 = mean_ms(lambda: (q @ kt).softmax(-1) @ v)
    bf16 = mean_ms(lambda: (qb @ ktb).float().softmax(-1).bfloat16() @ vb)
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"{capability}: fp32 {fp32:.2f} ms, bf16 {bf16:.2f} ms per layer")


if __name__ == "__main__":
    main()
