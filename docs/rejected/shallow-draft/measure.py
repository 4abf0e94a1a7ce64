"""How often a shallower copy of the main's decoder picks the main's own next token.

For each clip the main decodes greedily (plain `generate`); then its decoder reads that whole
sequence once with every layer and once per subset of layers (the rest skipped; the final layer
norm and the output projection kept), and we count the positions where the subset's argmax is
the main's token. That agreement bounds the acceptance a draft of that depth could reach (its
int8 copy agrees a little less again); the expected tokens per main pass at γ follow from it.
Only agreement is measured here: no timing, so it runs beside anything.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python docs/rejected/shallow-draft/measure.py \
        --manifest ../shared/data/speech/manifest.tsv --filter '^en_'
"""

from __future__ import annotations

import argparse

import torch

from specwhisper import checkpoints, decoding, loading
from specwhisper.bench.selection import select_clips

SUBSETS = {  # name: the decoder layers kept (whisper-base has six: 0-5)
    "all 6": (0, 1, 2, 3, 4, 5),
    "without 1": (0, 2, 3, 4, 5),
    "without 2": (0, 1, 3, 4, 5),
    "without 3": (0, 1, 2, 4, 5),
    "without 4": (0, 1, 2, 3, 5),
    "without 5 (first 5)": (0, 1, 2, 3, 4),
    "without 3 and 4": (0, 1, 2, 5),
    "first 4": (0, 1, 2, 3),
}


def expected_tokens(p: float, gamma: int) -> float:
    """Tokens per main pass when each draft token agrees with probability p, independently."""
    return (1 - p ** (gamma + 1)) / (1 - p) if p < 1 else gamma + 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--filter", default="^en_")
    parser.add_argument("--main", default="whisper-base")
    args = parser.parse_args()
    torch.set_num_threads(1)
    main_model = loading.CACHE.get(
        checkpoints.resolve(args.main), torch.device("cpu"), torch.float32
    )
    model = main_model.model
    layers = model.model.decoder.layers
    agree = {name: 0 for name in SUBSETS}
    n_tokens = 0
    eot = model.generation_config.eos_token_id
    for clip in select_clips(args.manifest, pattern=args.filter):
        features = decoding.prepare_features(main_model, clip.samples)
        if features.long_form:
            continue  # one 30 s window per clip keeps the reading simple
        with torch.inference_mode():
            encoded = model.get_encoder()(features.input_features).last_hidden_state
            (text,) = model.generate(
                features.input_features, language=clip.language, task="transcribe"
            )  # the text tokens only
            config = model.generation_config
            prompt = [
                model.config.decoder_start_token_id,
                config.lang_to_id[f"<|{clip.language}|>"],
                config.task_to_id["transcribe"],
                config.no_timestamps_token_id,
            ]
            sequence = torch.tensor([*prompt, *text.tolist(), eot])
            inputs, targets = sequence[:-1].unsqueeze(0), sequence[1:]
            scored = slice(len(prompt) - 1, len(targets))  # the text tokens and end-of-text
            for name, kept in SUBSETS.items():
                model.model.decoder.layers = torch.nn.ModuleList(layers[i] for i in kept)
                try:
                    hidden = model.model.decoder(
                        input_ids=inputs, encoder_hidden_states=encoded, use_cache=False
                    ).last_hidden_state
                finally:
                    model.model.decoder.layers = layers
                picks = model.proj_out(hidden)[0].argmax(-1)
                agree[name] += int((picks[scored] == targets[scored]).sum())
            n_tokens += len(targets[scored])
    print(f"{n_tokens} tokens of {args.main}'s greedy transcripts ({args.filter})")
    print("| layers kept | agreement | tokens per main pass at γ 4 | at γ 8 |")
    print("|---|---|---|---|")
    for name in SUBSETS:
        p = agree[name] / n_tokens
        print(f"| {name} | {p:.1%} | {expected_tokens(p, 4):.2f} | {expected_tokens(p, 8):.2f} |")


if __name__ == "__main__":
    main()
