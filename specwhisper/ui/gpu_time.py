"""How much ZeroGPU time a request asks for, worked out from what the GPU call does, and the
longest audio the page takes on ZeroGPU.

ZeroGPU grants a `spaces.GPU` call only if the duration it *requests* fits what is left of the
visitor's daily quota (spaces 0.51 `zero/client.py`, `schedule`: the requested seconds go to the
scheduler, and a refusal reads "(Ns requested vs. Ms left)"); a call that runs past its request
may be aborted (`wrappers.py`, `duration_warning`). So the request is the work, no more: slack
for the worker's start, every decode of the whole audio at an assumed GPU rate, and loading only
for checkpoints that a worker cannot already hold. A worker holds what the server process loaded
before it was forked (the preloaded default pair, copied to the GPU as the worker starts) and, when
spaces reuses an idle worker, what that worker loaded in an earlier call; which worker a call
gets is spaces' choice, so a pair the server process does not hold is always budgeted a load.

Nothing here is measured on a GPU (none was available): the rates are stated assumptions, each in
one constant. It reads no audio and runs no model.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

from specwhisper import checkpoints, hub, loading, reference
from specwhisper.audio import AudioLimits
from specwhisper.request_check import CheckedRequest, CompareRequest

# ZeroGPU's documented daily quota for a visitor who is not logged in (2 minutes; a free account
# has 3.5, PRO 25). The page's audio limit keeps one default comparison within it.
FREE_QUOTA_S = 120
# The worker's start (fork, CUDA init, the preloaded pair copied to the GPU), the log-mel
# features and the hand-over of the result: assumed, not measured.
SLACK_S = 20.0
# GPU seconds per second of audio for one decode of it (baseline, speculative, faster-whisper or
# the alignment decode): 10x real time. An assumption for large-v3 in float16 on ZeroGPU's H200
# slice, NOT measured (no GPU was available); the speculative column is faster than this.
RUN_S_PER_AUDIO_S = 0.1
# Reading a checkpoint from local disk and copying it to the GPU, per GB of weights; and
# fetching it from the Hub first where it is not on disk. Assumptions, not measured.
LOAD_S_PER_GB = 4.0
DOWNLOAD_S_PER_GB = 20.0
# Parameters by decoder width, for a checkpoint whose files are not on disk (Whisper's sizes;
# the distil assistants' files hold their large teacher's encoder too).
N_PARAMS_BY_WIDTH = {384: 39e6, 512: 74e6, 768: 244e6, 1024: 769e6, 1280: 1550e6}
N_PARAMS_DISTIL_BY_WIDTH = {768: 166e6, 1024: 394e6, 1280: 756e6}
BYTES_PER_PARAM_ON_DISK = 4  # float32 files, the larger case (some repositories ship float16)


def on_zero_gpu() -> bool:
    """Whether this process runs on ZeroGPU: SPACES_ZERO_GPU, read as spaces' config reads it."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


@dataclass(frozen=True)
class GpuWork:
    """What one GPU call does, in the units its duration is worked out from."""

    audio_s: float  # the audio each decode reads (all rows together in batch mode)
    n_decodes: int  # decodes of all of it: warm-ups, timed repeats, the alignment decode
    load_gb: float  # weights loaded inside the call (0 when every worker holds the pair)
    download_gb: float  # of which not on this machine's disk yet

    @property
    def seconds(self) -> int:
        """The duration to request, whole seconds rounded up."""
        runs_s = self.n_decodes * RUN_S_PER_AUDIO_S * self.audio_s
        load_s = LOAD_S_PER_GB * self.load_gb + DOWNLOAD_S_PER_GB * self.download_gb
        return math.ceil(SLACK_S + runs_s + load_s)


def compare_work(
    audio_s: float, req: CheckedRequest, cache: loading.ModelCache = loading.CACHE
) -> GpuWork:
    """One comparison: each column (and the reference column and our loop without drafting when
    on) once to warm up and `repeats` times timed, then one untimed alignment decode of the
    baseline."""
    n_columns = 2 + bool(reference.parse_reference(req.request.reference))
    n_columns += bool(req.request.loop_alone)
    n_decodes = n_columns * (req.request.repeats + 1) + 1
    return GpuWork(audio_s, n_decodes, *_loads(req, cache))


def batch_work(
    audio_s: float, n_sizes: int, req: CheckedRequest, cache: loading.ModelCache = loading.CACHE
) -> GpuWork:
    """Batch mode: at each batch size both loops once to warm up and `repeats` times timed, and
    one more baseline pass that checks the rows against the batch of one."""
    n_decodes = n_sizes * (2 * (req.request.repeats + 1) + 1)
    return GpuWork(audio_s, n_decodes, *_loads(req, cache))


def _loads(req: CheckedRequest, cache: loading.ModelCache) -> tuple[float, float]:
    """GB of weights to load inside the call, and GB of them to fetch from the Hub first: the
    checkpoints of the pair this (the server's) process does not hold."""
    wanted = [req.main] if isinstance(req.assistant, str) else [req.main, req.assistant]
    load_gb = download_gb = 0.0
    for ckpt in wanted:
        if cache.holds(ckpt, req.device, req.dtype, req.encoder_dtype):
            continue
        on_disk = _files_gb(ckpt)
        load_gb += on_disk or _estimated_gb(ckpt)
        download_gb += 0.0 if on_disk else _estimated_gb(ckpt)
    return load_gb, download_gb


def _files_gb(ckpt: checkpoints.Checkpoint) -> float:
    """The checkpoint's weight files on this machine (a local folder, or its Hub snapshot in the
    cache), in GB; 0 when they are not here."""
    folder: Path | None = ckpt.path
    if folder is None:
        snapshot = hub.cached_snapshot(ckpt.id)
        folder = snapshot.folder if snapshot is not None else None
    if folder is None:
        return 0.0
    return sum(p.stat().st_size for p in folder.glob("*.safetensors") if p.is_file()) / 1e9


def _estimated_gb(ckpt: checkpoints.Checkpoint) -> float:
    table = N_PARAMS_DISTIL_BY_WIDTH if ckpt.decoder_only else N_PARAMS_BY_WIDTH
    n_params = table.get(ckpt.d_model, max(N_PARAMS_BY_WIDTH.values()))
    return n_params * BYTES_PER_PARAM_ON_DISK / 1e9


def default_decodes() -> int:
    """Decodes of the audio in a comparison with the page's default settings (reference off)."""
    return 2 * (CompareRequest(main="", assistant="").repeats + 1) + 1


def zero_gpu_max_audio_s() -> int:
    """The longest audio (whole seconds) whose comparison with the default settings on the
    preloaded pair asks for no more than a logged-out visitor's whole day of ZeroGPU."""
    return int((FREE_QUOTA_S - SLACK_S) / (default_decodes() * RUN_S_PER_AUDIO_S))


def audio_limits(on_gpu: bool) -> AudioLimits:
    """The audio this process takes (SPECWHISPER_MAX_AUDIO_S and _MAX_FILE_MIB, else the
    defaults); on ZeroGPU no longer than `zero_gpu_max_audio_s`."""
    limits = AudioLimits.from_env(on_gpu=on_gpu)
    if not on_zero_gpu():
        return limits
    return dataclasses.replace(
        limits, max_duration_s=min(limits.max_duration_s, zero_gpu_max_audio_s())
    )


def audio_limit_note() -> str:
    """What the page says next to the audio input about its length on ZeroGPU ("" elsewhere)."""
    if not on_zero_gpu():
        return ""
    minutes, seconds = divmod(zero_gpu_max_audio_s(), 60)  # as the audio's own refusal words it
    return (
        f"On this ZeroGPU Space: up to {minutes} min {seconds} s, so that a comparison fits in "
        f"the {FREE_QUOTA_S // 60} minutes of GPU a day a visitor gets without logging in."
    )
