"""What hardware torch sees: one line in the log at start-up, and a sentence on the page when a
Space was given a GPU that torch cannot use.

A Space says what it runs on in its environment. The Spaces documentation ("Built-in
environment variables") names `ACCELERATOR`: the hardware flavour (`t4-small`, `a10g-small`,
...) or `none` on a CPU. ZeroGPU is told by `SPACES_ZERO_GPU`, the variable the `spaces` package
reads. PyPI's Linux torch is a CUDA build (CUDA 13 for torch 2.13, which needs an NVIDIA driver
580 or newer): on a host whose driver is older, torch finds no GPU, and the app would quietly
serve the CPU's models and defaults. This module makes that visible; it does not choose the
device (specwhisper.loading does) and loads nothing.

On ZeroGPU the server process never has a GPU: `spaces` emulates CUDA there (is_available() is
True, the device name is the one ZeroGPU announces) and the real GPU exists only inside a GPU
call, so what this module reports there is the emulation's answer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from specwhisper.timing import cpu_model

# The kernel module's version line, e.g. "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06"
NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")

# The oldest NVIDIA driver each CUDA major release runs on (NVIDIA's CUDA compatibility table,
# minor-version compatibility): what a host needs for the CUDA that torch was built for.
MIN_DRIVER = {12: "525.60.13", 13: "580"}


@dataclass(frozen=True)
class TorchHardware:
    """What torch reports about the device it would run on."""

    torch_version: str  # e.g. "2.13.0+cu130"
    cuda_version: str | None  # the CUDA torch was built for; None for a CPU build
    cuda_available: bool  # torch.cuda.is_available()
    device_name: str  # the GPU's name when CUDA is available, else the CPU model
    driver_version: str | None  # the host's NVIDIA driver, None where no driver is loaded

    def line(self) -> str:
        """One line for the start-up log."""
        build = f"CUDA {self.cuda_version} build" if self.cuda_version else "CPU build"
        driver = self.driver_version or "none"
        available = "yes" if self.cuda_available else "no"
        return (
            f"torch {self.torch_version} ({build}); CUDA available: {available}; "
            f"device: {self.device_name}; NVIDIA driver: {driver}"
        )


def torch_hardware() -> TorchHardware:
    """What torch sees on this machine now."""
    available = torch.cuda.is_available()
    return TorchHardware(
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        cuda_available=available,
        device_name=torch.cuda.get_device_name(0) if available else cpu_model(),
        driver_version=nvidia_driver(),
    )


def nvidia_driver(path: Path = NVIDIA_DRIVER_FILE) -> str | None:
    """The loaded NVIDIA kernel driver's version, or None where there is none (or it is hidden)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else None


def zero_gpu(environ: Mapping[str, str] | None = None) -> bool:
    """A ZeroGPU Space, as the `spaces` package tells it (SPACES_ZERO_GPU=1/t/true)."""
    env = os.environ if environ is None else environ
    return env.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "t", "true")


def space_gpu(environ: Mapping[str, str] | None = None) -> str | None:
    """The GPU hardware a Space was given ("ZeroGPU", or ACCELERATOR's flavour such as
    "t4-small"); None off Spaces (no SPACE_ID) and on CPU hardware."""
    env = os.environ if environ is None else environ
    if not env.get("SPACE_ID"):
        return None
    if zero_gpu(env):
        return "ZeroGPU"
    accelerator = env.get("ACCELERATOR", "").strip()
    if accelerator and accelerator.lower() != "none":
        return accelerator
    return None


def missing_gpu_notice(
    hardware: TorchHardware | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The page's sentence when a Space was given a GPU and torch sees none; "" otherwise."""
    gpu = space_gpu(environ)
    if gpu is None:
        return ""
    hardware = hardware or torch_hardware()
    if hardware.cuda_available:
        return ""
    if hardware.cuda_version is None:
        why = "it is a CPU build"
    else:
        why = f"it was built for CUDA {hardware.cuda_version}"
        needed = MIN_DRIVER.get(int(hardware.cuda_version.split(".")[0]))
        if needed:
            why += f", which needs an NVIDIA driver {needed} or newer"
        driver = hardware.driver_version
        why += f" (this host's: {driver})" if driver else " (no NVIDIA driver is loaded here)"
    return (
        f"**No GPU here.** This Space runs on {gpu} hardware, but torch {hardware.torch_version} "
        f"finds no GPU: {why}. So this page runs on the CPU, with the CPU's models and defaults, "
        "and its timings are CPU timings."
    )
