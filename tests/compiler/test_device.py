import pytest

from compiler.device import DEVICES, device_preset


def test_presets_expose_arch_and_limits():
    a100 = device_preset("A100")
    assert a100.compute_capability == (8, 0)
    assert a100.has_tensor_cores
    assert DEVICES["h200"].max_shared_dynamic == 227 * 1024
    assert device_preset("h100").compute_capability == (9, 0)


def test_unknown_device_lists_known_ones():
    with pytest.raises(ValueError, match="known devices: a100, h100, h200"):
        device_preset("v100")
