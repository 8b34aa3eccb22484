"""`cuslice cdi generate` output against the CDI project's own JSON schema.

The schema lives in the project's shared/ folder, beside the repository (CUSLICE_SHARED_DIR,
set by CMake). Without it these tests skip, and ctest reports the entry as skipped.
"""
import json
import os
from pathlib import Path

import jsonschema
import pytest

SCHEMA_DIR = Path(os.environ.get("CUSLICE_SHARED_DIR", "")) / "data" / "cdi-schema"
if not (SCHEMA_DIR / "schema.json").is_file():
    pytest.skip(f"CDI schema not found in {SCHEMA_DIR}", allow_module_level=True)


@pytest.fixture(scope="module")
def validator():
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    # schema.json refers to "defs.json#/..." relative to itself: resolve from its folder.
    resolver = jsonschema.RefResolver(base_uri=SCHEMA_DIR.resolve().as_uri() + "/", referrer=schema)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, resolver=resolver)


def test_the_validator_accepts_the_cdi_projects_examples(validator):
    for example in sorted(SCHEMA_DIR.glob("testdata_good_*.json")):
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
