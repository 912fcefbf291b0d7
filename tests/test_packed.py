"""Prepacked oneDNN linears (specrej/engine/packed.py): same math, row-invariant, switchable."""
import pytest
import torch

from specrej.engine import packed

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.ReLU(), torch.nn.Linear(96, 40, bias=False))


def test_pack_replaces_plain_linears_and_keeps_parameters_and_outputs():
    m = _model()
    x = torch.randn(7, 48)
    with torch.inference_mode():
        want = m(x)
    params = [p.data_ptr() for p in m.parameters()]
    assert packed.pack(m) == 2
    assert all(isinstance(m[i], packed.PackedLinear) for i in (0, 2))
    assert [p.data_ptr() for p in m.parameters()] == params      # the same tensors: n_params, ties, saving
    with torch.inference_mode():
        got = m(x)
    assert torch.allclose(got, want, atol=1e-5)


def test_a_row_gives_the_same_bits_whatever_the_batch():
    """What the engine's coupling needs: candidate i's logits do not depend on who decodes beside it."""
    m = _model()
    packed.pack(m)
    x = torch.randn(130, 48)
    with torch.inference_mode():
        full = m(x)
        for rows in (1, 3, 8, 32, 129):
            assert torch.equal(m(x[:rows]), full[:rows]), rows


def test_one_row_gets_the_same_bits_as_in_a_batch_at_the_models_widths():
    """A single row (the last candidate alive) at the embedded model's widths: oneDNN's
    matrix-vector path for M = 1 rounds a 1536-wide row differently (seen on an AVX-512 CPU), so a
    lone row is padded to two."""
    torch.manual_seed(0)
    for fan_in, fan_out in ((1536, 576), (576, 1536), (576, 192)):
        m = packed.PackedLinear(torch.nn.Linear(fan_in, fan_out, bias=False))
        x = torch.randn(9, fan_in)
        with torch.inference_mode():
            full = m(x)
            for rows in (1, 2, 5):
                assert torch.equal(m(x[:rows]), full[:rows]), (fan_in, fan_out, rows)
            assert torch.equal(m(x[:1].reshape(1, 1, fan_in)), full[:1].reshape(1, 1, fan_out))


def test_switched_off_by_the_environment_and_for_other_dtypes(monkeypatch):
    monkeypatch.setenv(packed.PACKED_ENV, "0")
    assert packed.pack(_model()) == 0
    monkeypatch.delenv(packed.PACKED_ENV)
    assert packed.pack(_model().to(torch.bfloat16)) == 0


def test_the_loader_packs_a_cpu_generator_in_fp32(tiny_lm_dir):
    """fp32 on a CPU is packed (whatever dtype ``auto`` picks here: bf16 where the CPU has it)."""
    from specrej import load_generator

    lm = load_generator(str(tiny_lm_dir), dtype="fp32")
    assert isinstance(lm.model.get_output_embeddings(), packed.PackedLinear)
