import hashlib

import pytest

from db.keys import canonical_json, device_key, spec_hash, toolchain_key, workload_key


def test_canonical_json_sorts_keys_and_drops_whitespace() -> None:
    assert canonical_json({"n": 2, "m": {"b": [1, 2], "a": "x"}}) == '{"m":{"a":"x","b":[1,2]},"n":2}'


def test_workload_key_ignores_key_order_but_not_values() -> None:
    a = workload_key(op="matmul", spec={"m": 64, "n": 128, "dtype": "float16"})
    b = workload_key(op="matmul", spec={"dtype": "float16", "n": 128, "m": 64})
    c = workload_key(op="matmul", spec={"dtype": "float16", "n": 128, "m": 65})
    assert a == b != c
    assert a.startswith("matmul:") and len(a) == len("matmul:") + 16


def test_workload_key_depends_on_operator() -> None:
    spec = {"n": 4}
    assert workload_key(op="softmax", spec=spec) != workload_key(op="relu", spec=spec)


def test_spec_hash_is_sha256_of_canonical_text() -> None:
    assert spec_hash({"b": 1, "a": 2}) == hashlib.sha256(b'{"a":2,"b":1}').hexdigest()


@pytest.mark.parametrize("bad", [{"x": float("nan")}, {"x": [1, float("inf")]}, {1: "int key"}, {"x": object()}])
def test_non_json_specs_are_rejected_with_the_bad_value(bad: dict) -> None:
    with pytest.raises(ValueError, match="spec"):
        canonical_json(bad)


def test_device_key_names_name_arch_and_driver() -> None:
    key = device_key(name="NVIDIA A100-SXM4-80GB", arch="sm_80", driver="550.54.15")
    assert key == "nvidia-a100-sxm4-80gb/sm_80/550.54.15"
    assert key != device_key(name="NVIDIA A100-SXM4-80GB", arch="sm_80", driver="560.1")


def test_toolchain_key_names_all_three_versions() -> None:
    key = toolchain_key(warpmap="0.1.0", nvrtc="13.5", host_compiler="g++ 12.2.0")
    assert key == "warpmap-0.1.0/nvrtc-13.5/g++-12.2.0"
    assert key != toolchain_key(warpmap="0.1.0", nvrtc="13.4", host_compiler="g++ 12.2.0")


def test_empty_key_parts_are_rejected() -> None:
    with pytest.raises(ValueError, match="driver"):
        device_key(name="gpu", arch="sm_90", driver="  ")
