//! The OpenAPI documents clients read to learn the served types: v3 (`/openapi/v3` and one
//! document per group-version, `/openapi/v3/apis/apps/v1`) and v2 (`/openapi/v2`).
//!
//! # What clients use them for
//!
//! - `kubectl apply`/`create`/`replace` with the default `--validate=strict` check whether
//!   the server validates fields itself: the `PATCH` operation of the object's kind (matched
//!   by `x-kubernetes-group-version-kind`) in the v3 document of its group-version must declare
//!   the `fieldValidation` query parameter. Then kubectl sends `fieldValidation=Strict` and does
//!   no validation of its own; otherwise it validates against the v2 document itself
//!   (k8s.io/cli-runtime `pkg/resource/query_param_verifier_v3.go`,
//!   `fallback_query_param_verifier.go`; k8s.io/kubectl `pkg/validation/schema.go`).
//! - `kubectl apply` (client-side) and `kubectl diff` compute strategic merge patches from the
//!   v3 schemas (`x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key`) when the `PATCH`
//!   operation accepts `application/strategic-merge-patch+json`, else from v2, else from the
//!   types compiled into kubectl (k8s.io/kubectl `pkg/cmd/apply/patcher.go`).
//! - `kubectl explain` renders the v3 document: the kind comes from the operations of the
//!   resource's path, the schema from `components.schemas` by `x-kubernetes-group-version-kind`,
//!   field descriptions from the properties (`pkg/explain/v2/templates/plaintext.tmpl`).
//! - kubectl 1.27 and 1.28 also fetch and parse `/openapi/v2` (protobuf) before `apply`,
//!   `create` and `explain`, and fail if that fails.
//!
//! # How they are made
//!
//! Schemas come from `k8s-openapi`'s `schemars` implementations (`schemas`), paths from the
//! catalog (`paths`). Documents depend on nothing but the catalog's resources, so they are
//! built once per catalog content and shared ([`snapshot`]); serving is a lookup and a copy of
//! pre-serialized bytes. The `hash` in each index URL is a hash of the document's bytes, so
//! clients may cache documents for as long as the URL does not change.

mod kinds;
mod paths;
mod proto;
mod schemas;
mod serve;
mod v2;

pub use serve::{v2_response, v3_response};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::resources::{Catalog, ResourceType};

/// One group-version's OpenAPI v3 document, and its serialized form.
#[derive(Debug)]
pub struct GroupVersionDocument {
    /// The document.
    pub value: Value,
    /// Its JSON serialization, as served.
    pub body: Bytes,
    /// The hash of `body` (the `hash` query parameter of its URL, and its `ETag`).
    pub hash: String,
}

/// A serialized document and its `ETag` value (unquoted).
#[derive(Debug, Clone)]
pub struct Served {
    /// The bytes served.
    pub body: Bytes,
    /// The hash of `body`.
    pub hash: String,
}

/// The v2 document, in both encodings.
#[derive(Debug)]
pub struct V2Document {
    /// The document.
    pub value: Value,
    /// JSON.
    pub json: Served,
    /// Protobuf (`openapi.v2.Document` of gnostic).
    pub protobuf: Served,
}

/// Every OpenAPI document of one catalog content.
#[derive(Debug)]
pub struct Snapshot {
    index_value: Value,
    index: Served,
    documents: BTreeMap<String, GroupVersionDocument>,
    /// The definition names of custom resources' kinds (whose v2 schemas differ).
    custom: std::collections::BTreeSet<String>,
    v2: OnceLock<V2Document>,
}

impl Snapshot {
    /// The `/openapi/v3` index: `{"paths": {"apis/apps/v1": {"serverRelativeURL": ...}}}`.
    pub fn index(&self) -> &Value {
        &self.index_value
    }

    /// The serialized index.
    pub fn index_served(&self) -> &Served {
        &self.index
    }

    /// The document of `path` (`api/v1`, `apis/apps/v1`).
    pub fn document(&self, path: &str) -> Option<&GroupVersionDocument> {
        self.documents.get(path.trim_matches('/'))
    }

    /// The group-version paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.documents.keys().map(String::as_str)
    }

    /// The v2 document (built on first use).
    pub fn v2(&self) -> &V2Document {
        self.v2.get_or_init(|| {
            let value = v2::document(
                self.documents.values().map(|d| &d.value),
                &kubernetes_version(),
                &self.custom,
            );
            let json = served(serde_json::to_vec(&value).unwrap_or_default());
            let protobuf = served(proto::encode(&value));
            V2Document {
                value,
                json,
                protobuf,
            }
        })
    }
}

/// `v1.33.0`.
fn kubernetes_version() -> String {
    let (major, minor) = crate::KUBERNETES_VERSION;
    format!("v{major}.{minor}.0")
}

/// 128-bit FNV-1a: stable across builds and platforms.
fn fnv1a(data: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    data.iter().fold(OFFSET, |hash, byte| {
        (hash ^ u128::from(*byte)).wrapping_mul(PRIME)
    })
}

fn served(body: Vec<u8>) -> Served {
    let hash = format!("{:032X}", fnv1a(&body));
    Served {
        body: Bytes::from(body),
        hash,
    }
}

/// `api/v1` or `apis/<group>/<version>`.
fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The v3 document of one group-version.
fn group_version_document(
    group: &str,
    version: &str,
    resources: &[Arc<ResourceType>],
    served_gvs: &[(String, String)],
) -> Value {
    let components = schemas::build(resources, served_gvs);
    let prefix = format!("/{}", group_version_path(group, version));
    let paths = paths::build(
        &prefix,
        group,
        version,
        &components.resources,
        &components.common,
    );
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": kubernetes_version() },
        "paths": paths,
        "components": {
            "schemas": components.schemas,
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                }
            },
        },
        "security": [{ "BearerToken": [] }],
    })
}

/// Builds every document of `resources`.
fn build(resources: Vec<Arc<ResourceType>>) -> Snapshot {
    let mut by_gv: BTreeMap<(String, String), Vec<Arc<ResourceType>>> = BTreeMap::new();
    for rt in resources {
        by_gv
            .entry((rt.group.clone(), rt.version.clone()))
            .or_default()
            .push(rt);
    }
    let served_gvs: Vec<(String, String)> = by_gv.keys().cloned().collect();
    let custom = by_gv
        .values()
        .flatten()
        .filter_map(|rt| schemas::custom_definition_name(rt))
        .collect();
    let mut documents = BTreeMap::new();
    let mut index = Map::new();
    for ((group, version), rts) in &by_gv {
        let value = group_version_document(group, version, rts, &served_gvs);
        let Served { body, hash } = served(serde_json::to_vec(&value).unwrap_or_default());
        let path = group_version_path(group, version);
        index.insert(
            path.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}") }),
        );
        documents.insert(path, GroupVersionDocument { value, body, hash });
    }
    let index_value = json!({ "paths": index });
    let index = served(serde_json::to_vec(&index_value).unwrap_or_default());
    Snapshot {
        index_value,
        index,
        documents,
        custom,
        v2: OnceLock::new(),
    }
}

/// What the documents depend on: every resource's names, scope and subresources.
fn fingerprint(resources: &[Arc<ResourceType>]) -> u128 {
    let mut text = String::new();
    for rt in resources {
        text.push_str(&format!(
            "{}|{}|{}|{}|{}|{}|{}|{}|{}\n",
            rt.group,
            rt.version,
            rt.kind,
            rt.plural,
            rt.namespaced,
            rt.status,
            rt.scale.is_some(),
            rt.codec.is_some(),
            rt.custom.as_ref().map_or("", |c| c.fingerprint.as_str()),
        ));
    }
    fnv1a(text.as_bytes())
}

/// How many catalog contents keep their documents (a server has one; tests have a few).
const CACHED_CATALOGS: usize = 8;

type Cell = Arc<OnceLock<Arc<Snapshot>>>;

static CACHE: LazyLock<Mutex<HashMap<u128, Cell>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The documents of `catalog`'s current content: built on the first call for a content,
/// shared afterwards (until the catalog changes, for example when a custom resource is added).
pub fn snapshot(catalog: &Catalog) -> Arc<Snapshot> {
    let resources = catalog.all();
    let key = fingerprint(&resources);
    let cell = {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if !cache.contains_key(&key) && cache.len() >= CACHED_CATALOGS {
            cache.clear();
        }
        cache.entry(key).or_default().clone()
    };
    cell.get_or_init(|| Arc::new(build(resources))).clone()
}

/// The body of `GET /openapi/v3`: every served group-version's document URL, with the hash
/// of its content.
pub fn index(catalog: &Catalog) -> Value {
    snapshot(catalog).index().clone()
}

/// The body of `GET /openapi/v3/{path}` (`path` is `api/v1` or `apis/<group>/<version>`), or
/// `None` if no such group-version is served.
pub fn document(catalog: &Catalog, path: &str) -> Option<Value> {
    snapshot(catalog).document(path).map(|d| d.value.clone())
}

/// The body of `GET /openapi/v2` (JSON form).
pub fn v2_document(catalog: &Catalog) -> Value {
    snapshot(catalog).v2().value.clone()
}
