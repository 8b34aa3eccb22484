"""The CDI project's JSON schema (vendored in tests/schemas/cdi, NOTICE there) as a validator.

Owns loading the schema and resolving its `$ref`s into defs.json; never generates specs.
"""
import json
from pathlib import Path

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "cdi"


def cdi_validator():
    """A validator of CDI specs; schema.json refers to "defs.json#/..." relative to itself."""
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    resolver = jsonschema.RefResolver(base_uri=SCHEMA_DIR.as_uri() + "/", referrer=schema)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, resolver=resolver)


def cdi_examples():
    """The CDI project's own examples of valid specs."""
    return sorted(SCHEMA_DIR.glob("testdata_good_*.json"))
