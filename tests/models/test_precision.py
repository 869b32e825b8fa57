"""`auto` precision: bf16 only where the device has it in hardware, fp32 on other CPUs; explicit values pass."""
import pytest
import torch

from lmplatform.models.precision import autocast_dtype, resolve_precision

CPU = torch.device("cpu")


@pytest.mark.parametrize(("avx512_bf16", "amx", "expected"), [(True, False, "bf16"), (False, True, "bf16"),
                                                               (False, False, "fp32")])
def test_auto_takes_bf16_only_on_cpus_that_have_it(monkeypatch: pytest.MonkeyPatch, avx512_bf16: bool, amx: bool,
                                                   expected: str) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert resolve_precision("auto", CPU) == expected
    assert resolve_precision("fp32", CPU) == "fp32" and resolve_precision("bf16", CPU) == "bf16"


def test_a_torch_without_the_cpu_probes_gets_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    assert resolve_precision("auto", CPU) == "fp32"


def test_unknown_precision_names_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="allowed: fp32, bf16, fp16, auto"):
        resolve_precision("fp8", CPU)
    assert autocast_dtype("fp32") is None and autocast_dtype("bf16") is torch.bfloat16
