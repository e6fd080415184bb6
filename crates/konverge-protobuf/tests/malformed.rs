//! Malformed and adversarial bodies: typed errors with field paths, never a panic; plus the
//! protobuf rules a decoder must follow beyond what client-go sends (unknown fields, packed
//! repeated fields, repeated occurrences of a message field).

mod support;

use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use konverge_protobuf::{DecodeError, MAX_DEPTH, TypeMeta, decode, decode_with_defaults};
use prost::Message as _;
use serde_json::json;
use support::{envelope, s};

// A tiny protobuf writer for hand-made messages.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn tag(number: u32, wire_type: u8) -> Vec<u8> {
    varint(u64::from(number) << 3 | u64::from(wire_type))
}

fn len(number: u32, payload: &[u8]) -> Vec<u8> {
    [
        tag(number, 2),
        varint(payload.len() as u64),
        payload.to_vec(),
    ]
    .concat()
}

fn num(number: u32, value: u64) -> Vec<u8> {
    [tag(number, 0), varint(value)].concat()
}

fn entry(key: &str, value: &[u8]) -> Vec<u8> {
    [len(1, key.as_bytes()), value.to_vec()].concat()
}

fn configmap(raw: Vec<u8>) -> Vec<u8> {
    envelope("v1", "ConfigMap", raw)
}

fn err(body: &[u8]) -> DecodeError {
    match decode(body) {
        Ok((_, value)) => panic!("decoded: {value}"),
        Err(e) => e,
    }
}

#[test]
fn envelope_errors() {
    assert_eq!(err(b""), DecodeError::Empty);
    assert_eq!(err(b"k8s\0"), DecodeError::Empty);
    assert_eq!(err(b"{\"kind\":\"Pod\"}"), DecodeError::MissingMagic);
    assert_eq!(err(b"k8s"), DecodeError::MissingMagic);
    assert_eq!(err(&envelope("v1", "", vec![])), DecodeError::MissingKind);
    assert_eq!(
        err(&envelope("", "Pod", vec![])),
        DecodeError::MissingApiVersion
    );
    assert_eq!(
        err(&envelope("apps/", "Pod", vec![])),
        DecodeError::MissingApiVersion
    );
    let unknown = err(&envelope("example.com/v1", "Widget", vec![]));
    assert!(unknown.is_unsupported_kind());
    assert_eq!(
        unknown,
        DecodeError::UnknownKind {
            api_version: "example.com/v1".into(),
            kind: "Widget".into()
        }
    );
    assert!(!DecodeError::MissingMagic.is_unsupported_kind());
    // The envelope itself: typeMeta as a varint, a truncated raw field.
    let e = err(&[b"k8s\0".to_vec(), num(1, 5)].concat());
    assert_eq!(e.path(), Some("envelope.typeMeta"));
    assert!(
        matches!(e, DecodeError::WrongWireType { found: 0, .. }),
        "{e}"
    );
    let e = err(&[b"k8s\0".to_vec(), tag(2, 2), varint(100), vec![1, 2]].concat());
    assert_eq!(
        e,
        DecodeError::Truncated {
            path: "envelope.raw".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "envelope.raw: unexpected end of protobuf data"
    );
}

#[test]
fn defaults_fill_a_missing_kind_and_version() {
    let defaults = TypeMeta::new("v1", "ConfigMap");
    let raw = len(2, &entry("a", &len(2, b"1")));
    let body = envelope("", "", raw.clone());
    let (type_meta, value) = decode_with_defaults(&body, Some(&defaults)).unwrap();
    assert_eq!(type_meta, defaults);
    assert_eq!(
        value,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"creationTimestamp": null},
            "data": {"a": "1"}
        })
    );
    // The envelope wins where it has a value.
    let body = envelope("v1", "Secret", vec![]);
    let (type_meta, _) = decode_with_defaults(&body, Some(&defaults)).unwrap();
    assert_eq!(type_meta.kind, "Secret");
}

#[test]
fn wire_errors_name_the_field() {
    // metadata (1) as a varint.
    let e = err(&configmap(num(1, 1)));
    assert_eq!(
        e,
        DecodeError::WrongWireType {
            path: "metadata".into(),
            expected: "length-delimited",
            found: 0
        }
    );
    // metadata's length runs past the end.
    assert_eq!(
        err(&configmap([tag(1, 2), varint(5), vec![0x0a]].concat())),
        DecodeError::Truncated {
            path: "metadata".into()
        }
    );
    // A huge length.
    assert_eq!(
        err(&configmap([tag(1, 2), varint(u64::MAX)].concat())),
        DecodeError::Truncated {
            path: "metadata".into()
        }
    );
    // A truncated varint inside metadata.generation.
    let e = err(&configmap(len(1, &[tag(7, 0), vec![0x80, 0x80]].concat())));
    assert_eq!(
        e,
        DecodeError::Truncated {
            path: "metadata.generation".into()
        }
    );
    // An 11-byte varint.
    let e = err(&configmap(len(1, &[tag(7, 0), vec![0xff; 11]].concat())));
    assert_eq!(
        e,
        DecodeError::VarintOverflow {
            path: "metadata.generation".into()
        }
    );
    // Field number 0 and wire type 7.
    assert_eq!(
        err(&configmap(len(1, &[0x00]))),
        DecodeError::InvalidFieldNumber {
            path: "metadata".into(),
            number: 0
        }
    );
    assert_eq!(
        err(&configmap(vec![0x0f])),
        DecodeError::InvalidWireType {
            path: String::new(),
            wire_type: 7
        }
    );
    assert_eq!(
        err(&configmap(vec![0x0f])).to_string(),
        "object: illegal protobuf wire type 7"
    );
    // A map value of the wrong type: data[key].
    let e = err(&configmap(len(2, &entry("key", &num(2, 1)))));
    assert_eq!(e.path(), Some("data[key]"));
    // Deep inside a Deployment: spec.template.spec.containers[1].ports[0].containerPort.
    let container = |ports: Vec<u8>| len(2, &[len(1, b"c"), ports].concat());
    let pod_spec = [container(vec![]), container(len(6, &len(3, b"x")))].concat();
    let spec = len(3, &len(2, &pod_spec));
    let e = err(&envelope("apps/v1", "Deployment", len(2, &spec)));
    assert_eq!(
        e.path(),
        Some("spec.template.spec.containers[1].ports[0].containerPort"),
        "{e}"
    );
}

#[test]
fn special_value_errors() {
    // IntOrString with type 2.
    let port = [num(3, 80), len(4, &num(1, 2))].concat();
    let body = envelope("v1", "Service", len(2, &len(1, &port)));
    assert_eq!(
        err(&body),
        DecodeError::InvalidIntOrString {
            path: "spec.ports[0].targetPort".into(),
            value: 2
        }
    );
    // A time past year 9999.
    let body = envelope("v1", "Pod", len(1, &len(8, &num(1, i64::MAX as u64))));
    assert!(matches!(
        err(&body),
        DecodeError::InvalidTime { path, .. } if path == "metadata.creationTimestamp"
    ));
    // Before year 0 (negative seconds, 10-byte varint).
    let body = envelope(
        "v1",
        "Pod",
        len(1, &len(8, &num(1, (-100_000_000_000i64) as u64))),
    );
    assert!(matches!(err(&body), DecodeError::InvalidTime { .. }));
    // A RawExtension that is not JSON.
    let body = envelope(
        "apps/v1",
        "ControllerRevision",
        len(2, &len(1, b"\x00not json")),
    );
    assert!(matches!(
        err(&body),
        DecodeError::InvalidEmbeddedJson { path, .. } if path == "data"
    ));
    // NaN in a CRD schema.
    let schema = apiext::JsonSchemaProps {
        maximum: Some(f64::NAN),
        ..Default::default()
    };
    let crd = crd_with_schema(schema);
    assert!(matches!(
        err(&envelope(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            crd.encode_to_vec()
        )),
        DecodeError::NonFiniteNumber { .. }
    ));
}

fn crd_with_schema(schema: apiext::JsonSchemaProps) -> apiext::CustomResourceDefinition {
    apiext::CustomResourceDefinition {
        metadata: None,
        spec: Some(apiext::CustomResourceDefinitionSpec {
            versions: vec![apiext::CustomResourceDefinitionVersion {
                name: s("v1"),
                schema: Some(apiext::CustomResourceValidation {
                    open_apiv3_schema: Some(schema),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// A schema `levels` deep through `properties[x]` (two messages per level: the map entry
/// and the schema).
fn nested_schema(levels: usize) -> apiext::JsonSchemaProps {
    let mut schema = apiext::JsonSchemaProps {
        r#type: s("string"),
        ..Default::default()
    };
    for _ in 0..levels {
        schema = apiext::JsonSchemaProps {
            r#type: s("object"),
            properties: [("x".to_owned(), schema)].into_iter().collect(),
            ..Default::default()
        };
    }
    schema
}

#[test]
fn nesting_is_bounded() {
    let crd = |levels| {
        envelope(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            crd_with_schema(nested_schema(levels)).encode_to_vec(),
        )
    };
    // Run on a small stack to show the bound keeps recursion shallow.
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let (_, value) = decode(&crd(30)).expect("30 schema levels decode");
            let mut at = &value["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            for _ in 0..30 {
                at = &at["properties"]["x"];
            }
            assert_eq!(at, &json!({"type": "string"}));
            let e = decode(&crd(MAX_DEPTH)).unwrap_err();
            assert!(
                matches!(
                    e,
                    DecodeError::TooDeep {
                        limit: MAX_DEPTH,
                        ..
                    }
                ),
                "{e}"
            );
            assert!(
                e.path()
                    .unwrap()
                    .starts_with("spec.versions[0].schema.openAPIV3Schema.properties[x]")
            );
            // Hand-made: a schema with `not` nested 100 000 times (built back to front).
            let mut reversed: Vec<u8> = Vec::new();
            for _ in 0..100_000 {
                let header = [tag(28, 2), varint(reversed.len() as u64)].concat();
                reversed.extend(header.iter().rev());
            }
            reversed.reverse();
            let version = len(4, &len(1, &reversed));
            let raw = len(2, &len(7, &version));
            let e = decode(&envelope(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                raw,
            ))
            .unwrap_err();
            assert!(matches!(e, DecodeError::TooDeep { .. }), "{e}");
            assert!(e.path().unwrap().ends_with(".not.not.not"), "{e}");
            // Deeply nested groups in an unknown field.
            let groups = [vec![0x0b; 10_000], vec![0x0c; 10_000]].concat();
            let e =
                decode(&envelope("v1", "ConfigMap", [tag(99, 3), groups].concat())).unwrap_err();
            assert!(matches!(e, DecodeError::TooDeep { .. }), "{e}");
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn expansion_is_bounded() {
    // 50 000 empty volume claim templates: 2 bytes each, each standing for a Go zero
    // PersistentVolumeClaim (metadata, spec, status, ...).
    let templates: Vec<u8> = std::iter::repeat_n([tag(4, 2), vec![0]].concat(), 50_000)
        .flatten()
        .collect();
    let body = envelope("apps/v1", "StatefulSet", len(2, &templates));
    let e = err(&body);
    assert!(matches!(e, DecodeError::TooLarge { .. }), "{e}");
    assert!(
        e.path().unwrap().starts_with("spec.volumeClaimTemplates["),
        "{e}"
    );
    // A few are fine.
    let templates: Vec<u8> = std::iter::repeat_n([tag(4, 2), vec![0]].concat(), 100)
        .flatten()
        .collect();
    let (_, value) = decode(&envelope("apps/v1", "StatefulSet", len(2, &templates))).unwrap();
    assert_eq!(
        value["spec"]["volumeClaimTemplates"]
            .as_array()
            .unwrap()
            .len(),
        100
    );
}

#[test]
fn protobuf_rules_beyond_what_client_go_sends() {
    // Unknown fields of every wire type are skipped (as kube-apiserver does).
    let unknown = [
        num(99, 7),
        len(100, b"??"),
        [tag(101, 1), vec![0; 8]].concat(),
        [tag(102, 5), vec![0; 4]].concat(),
        [tag(103, 3), num(1, 1), tag(103, 4)].concat(),
    ]
    .concat();
    let raw = [unknown.clone(), len(2, &entry("a", &len(2, b"1")))].concat();
    let (_, value) = decode(&configmap(raw)).unwrap();
    assert_eq!(
        value,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"creationTimestamp": null},
            "data": {"a": "1"}
        })
    );

    // A message field occurring twice is merged; map entries accumulate; the last scalar
    // wins; the value may come before the key; a missing value is the zero value.
    let raw = [
        len(
            1,
            &[len(1, b"first"), len(11, &entry("a", &len(2, b"1")))].concat(),
        ),
        len(
            1,
            &[
                len(1, b"second"),
                len(3, b"ns"),
                len(11, &entry("b", &len(2, b"2"))),
            ]
            .concat(),
        ),
        len(2, &[len(2, b"v"), len(1, b"k")].concat()),
        len(2, &len(1, b"nothing")),
    ]
    .concat();
    let (_, value) = decode(&configmap(raw)).unwrap();
    assert_eq!(
        value,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "second", "namespace": "ns", "labels": {"a": "1", "b": "2"},
                "creationTimestamp": null
            },
            "data": {"k": "v", "nothing": ""}
        })
    );

    // Packed and unpacked repeated int32, negative values sign-extended to 10 bytes.
    let values = [varint(42), varint(u64::MAX)].concat();
    let on_exit_codes = [len(2, b"In"), len(3, &values), num(3, 7)].concat();
    let rule = [len(1, b"FailJob"), len(2, &on_exit_codes)].concat();
    let spec = len(11, &len(1, &rule));
    let (_, value) = decode(&envelope("batch/v1", "Job", len(2, &spec))).unwrap();
    assert_eq!(
        value["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"],
        json!([42, -1, 7])
    );

    // Invalid UTF-8 becomes U+FFFD, as Go's JSON encoder writes it.
    let (_, value) = decode(&configmap(len(2, &entry("k", &len(2, b"a\xffb"))))).unwrap();
    assert_eq!(value["data"]["k"], "a\u{fffd}b");

    // The empty Time message is Go's zero time (null); Unix 0 is a time.
    let pod = |time: Vec<u8>| envelope("v1", "Pod", len(1, &len(8, &time)));
    assert_eq!(
        decode(&pod(vec![])).unwrap().1["metadata"]["creationTimestamp"],
        json!(null)
    );
    assert_eq!(
        decode(&pod(num(2, 5))).unwrap().1["metadata"]["creationTimestamp"],
        "1970-01-01T00:00:00Z"
    );
    assert_eq!(
        decode(&pod(num(1, (-62_135_596_800i64) as u64))).unwrap().1["metadata"]["creationTimestamp"],
        json!(null)
    );
}

/// A deterministic xorshift generator (no dependency needed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn random_and_mutated_inputs_never_panic() {
    let crd = envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        crd_with_schema(nested_schema(5)).encode_to_vec(),
    );
    let seeds: Vec<Vec<u8>> = vec![
        configmap([len(1, &len(1, b"x")), len(2, &entry("a", &len(2, b"1")))].concat()),
        envelope("apps/v1", "Deployment", {
            let container = len(
                2,
                &[len(1, b"c"), len(2, b"nginx"), len(6, &num(3, 80))].concat(),
            );
            len(2, &[num(1, 3), len(3, &len(2, &container))].concat())
        }),
        envelope(
            "v1",
            "Service",
            len(
                2,
                &len(
                    1,
                    &[num(3, 80), len(4, &[num(1, 1), len(3, b"http")].concat())].concat(),
                ),
            ),
        ),
        crd,
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut decoded = 0usize;
    // Every prefix of every seed.
    for seed in &seeds {
        for end in 0..=seed.len() {
            decoded += usize::from(decode(&seed[..end]).is_ok());
        }
    }
    // Random mutations: flips, overwrites, insertions, deletions, splices.
    for _ in 0..20_000 {
        let mut body = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            let at = 4 + rng.below(body.len().saturating_sub(4));
            match rng.below(5) {
                0 if at < body.len() => body[at] ^= 1 << rng.below(8),
                1 if at < body.len() => body[at] = rng.next() as u8,
                2 => body.insert(at.min(body.len()), rng.next() as u8),
                3 if at < body.len() => {
                    body.remove(at);
                }
                _ => {
                    let other = &seeds[rng.below(seeds.len())];
                    let from = rng.below(other.len());
                    let to = (from + rng.below(16)).min(other.len());
                    let at = at.min(body.len());
                    body.splice(at..at, other[from..to].iter().copied());
                }
            }
        }
        decoded += usize::from(decode(&body).is_ok());
    }
    // Pure noise behind a valid envelope header.
    for _ in 0..5_000 {
        let noise: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
        let _ = decode(&configmap(noise.clone()));
        let _ = decode(&envelope("v1", "Pod", noise.clone()));
        let _ = decode(&[b"k8s\0".to_vec(), noise].concat());
    }
    assert!(decoded > 0);
}
