//! Every MPIJob manifest under `deploy/` validated against the schema the MPI Operator v0.8.2
//! installs for `kubeflow.org/v2beta1` (its CRD's openAPIV3Schema, core pod fields included:
//! `tests/fixtures/mpijob-crd-v0.8.2.json`), as the Kubernetes API server would on `kubectl
//! apply`: a field the schema does not know (a typo, a field in the wrong place) or a value of
//! the wrong type fails here, not on the cluster.

use e2e::root;
use serde_json::Value;

/// The structural-schema rules the API server applies to a custom resource: types (with
/// `x-kubernetes-int-or-string`), known fields (`properties`, or `additionalProperties`, unless
/// `x-kubernetes-preserve-unknown-fields`), `required`, `enum`, `items`. Problems as
/// `path: what`.
fn validate(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        if !(v.is_i64() || v.is_u64() || v.is_string()) {
            out.push(format!("{path}: {v} is neither an integer nor a string"));
        }
        return;
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let fits = any.iter().any(|s| {
            let mut e = Vec::new();
            validate(s, v, path, &mut e);
            e.is_empty()
        });
        if !fits {
            out.push(format!("{path}: {v} matches none of anyOf"));
        }
    }
    let ty = schema.get("type").and_then(Value::as_str);
    let ok = match ty {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    };
    if !ok {
        out.push(format!("{path}: {v} is not of type {}", ty.unwrap_or("?")));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            out.push(format!("{path}: {v} is not one of {allowed:?}"));
        }
    }
    if let Some(items) = schema.get("items") {
        for (i, e) in v.as_array().into_iter().flatten().enumerate() {
            validate(items, e, &format!("{path}[{i}]"), out);
        }
    }
    let Some(obj) = v.as_object() else { return };
    for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        if let Some(k) = r.as_str() {
            if !obj.contains_key(k) {
                out.push(format!("{path}: required field `{k}` is missing"));
            }
        }
    }
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    for (k, val) in obj {
        let p = format!("{path}.{k}");
        match (props.and_then(|m| m.get(k)), additional) {
            (Some(s), _) => validate(s, val, &p, out),
            (None, Some(s)) if s.is_object() => validate(s, val, &p, out),
            (None, _) if preserve || (props.is_none() && additional.is_none()) => {}
            (None, _) => out.push(format!("{p}: unknown field")),
        }
    }
}

fn schema() -> Value {
    let text = std::fs::read_to_string(root().join("tests/fixtures/mpijob-crd-v0.8.2.json")).expect("fixture");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    doc["openAPIV3Schema"].clone()
}

fn manifest(file: &str) -> Value {
    let text = std::fs::read_to_string(root().join("deploy").join(file)).expect("manifest");
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn problems(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    validate(&schema(), doc, "", &mut out);
    out
}

#[test]
fn every_mpijob_manifest_fits_the_operators_schema() {
    let mut files: Vec<String> = std::fs::read_dir(root().join("deploy"))
        .expect("deploy/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("mpijob") && n.ends_with(".yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for f in &files {
        let doc = manifest(f);
        assert_eq!(doc["apiVersion"], "kubeflow.org/v2beta1", "{f}");
        assert_eq!(doc["kind"], "MPIJob", "{f}");
        let p = problems(&doc);
        assert!(
            p.is_empty(),
            "{f} does not fit the MPIJob schema of mpi-operator v0.8.2:\n{}",
            p.join("\n")
        );
    }
}

/// The check has teeth: a typo, a field in the wrong place, a wrong type and a value outside
/// an enum are each refused, naming where.
#[test]
fn a_typo_a_misplaced_field_and_a_wrong_type_are_refused() {
    let good = manifest("mpijob.yaml");
    let mut typo = good.clone();
    let spec = typo["spec"].as_object_mut().expect("spec");
    let slots = spec.remove("slotsPerWorker").expect("slotsPerWorker");
    spec.insert("slotPerWorker".into(), slots);
    assert_eq!(problems(&typo), [".spec.slotPerWorker: unknown field"]);

    let mut misplaced = good.clone();
    misplaced["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["imagePullPolicy"] = "IfNotPresent".into();
    assert_eq!(
        problems(&misplaced),
        [".spec.mpiReplicaSpecs.Worker.template.spec.imagePullPolicy: unknown field"]
    );

    let mut wrong_type = good.clone();
    wrong_type["spec"]["slotsPerWorker"] = "two".into();
    assert_eq!(
        problems(&wrong_type),
        [".spec.slotsPerWorker: \"two\" is not of type integer"]
    );

    let mut not_in_enum = good;
    not_in_enum["spec"]["mpiImplementation"] = "OpenMPI5".into();
    let p = problems(&not_in_enum);
    assert!(
        p.len() == 1 && p[0].starts_with(".spec.mpiImplementation: \"OpenMPI5\" is not one of"),
        "{p:?}"
    );
}
