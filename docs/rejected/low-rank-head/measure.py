"""Whether a low-rank copy of the output projection finds the main's next token.

The draft's int8 output projection (51,865 rows) is its largest cost per token. A rank-r
factor of the [V, D] matrix (its SVD) would cost r/D of it, and rescoring the approximation's
top k rows exactly would keep the draft's choice exact whenever the true argmax is among them.
This reads each clip's greedy transcript back through whisper-base's decoder (fp32, one pass),
and counts how often the exact argmax is in the approximation's top k.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python docs/rejected/low-rank-head/measure.py \
        --manifest ../shared/data/speech/manifest.tsv
"""

from __future__ import annotations

import argparse

import torch

from specwhisper import checkpoints, decoding, loading
from specwhisper.bench.selection import select_clips

RANKS = (32, 64, 128, 256)
TOP_K = (8, 32, 128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--filter", default="^en_(whispercpp|pocketsphinx|alsa|asterisk)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    model, config = loaded.model, loaded.model.generation_config
    weight = model.proj_out.weight.detach()  # [V, D]
    u, s, vh = torch.linalg.svd(weight, full_matrices=False)
    hidden = []
    for clip in select_clips(args.manifest, pattern=args.filter):
        features = decoding.prepare_features(loaded, clip.samples)
        if features.long_form:
            continue
        with torch.inference_mode():
            encoded = model.get_encoder()(features.input_features).last_hidden_state
            (text,) = model.generate(features.input_features, language="en", task="transcribe")
            prompt = [
                model.config.decoder_start_token_id,
                config.lang_to_id["<|en|>"],
                config.task_to_id["transcribe"],
                config.no_timestamps_token_id,
            ]
            sequence = torch.tensor([*prompt, *text.tolist(), config.eos_token_id])
            states = model.model.decoder(
                input_ids=sequence[:-1].unsqueeze(0), encoder_hidden_states=encoded
            ).last_hidden_state[0]
            hidden.append(states[len(prompt) - 1 :])  # the text tokens and end-of-text
    states = torch.cat(hidden)
    exact = (states @ weight.T).argmax(-1)
    print(
        f"{len(states)} positions; singular values 1, 32, 64, 128, 256, 512:",
        ", ".join(f"{s[i - 1]:.2f}" for i in (1, 32, 64, 128, 256, 512)),
    )
    print("| rank | " + " | ".join(f"top {k}" for k in TOP_K) + " |")
    print("|---|" + "---|" * len(TOP_K))
    for rank in RANKS:
        approx = (states @ vh[:rank].T) @ (u[:, :rank] * s[:rank]).T
        found = [
            (approx.topk(k, -1).indices == exact[:, None]).any(-1).float().mean().item()
            for k in TOP_K
        ]
        print(f"| {rank} | " + " | ".join(f"{f:.1%}" for f in found) + " |")


if __name__ == "__main__":
    main()
