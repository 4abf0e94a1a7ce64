"""The bench's command line: flags checked, the request built, and the run in order (input
checked, models loaded, clips timed, results written). `python -m specwhisper.bench` runs
`main`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specwhisper import (
    compare,
    decoding,
    drafters,
    loading,
    reference,
    request_check,
    schedule,
)
from specwhisper.bench import batch_mode
from specwhisper.bench.reporting import (
    hardware,
    print_header,
    print_table,
    save_chart,
    versions,
    write_results,
)
from specwhisper.bench.running import PEER_ENGINE, peer_gamma, run_all, totals
from specwhisper.bench.selection import check_clips, join_clips, select_clips
from specwhisper.request_check import DEFAULTS, CompareRequest

EXIT_BAD_INPUT = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m specwhisper.bench",
        description="Baseline vs speculative Whisper on a manifest of clips: per-clip timings, "
        "identical-transcript check, WER, and totals. The last stdout line is a JSON object.",
    )
    parser.add_argument("--main", required=True, help="Hub id, local folder name or path")
    parser.add_argument("--assistant", required=True, help="Hub id, local folder, or self-int8")
    parser.add_argument("--manifest", required=True, help="manifest.tsv (or its folder)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULTS.repeats,
        help=f"timed runs per side (default {DEFAULTS.repeats})",
    )
    parser.add_argument(
        "--language",
        default=DEFAULTS.language,
        help="auto (each row's language column) or a Whisper code",
    )
    parser.add_argument(
        "--peer", action="store_true", help="also time transformers' assisted generation"
    )
    parser.add_argument(
        "--loop-alone",
        action=argparse.BooleanOptionalAction,
        help="also time our loop without drafting (gamma 0) in the same rounds, splitting each "
        "speed-up into the loop's part and drafting's part (default: on for our engine at "
        "gamma 1 or more, one clip at a time)",
    )
    parser.add_argument("--out", default="bench-out", help="folder for results.json and the PNG")
    parser.add_argument("--engine", default=DEFAULTS.engine, choices=decoding.ENGINES)
    parser.add_argument(
        "--gamma", type=int, default=DEFAULTS.gamma, help="draft tokens per step (start value)"
    )
    parser.add_argument(
        "--gamma-schedule", default=DEFAULTS.gamma_schedule, choices=schedule.SCHEDULES
    )
    parser.add_argument("--peer-gamma", type=int, help="the peer's draft tokens (default: --gamma)")
    parser.add_argument(
        "--peer-gamma-schedule",
        choices=schedule.SCHEDULES,
        help="the peer's schedule (default: --gamma-schedule); adaptive is transformers' own "
        "dynamic drafting (confidence threshold 0.4)",
    )
    parser.add_argument(
        "--dtype", default=DEFAULTS.dtype, help="auto (fp16 on GPU, fp32 on CPU), ..."
    )
    parser.add_argument(
        "--encoder-dtype",
        default=DEFAULTS.encoder_dtype,
        help="the main's encoder alone: auto (the same as --dtype), bfloat16 (about 3x faster "
        "on a CPU with AMX; the decoder stays in --dtype), float16 or float32",
    )
    parser.add_argument("--timestamps", action="store_true", help="segment timestamps")
    parser.add_argument(
        "--reference",
        nargs="?",
        const=reference.ENGINE,
        default=DEFAULTS.reference,
        type=reference_flag,
        metavar="faster-whisper[:int8|float32|float16]",
        help="also time faster-whisper (CTranslate2) on the main's weights, greedy, for context "
        f"(default compute type {reference.DEFAULT_COMPUTE_TYPE}; float16 on a GPU only)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=DEFAULTS.temperature,
        help="0: greedy (identical tokens); above 0 both sides sample (speculative sampling)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="sampling seed")
    parser.add_argument(
        "--fallback", action="store_true", help="Whisper's temperature fallback, both sides"
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="identity checks only: no warm-up run, so the timings are not speed figures",
    )
    parser.add_argument("--filter", metavar="REGEX", help="keep clips whose file name matches")
    parser.add_argument("--category", help="keep clips whose category starts with this")
    parser.add_argument("--limit", type=int, help="keep the first N selected clips")
    parser.add_argument(
        "--join",
        type=float,
        metavar="SECONDS",
        help="join consecutive clips of a language into clips of at least this many seconds",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, help="cap tokens per 30 s window (quick checks only)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="batch mode: decode the clips N at a time, batched baseline vs our batched loop",
    )
    parser.add_argument(
        "--batch-sweep",
        type=batch_mode.parse_sweep,
        metavar="SIZES",
        help="batch mode at each size (e.g. 1,2,4,8,16), with a speed-up chart",
    )
    args = parser.parse_args(argv)
    if args.batch_size is not None or args.batch_sweep:
        if args.batch_size is not None and args.batch_sweep:
            parser.error("give --batch-size or --batch-sweep, not both")
        batch_problem = batch_mode.problem(args)
        if batch_problem:
            parser.error(batch_problem)
    if args.reference and (args.batch_size is not None or args.batch_sweep):
        parser.error("--reference times one clip at a time; it does not run in batch mode")
    if args.peer and args.engine == PEER_ENGINE:
        parser.error(f"--peer times {PEER_ENGINE}' assisted generation; use --engine specwhisper")
    if (args.peer_gamma is not None or args.peer_gamma_schedule) and not args.peer:
        parser.error("--peer-gamma and --peer-gamma-schedule set the peer: add --peer")
    if args.peer_gamma is not None and not 1 <= args.peer_gamma <= 64:
        parser.error("--peer-gamma must be between 1 and 64")
    if not 0.0 <= args.temperature <= request_check.MAX_TEMPERATURE:
        parser.error(f"--temperature must be between 0 and {request_check.MAX_TEMPERATURE:g}")
    if args.peer and args.fallback:
        parser.error(f"--fallback runs on our engine only: {PEER_ENGINE}' engine cannot run it")
    batched = args.batch_size is not None or bool(args.batch_sweep)
    if args.loop_alone and batched:
        parser.error("--loop-alone times one clip at a time; it does not run in batch mode")
    if args.loop_alone and args.engine != "specwhisper":
        parser.error("--loop-alone splits our engine's speed-up: use --engine specwhisper")
    if args.loop_alone is None:
        # on where it splits something: the extra side costs about one baseline run per round
        args.loop_alone = args.engine == "specwhisper" and args.gamma > 0 and not batched
    for name in ("limit", "max_new_tokens"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def reference_flag(value: str) -> str:
    """--reference's value, checked: "faster-whisper[:compute type]" as spec.name."""
    try:
        spec = reference.parse_reference(value)
    except reference.ReferenceError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return spec.name if spec else ""


def request(args: argparse.Namespace) -> CompareRequest:
    return CompareRequest(
        main=args.main,
        assistant=args.assistant,
        language=args.language,
        gamma=args.gamma,
        gamma_schedule=args.gamma_schedule,
        repeats=args.repeats,
        dtype=args.dtype,
        encoder_dtype=args.encoder_dtype,
        timestamps=args.timestamps,
        engine=args.engine,
        temperature=args.temperature,
        seed=args.seed,
        fallback=args.fallback,
        reference=args.reference,
        loop_alone=args.loop_alone,
    )


def settings_of(
    args: argparse.Namespace,
    req: CompareRequest,
    main: loading.Loaded,
    assistant: loading.Loaded,
    load_s: float,
) -> dict[str, Any]:
    peer = peer_gamma(args)
    batched = args.batch_size is not None or bool(args.batch_sweep)
    sampling = req.temperature > 0
    stops = schedule.draft_stops_early(
        req.engine, req.gamma_schedule, sampling=sampling, batched=batched
    )
    return {
        "main": main.checkpoint.label,
        "assistant": assistant.checkpoint.label,
        "engine": req.engine,
        "peer": args.peer,
        "gamma": req.gamma,
        "gamma_schedule": req.gamma_schedule,
        "peer_gamma": peer[0] if peer else None,
        "peer_gamma_schedule": peer[1] if peer else None,
        "dtype": loading.dtype_name(main.dtype),
        "encoder_dtype": loading.dtype_name(main.encoder_precision),
        "draft_cross_attention": drafters.cross_precision(assistant, req.engine),
        # the probability under which our drafts stop early, where they do (None: they don't)
        "draft_confidence": schedule.draft_confidence() if stops else None,
        "repeats": req.repeats,
        "timing": (
            f"median of {req.repeats} after 1 warm-up, alternating order, device synced"
            if not args.no_warmup
            else "one run per side, no warm-up: an identity check, not a speed figure"
        ),
        "language": args.language,
        "timestamps": req.timestamps,
        "decoding": req.decoding,
        "temperature": req.temperature,
        "seed": req.seed,
        "max_new_tokens": args.max_new_tokens,
        "manifest": str(Path(args.manifest).resolve()),
        "load_time_s": round(load_s, 3),
        "reference": req.reference or None,
        "loop_alone": req.loop_alone,
    }


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from transformers.utils import logging as hf_logging

    arguments = sys.argv[1:] if argv is None else argv
    args = parse_args(arguments)
    hf_logging.set_verbosity_error()  # per-call generate chatter would bury the progress bar
    req = request(args)
    try:  # 1. every input checked and every clip decoded before anything is timed
        checked = request_check.check_request(req)
        filters = dict(pattern=args.filter, category=args.category, limit=args.limit)
        clips = select_clips(args.manifest, language=args.language, **filters)
        if args.join:
            clips = join_clips(clips, args.join)
        check_clips(checked, clips)
        main_model, assistant, load_s = compare.load_pair(checked)
        if req.reference:  # no CTranslate2 copy of the main: said now, not after the clips
            reference.load_reference(reference.parse_reference(req.reference), main_model)
    except ValueError as e:  # BenchError, CompareError, CheckpointError, AudioError
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT

    # 2. what runs where, then every clip timed, then the table
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
    settings = settings_of(args, req, main_model, assistant, load_s)
    hw, libs = hardware(main_model.device), versions()
    print_header(console, settings, hw, libs, clips)
    if args.batch_size is not None or args.batch_sweep:
        settings["batch_sizes"] = batch_mode.batch_sizes(args)
        return batch_mode.run(args, arguments, clips, main_model, assistant, settings, hw, libs)
    try:
        results = run_all(clips, req, main_model, assistant, args)
    except request_check.CompareError as e:  # the GPU ran out of memory
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    total = totals(results)
    print_table(console, results, total)

    # 3. results.json and the chart in --out, then the JSON last line
    body = {"argv": sys.argv, "totals": total.to_dict(), "clips": [r.to_dict() for r in results]}
    return write_results(
        console,
        args,
        arguments,
        {"settings": settings, "hardware": hw, "versions": libs},
        body,
        total.to_dict(),
        lambda path, title: save_chart(results, total, path, title),
        "speedups.png",
    )
