"""What hardware torch sees: the start-up log line, and the page's sentence on a Space whose GPU
torch cannot use (tested with this machine's CPU build of torch)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from specwhisper.timing import cpu_model
from specwhisper.ui.hardware import (
    TorchHardware,
    missing_gpu_notice,
    nvidia_driver,
    space_gpu,
    torch_hardware,
)

CUDA_13_NO_GPU = TorchHardware(
    torch_version="2.13.0+cu130",
    cuda_version="13.0",
    cuda_available=False,
    device_name="Intel Xeon",
    driver_version="570.86.15",
)
T4_SPACE = {"SPACE_ID": "someone/specwhisper", "ACCELERATOR": "t4-small"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_start_up_logs_torch_its_cuda_and_the_device(caplog):
    import torch

    from specwhisper.ui.startup import launch_options

    with caplog.at_level(logging.INFO, logger="specwhisper.ui.startup"):
        launch_options()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Hardware:")]
    assert len(lines) == 1
    line = lines[0]
    assert f"torch {torch.__version__}" in line
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    assert build in line
    assert f"CUDA available: {'yes' if torch.cuda.is_available() else 'no'}" in line
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else cpu_model()
    assert f"device: {device}" in line


def test_what_a_space_says_its_hardware_is():
    assert space_gpu({}) is None  # not a Space
    assert space_gpu({"ACCELERATOR": "t4-small"}) is None  # a flavour without SPACE_ID: not one
    assert space_gpu(T4_SPACE) == "t4-small"
    assert space_gpu({"SPACE_ID": "a/b", "ACCELERATOR": "none"}) is None  # CPU hardware
    assert space_gpu({"SPACE_ID": "a/b"}) is None  # an older Space without ACCELERATOR
    assert space_gpu({"SPACE_ID": "a/b", "SPACES_ZERO_GPU": "true"}) == "ZeroGPU"
    assert space_gpu({"SPACE_ID": "a/b", "SPACES_ZERO_GPU": "false"}) is None


def test_a_gpu_space_without_a_gpu_for_torch_says_why():
    notice = missing_gpu_notice(CUDA_13_NO_GPU, T4_SPACE)
    assert "t4-small" in notice and "torch 2.13.0+cu130 finds no GPU" in notice
    assert "CUDA 13.0, which needs an NVIDIA driver 580 or newer" in notice
    assert "570.86.15" in notice and "runs on the CPU" in notice
    no_driver = missing_gpu_notice(replace(CUDA_13_NO_GPU, driver_version=None), T4_SPACE)
    assert "no NVIDIA driver is loaded" in no_driver
    cpu_build = replace(CUDA_13_NO_GPU, torch_version="2.13.0+cpu", cuda_version=None)
    assert "it is a CPU build" in missing_gpu_notice(cpu_build, T4_SPACE)


def test_no_sentence_where_torch_has_the_gpu_or_none_was_given():
    seen = replace(CUDA_13_NO_GPU, cuda_available=True, device_name="Tesla T4")
    assert missing_gpu_notice(seen, T4_SPACE) == ""
    assert missing_gpu_notice(CUDA_13_NO_GPU, {"SPACE_ID": "a/b", "ACCELERATOR": "none"}) == ""
    assert missing_gpu_notice(CUDA_13_NO_GPU, {}) == ""


def test_driver_version_from_the_kernel_module_line(tmp_path):
    proprietary = tmp_path / "proprietary"
    proprietary.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert nvidia_driver(proprietary) == "535.104.05"
    open_module = tmp_path / "open"
    open_module.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n"
    )
    assert nvidia_driver(open_module) == "580.65.06"
    assert nvidia_driver(tmp_path / "absent") is None


def test_this_machine_as_torch_sees_it():
    import torch

    hardware = torch_hardware()
    assert hardware.cuda_available == torch.cuda.is_available()
    assert hardware.cuda_version == torch.version.cuda


def test_the_page_says_so_on_a_gpu_space_with_a_cpu_torch(app_models, use_models, monkeypatch):
    import torch

    from specwhisper.ui.layout import build_demo

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here: the page has nothing to say")
    use_models(app_models)
    monkeypatch.setenv("SPACE_ID", "someone/specwhisper")
    monkeypatch.setenv("ACCELERATOR", "t4-small")
    shown = _no_gpu_markdown(build_demo())
    assert shown["visible"] and "This Space runs on t4-small hardware" in shown["value"]
    assert "finds no GPU" in shown["value"] and "runs on the CPU" in shown["value"]

    monkeypatch.setenv("ACCELERATOR", "none")  # a CPU Space: nothing to say
    assert not _no_gpu_markdown(build_demo())["visible"]


def _no_gpu_markdown(demo) -> dict:
    return next(
        c["props"] for c in demo.config["components"] if c["props"].get("elem_id") == "no-gpu"
    )
