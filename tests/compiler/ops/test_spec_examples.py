"""Every operator's spec model declares examples (shown by ``warpmap ops``, later by the API's schema)
that its own parser accepts, without loosening the strict, frozen configuration all specs share."""

from __future__ import annotations

import pytest

from compiler.ops import operators, parse_spec


@pytest.mark.parametrize("name", sorted(operators()))
def test_declared_examples_are_specs_the_operator_accepts(name: str) -> None:
    model = operators()[name].spec_model
    examples = model.model_json_schema().get("examples")
    assert examples, f"{name} declares no example specs"
    for example in examples:
        assert example["op"] == name
        assert parse_spec(example).canonical_json()


@pytest.mark.parametrize("name", sorted(operators()))
def test_declaring_examples_keeps_the_shared_spec_configuration(name: str) -> None:
    config = operators()[name].spec_model.model_config
    assert config.get("strict") is True and config.get("frozen") is True and config.get("extra") == "forbid"
