//! Schema fragments the derive macros cannot express.

use schemars::{Schema, SchemaGenerator, json_schema};

/// A list of complete Kubernetes objects kept verbatim: the API server checks each has
/// apiVersion, kind and metadata, and keeps every other field.
pub fn embedded_objects(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true
        }
    })
}

/// An optional integer-or-percentage (`3` or `"50%"`). The percentage is checked by `pattern`
/// (which the API server applies to string values only) rather than by CEL, whose cost estimate
/// treats an int-or-string as unbounded text.
pub fn int_or_percent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "pattern": "^(100|[1-9][0-9]?)%$",
        "nullable": true
    })
}

/// Any JSON value (text, number, object, list): for a field that takes more than one shape. The
/// API server keeps it as given and CEL rules cannot read it, so the controller checks it.
pub fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}
