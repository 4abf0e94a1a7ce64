"""The verify pass's packed oneDNN matmuls (specwhisper.packed) and the loop's projection: the
same logits as F.linear within fp32 rounding, and nothing changes outside a rows pass."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from specwhisper import loop, packed

needs_onednn = pytest.mark.skipif(not packed.available(), reason="this torch has no oneDNN")


def packed_linear(n_in: int = 64, n_out: int = 96) -> torch.nn.Linear:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(n_in, n_out), torch.nn.GELU())
    packed.install(model)
    return model[0]


@needs_onednn
def test_install_keeps_the_module_and_its_state():
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.LayerNorm(4))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    packed.install(model)
    packed.install(model)  # idempotent
    assert type(model[0]) is packed.PackedLinear and type(model[1]) is torch.nn.LayerNorm
    assert isinstance(model[0], torch.nn.Linear)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_a_decoder_too_heavy_to_copy_keeps_its_linears(monkeypatch):
    monkeypatch.setattr(packed, "MAX_COPY_BYTES", 8 * 4 * 4 - 1)  # one byte under [4, 8] fp32
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    packed.install(model)
    assert type(model[0]) is torch.nn.Linear


@needs_onednn
@pytest.mark.parametrize("rows", [(1,), (2,), (7,), (3, 5)])
def test_outside_a_rows_pass_or_on_one_row_it_is_f_linear_exactly(rows):
    linear = packed_linear()
    x = torch.randn(*rows, 64)
    assert torch.equal(linear(x), F.linear(x, linear.weight, linear.bias))
    one = x.reshape(-1, 64)[:1]
    with packed.rows_pass():
        assert torch.equal(linear(one), F.linear(one, linear.weight, linear.bias))


@needs_onednn
@pytest.mark.parametrize("rows", [(2,), (7,), (13,), (3, 5)])
def test_inside_a_rows_pass_several_rows_use_the_packed_weight(rows, monkeypatch):
    linear = packed_linear()
    x = torch.randn(*rows, 64)
    calls = []
    real = packed.linear
    monkeypatch.setattr(packed, "linear", lambda *a: calls.append(a) or real(*a))
    with packed.rows_pass():
        y = linear(x)
    assert len(calls) == 1
    expected = F.linear(x, linear.weight, linear.bias)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_changed_weight_is_packed_again():
    linear = packed_linear()
    x = torch.randn(4, 64)
    with packed.rows_pass(), torch.no_grad():
        linear(x)
        linear.weight.mul_(2.0)  # in place: the same storage, a new version
        torch.testing.assert_close(
            linear(x), F.linear(x, linear.weight, linear.bias), rtol=1e-5, atol=1e-5
        )


@needs_onednn
def test_switched_off_it_is_f_linear_exactly(monkeypatch):
    monkeypatch.setenv("SPECWHISPER_PACKED", "0")
    linear = packed_linear()
    x = torch.randn(6, 64)
    with packed.rows_pass():
        assert torch.equal(linear(x), F.linear(x, linear.weight, linear.bias))


@needs_onednn
def test_a_rows_pass_in_one_thread_leaves_another_threads_matmuls_alone():
    """The server may run the baseline's generate beside our loop on the same cached main: the
    pass is per thread (a context variable), so the baseline's matmuls stay F.linear's."""
    linear = packed_linear()
    x = torch.randn(6, 64)
    inside, done = threading.Event(), threading.Event()
    seen = []

    def ours() -> None:
        with packed.rows_pass():
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=ours)
    thread.start()
    inside.wait(10)
    seen.append(torch.equal(linear(x), F.linear(x, linear.weight, linear.bias)))
    done.set()
    thread.join()
    assert seen == [True]


@pytest.mark.parametrize("shape", [(1,), (2,), (6,), (14,), (40,), (2, 6), (8, 6)])
def test_the_projection_gives_f_linears_logits(shape, monkeypatch):
    """One row multiplies the [D, V] copy; several rows in all (a batch's too) the packed copy
    where oneDNN is there. Within fp32 rounding of F.linear, with the same greedy tokens."""
    calls = []
    real = packed.linear
    monkeypatch.setattr(packed, "linear", lambda *a: calls.append(a) or real(*a))
    torch.manual_seed(sum(shape))
    vocab, d = 1000, 64
    main = SimpleNamespace(proj_out=torch.nn.Linear(d, vocab, bias=False))
    hidden = torch.randn(*shape, d)
    logits = loop.projection(main)(hidden)
    expected = F.linear(hidden, main.proj_out.weight)
    assert logits.shape == (*shape, vocab)
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))
    assert len(calls) == (hidden[..., 0].numel() > 1 and packed.available())
