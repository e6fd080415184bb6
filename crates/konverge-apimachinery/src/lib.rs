//! Kubernetes API machinery that does not depend on storage or HTTP: the pure functions the
//! API server applies to objects (the counterpart of `k8s.io/apimachinery`). Behaviour and
//! error messages follow Kubernetes 1.33.
//!
//! # Where to start
//!
//! - [`selector`]: label selectors (the full grammar, and the structured
//!   `metav1.LabelSelector`) and field selectors, parsed from query strings and matched
//!   against objects; label key and value validation.
//! - [`decoding`]: request bodies read as kube-apiserver reads them: duplicate JSON fields
//!   for strict field validation, YAML with sigs.k8s.io/yaml's YAML 1.1 scalars.
//! - [`duration`]: Go's durations, read (`?timeout=30s`, with Go's errors) and written.
//! - [`escape`]: percent-decoding of URL path segments.
//! - [`go_encoding`]: built-in objects shaped as Go's `encoding/json` writes them (empty
//!   `omitempty` fields left out, struct fields always written), from the 1.33 API types.
//! - [`names`]: object name rules (RFC 1123 subdomains and labels, RFC 1035 labels, path
//!   segments) with Kubernetes' messages.
//! - [`quantity`]: resource quantities (`500m`, `1.5Gi`) and `ParseQuantity`'s errors.
//! - [`query`]: query parameters read as kube's parameter codec reads them (booleans).
//! - [`request_info`]: which request this is (verb, group, version, namespace, resource,
//!   subresource, name), read from method, path and query as kube's `RequestInfoFactory` does.
//! - [`field`]: field errors worded as Kubernetes words them (`spec.name: Invalid value: ...`).
//! - [`schema`]: structural schemas of custom resources: validation with kube-openapi's
//!   wording, pruning of unknown fields, defaulting.
//! - [`cel`]: `x-kubernetes-validations` rules (CEL, with `self` and `oldSelf`).
//! - [`ssa`]: server-side apply: field sets, `managedFields`, merging with list semantics,
//!   conflicts, and recording ordinary updates.
//! - [`patch`]: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch
//!   with the merge keys of the built-in types ([`patch::PatchSchema::builtin`], which also
//!   describes what server-side apply needs of them: list map keys and atomic types).

pub mod cel;
pub mod decoding;
pub mod duration;
pub mod escape;
pub mod field;
pub mod go_encoding;
pub mod gofmt;
pub mod names;
pub mod patch;
pub mod quantity;
pub mod query;
pub mod request_info;
pub mod schema;
pub mod selector;
pub mod ssa;
