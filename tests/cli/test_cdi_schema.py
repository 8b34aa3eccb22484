"""`cuslice cdi generate` output against the CDI project's own JSON schema (vendored in
tests/schemas/cdi, loaded by tests/kit/cdi_schema.py).
"""
import json

import jsonschema
import pytest

from cdi_schema import cdi_examples, cdi_validator


@pytest.fixture(scope="module")
def validator():
    return cdi_validator()


def test_the_validator_accepts_the_cdi_projects_examples(validator):
    examples = cdi_examples()
    assert examples
    for example in examples:
        validator.validate(json.loads(example.read_text()))


def test_the_validator_rejects_a_broken_spec(validator):
    # Proves the $refs into defs.json are followed: a mount without containerPath is only
    # invalid by the Mount definition there.
    broken = {
        "cdiVersion": "0.6.0",
        "kind": "cuslice.io/gpu",
        "devices": [{"name": "all", "containerEdits": {"mounts": [{"hostPath": "/x"}]}}],
    }
    with pytest.raises(jsonschema.ValidationError, match="containerPath"):
        validator.validate(broken)


@pytest.mark.parametrize("args", [[], ["--device-name", "slot0", "--socket-dir", "/var/run/cs"]])
def test_generated_specs_are_valid(validator, run_cuslice, hook, args):
    result = run_cuslice("cdi", "generate", "--hook-path", hook, *args)
    assert result.returncode == 0, result.stderr
    validator.validate(json.loads(result.stdout))
