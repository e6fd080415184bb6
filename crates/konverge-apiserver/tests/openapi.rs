//! The OpenAPI documents: their structure, their HTTP behaviour, and real kubectl
//! (`explain`, `apply`, `create`, `diff`) reading them.
//!
//! The kubectl tests serve the documents next to the API server's own router (so they test
//! this module whether or not the server routes `/openapi/*` yet); `server_routes_openapi`
//! checks the server's own routing. kubectl tests are skipped (with a message) when no
//! `kubectl` is on `PATH`; every kubectl version found next to it (`kubectl.1.NN`) is tried.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use konverge_apiserver::ApiServer;
use konverge_apiserver::http::openapi;
use konverge_apiserver::resources::Catalog;
use konverge_store::MemStore;
use serde_json::{Value, json};

const REF_PREFIX: &str = "#/components/schemas/";

fn catalog() -> Catalog {
    Catalog::builtin()
}

/// Every `$ref` in `value`.
fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "$ref" {
                    if let Some(r) = value.as_str() {
                        out.push(r);
                    }
                } else {
                    refs(value, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

fn served_group_versions(catalog: &Catalog) -> BTreeSet<String> {
    catalog
        .all()
        .iter()
        .map(|rt| {
            if rt.group.is_empty() {
                format!("api/{}", rt.version)
            } else {
                format!("apis/{}/{}", rt.group, rt.version)
            }
        })
        .collect()
}

/// The operations (`method`, operation) of every path of `doc`.
fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "put", "post", "patch", "delete"] {
            if let Some(op) = item.get(method) {
                out.push((path.clone(), method.to_string(), op));
            }
        }
    }
    out
}

fn has_query_parameter(op: &Value, name: &str) -> bool {
    op["parameters"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p["name"] == name && p["in"] == "query"))
}

#[test]
fn index_lists_every_served_group_version_with_a_hash() {
    let catalog = catalog();
    let index = openapi::index(&catalog);
    let paths = index["paths"].as_object().expect("paths");
    let listed: BTreeSet<String> = paths.keys().cloned().collect();
    assert_eq!(listed, served_group_versions(&catalog));
    for (path, entry) in paths {
        let url = entry["serverRelativeURL"].as_str().expect("url");
        let (base, hash) = url.split_once("?hash=").expect("hash parameter");
        assert_eq!(base, format!("/openapi/v3/{path}"));
        assert_eq!(hash.len(), 32, "{url}");
        let doc = openapi::snapshot(&catalog);
        assert_eq!(doc.document(path).expect("document").hash, hash);
    }
    // Stable: the same catalog content gives the same index.
    assert_eq!(openapi::index(&Catalog::builtin()), index);
}

#[test]
fn every_reference_resolves_inside_its_document() {
    let catalog = catalog();
    for path in served_group_versions(&catalog) {
        let doc = openapi::document(&catalog, &path).expect("document");
        assert_eq!(doc["openapi"], "3.0.0");
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let name = r
                .strip_prefix(REF_PREFIX)
                .unwrap_or_else(|| panic!("{path}: foreign $ref {r}"));
            assert!(schemas.contains_key(name), "{path}: unresolved $ref {r}");
        }
        // Described references use allOf (OpenAPI 3.0 ignores siblings of $ref).
        let text = serde_json::to_string(&doc).expect("json");
        assert!(!text.contains("\"$defs\""), "{path}: $defs left over");
    }
    assert!(openapi::document(&catalog, "apis/nope/v1").is_none());
}

#[test]
fn kinds_carry_group_version_kind_and_kubernetes_names() {
    let catalog = catalog();
    let apps = openapi::document(&catalog, "apis/apps/v1").expect("apps/v1");
    let schemas = &apps["components"]["schemas"];
    let deployment = &schemas["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    assert_eq!(
        schemas["io.k8s.api.apps.v1.DeploymentList"]["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "DeploymentList", "version": "v1"}])
    );
    assert_eq!(
        schemas["io.k8s.api.autoscaling.v1.Scale"]["x-kubernetes-group-version-kind"],
        json!([{"group": "autoscaling", "kind": "Scale", "version": "v1"}])
    );
    assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    assert!(schemas["io.k8s.api.core.v1.PodSpec"].is_object());
    // Descriptions come from the Kubernetes documentation.
    assert_eq!(
        deployment["description"],
        "Deployment enables declarative updates for Pods and ReplicaSets."
    );
    assert_eq!(
        deployment["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(
        schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Number of desired pods."))
    );

    let core = openapi::document(&catalog, "api/v1").expect("api/v1");
    assert_eq!(
        core["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
    );
    let events = openapi::document(&catalog, "apis/events.k8s.io/v1").expect("events.k8s.io/v1");
    assert!(events["components"]["schemas"]["io.k8s.api.events.v1.Event"].is_object());
}

#[test]
fn write_operations_declare_field_validation_and_the_kind() {
    let catalog = catalog();
    let apps = openapi::document(&catalog, "apis/apps/v1").expect("apps/v1");
    let patch = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "apps", "kind": "Deployment", "version": "v1"})
    );
    assert!(has_query_parameter(patch, "fieldValidation"));
    let content = patch["requestBody"]["content"]
        .as_object()
        .expect("content");
    assert!(content.contains_key("application/strategic-merge-patch+json"));
    assert!(content.contains_key("application/merge-patch+json"));
    assert!(content.contains_key("application/json-patch+json"));

    // kubectl looks at whichever PATCH operation of the kind it meets first: all must agree.
    for path in served_group_versions(&catalog) {
        let doc = openapi::document(&catalog, &path).expect("document");
        for (p, method, op) in operations(&doc) {
            if p.ends_with('/') {
                continue; // the group-version's resource list
            }
            assert!(
                op["x-kubernetes-group-version-kind"].is_object(),
                "{method} {p}"
            );
            assert!(op["x-kubernetes-action"].is_string(), "{method} {p}");
            if matches!(method.as_str(), "post" | "put" | "patch") {
                for parameter in ["dryRun", "fieldManager", "fieldValidation"] {
                    assert!(
                        has_query_parameter(op, parameter),
                        "{method} {p}: {parameter}"
                    );
                }
            }
        }
    }

    // Namespaced and cluster forms, subresources.
    let paths = apps["paths"].as_object().expect("paths");
    for p in [
        "/apis/apps/v1/namespaces/{namespace}/deployments",
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/status",
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/watch/namespaces/{namespace}/deployments",
    ] {
        assert!(paths.contains_key(p), "{p}");
    }
    assert_eq!(
        paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"]["x-kubernetes-group-version-kind"],
        json!({"group": "autoscaling", "kind": "Scale", "version": "v1"})
    );
    // Operation ids and tags are kube-apiserver's.
    let id =
        |doc: &Value, path: &str, method: &str| doc["paths"][path][method]["operationId"].clone();
    assert_eq!(
        id(
            &apps,
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
            "patch"
        ),
        "patchAppsV1NamespacedDeployment"
    );
    assert_eq!(
        id(
            &apps,
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
            "put"
        ),
        "replaceAppsV1NamespacedDeploymentScale"
    );
    assert_eq!(
        id(&apps, "/apis/apps/v1/deployments", "get"),
        "listAppsV1DeploymentForAllNamespaces"
    );
    assert_eq!(
        id(
            &apps,
            "/apis/apps/v1/watch/namespaces/{namespace}/deployments",
            "get"
        ),
        "watchAppsV1NamespacedDeploymentList"
    );
    assert_eq!(
        apps["paths"]["/apis/apps/v1/deployments"]["get"]["tags"],
        json!(["apps_v1"])
    );
    let rbac = openapi::document(&catalog, "apis/rbac.authorization.k8s.io/v1").expect("rbac");
    assert_eq!(
        id(
            &rbac,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "get"
        ),
        "listRbacAuthorizationV1ClusterRole"
    );
    assert_eq!(
        rbac["paths"]["/apis/rbac.authorization.k8s.io/v1/clusterroles"]["get"]["tags"],
        json!(["rbacAuthorization_v1"])
    );
    let core = openapi::document(&catalog, "api/v1").expect("api/v1");
    assert_eq!(
        id(&core, "/api/v1/namespaces/{namespace}/configmaps", "delete"),
        "deleteCoreV1CollectionNamespacedConfigMap"
    );
    assert_eq!(
        id(&core, "/api/v1/namespaces/{name}/finalize", "put"),
        "replaceCoreV1NamespaceFinalize"
    );
    assert_eq!(
        id(&core, "/api/v1/nodes/{name}/status", "patch"),
        "patchCoreV1NodeStatus"
    );
    let core_paths = core["paths"].as_object().expect("paths");
    assert!(core_paths.contains_key("/api/v1/nodes/{name}/status"));
    assert!(core_paths.contains_key("/api/v1/namespaces/{name}/finalize"));
    assert!(core_paths["/api/v1/namespaces/{namespace}/configmaps"]["get"]["responses"]["200"]["content"]
        ["application/json"]["schema"]["$ref"]
        .as_str()
        .is_some_and(|r| r.ends_with("io.k8s.api.core.v1.ConfigMapList")));
    assert!(has_query_parameter(
        &core_paths["/api/v1/namespaces/{namespace}/configmaps"]["get"],
        "labelSelector"
    ));
}

#[test]
fn strategic_merge_metadata_matches_the_servers() {
    let catalog = catalog();
    let core = openapi::document(&catalog, "api/v1").expect("api/v1");
    let schemas = &core["components"]["schemas"];
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(
        schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["volumes"]["x-kubernetes-patch-strategy"],
        "merge,retainKeys"
    );
    assert_eq!(
        schemas["io.k8s.api.core.v1.Container"]["properties"]["env"]["x-kubernetes-patch-merge-key"],
        "name"
    );
    assert_eq!(
        schemas["io.k8s.api.core.v1.Container"]["properties"]["ports"]["x-kubernetes-patch-merge-key"],
        "containerPort"
    );
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["finalizers"]["x-kubernetes-patch-strategy"],
        "merge"
    );
    let apps = openapi::document(&catalog, "apis/apps/v1").expect("apps/v1");
    assert_eq!(
        apps["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"]
            ["x-kubernetes-patch-strategy"],
        "retainKeys"
    );
    assert_eq!(
        apps["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentStatus"]["properties"]["conditions"]
            ["x-kubernetes-patch-merge-key"],
        "type"
    );
}

#[test]
fn server_side_apply_metadata_matches_kubernetes() {
    let catalog = catalog();
    let core = openapi::document(&catalog, "api/v1").expect("api/v1");
    let schemas = &core["components"]["schemas"];
    let container = &schemas["io.k8s.api.core.v1.Container"]["properties"];
    assert_eq!(container["ports"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        container["ports"]["x-kubernetes-list-map-keys"],
        json!(["containerPort", "protocol"])
    );
    assert_eq!(
        container["env"]["x-kubernetes-list-map-keys"],
        json!(["name"])
    );
    let meta = &schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
    assert_eq!(meta["finalizers"]["x-kubernetes-list-type"], "set");
    assert_eq!(
        meta["ownerReferences"]["x-kubernetes-list-map-keys"],
        json!(["uid"])
    );
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"]["x-kubernetes-map-type"],
        "atomic"
    );
    let pod_spec = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"];
    assert_eq!(pod_spec["nodeSelector"]["x-kubernetes-map-type"], "atomic");
    assert_eq!(
        schemas["io.k8s.api.core.v1.LocalObjectReference"]["x-kubernetes-map-type"],
        "atomic"
    );
    assert_eq!(
        schemas["io.k8s.api.core.v1.PodStatus"]["properties"]["hostIPs"]["x-kubernetes-list-type"],
        "atomic"
    );
    let service = &schemas["io.k8s.api.core.v1.ServiceSpec"]["properties"];
    assert_eq!(
        service["ports"]["x-kubernetes-list-map-keys"],
        json!(["port", "protocol"])
    );
    assert_eq!(service["selector"]["x-kubernetes-map-type"], "atomic");
    let apps = openapi::document(&catalog, "apis/apps/v1").expect("apps/v1");
    assert_eq!(
        apps["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"]["x-kubernetes-map-type"],
        "atomic"
    );
}

#[test]
fn v2_document_converts_every_group_version() {
    let catalog = catalog();
    let v2 = openapi::v2_document(&catalog);
    assert_eq!(v2["swagger"], "2.0");
    let definitions = v2["definitions"].as_object().expect("definitions");
    let mut found = Vec::new();
    refs(&v2, &mut found);
    for r in found {
        let name = r
            .strip_prefix("#/definitions/")
            .unwrap_or_else(|| panic!("foreign $ref {r}"));
        assert!(definitions.contains_key(name), "unresolved {r}");
    }
    assert_eq!(
        definitions["io.k8s.api.apps.v1.Deployment"]["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let patch = &v2["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert!(
        patch["consumes"]
            .as_array()
            .expect("consumes")
            .contains(&json!("application/strategic-merge-patch+json"))
    );
    assert_eq!(patch["produces"], json!(["application/json"]));
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "apps", "kind": "Deployment", "version": "v1"})
    );
    let parameters = patch["parameters"].as_array().expect("parameters");
    assert_eq!(
        parameters[0],
        json!({"name": "body", "in": "body", "required": true,
               "schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}})
    );
    let field_validation = parameters
        .iter()
        .find(|p| p["name"] == "fieldValidation")
        .expect("fieldValidation");
    assert_eq!(field_validation["in"], "query");
    assert_eq!(field_validation["type"], "string");
    assert_eq!(
        patch["responses"]["200"]["schema"]["$ref"],
        "#/definitions/io.k8s.api.apps.v1.Deployment"
    );
    assert!(
        definitions["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"]
            .get("nullable")
            .is_none()
    );
    let snapshot = openapi::snapshot(&catalog);
    assert!(snapshot.v2().protobuf.body.starts_with(b"\x0a\x032.0"));
}

#[test]
fn first_build_is_fast_and_later_calls_are_cached() {
    // A catalog content no other test uses, so this call really builds.
    let catalog = Catalog::builtin();
    let mut extra = catalog
        .get("", "v1", "configmaps")
        .expect("configmaps")
        .as_ref()
        .clone();
    extra.group = "example.com".into();
    extra.kind = "Widget".into();
    extra.plural = "widgets".into();
    extra.codec = None;
    catalog.insert(extra);

    let start = Instant::now();
    let first = openapi::snapshot(&catalog);
    let built = start.elapsed();
    let start = Instant::now();
    let again = openapi::snapshot(&catalog);
    let cached = start.elapsed();
    assert!(Arc::ptr_eq(&first, &again));
    let start = Instant::now();
    let v2 = first.v2();
    let v2_built = start.elapsed();
    let bytes: usize = first
        .paths()
        .filter_map(|p| first.document(p))
        .map(|d| d.body.len())
        .sum();
    eprintln!(
        "openapi: v3 built in {built:?} ({} documents, {bytes} bytes), cached lookup {cached:?}; \
         v2 built in {v2_built:?} ({} bytes JSON, {} bytes protobuf)",
        first.paths().count(),
        v2.json.body.len(),
        v2.protobuf.body.len()
    );
    assert!(built.as_secs() < 10, "{built:?}");

    // A kind without a k8s-openapi type gets an open schema, and no strategic merge.
    let doc = first.document("apis/example.com/v1").expect("custom group");
    let widget = &doc.value["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(widget["x-kubernetes-preserve-unknown-fields"], true);
    let patch =
        &doc.value["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert!(
        patch["requestBody"]["content"]
            .get("application/strategic-merge-patch+json")
            .is_none()
    );
    assert!(has_query_parameter(patch, "fieldValidation"));
}

// ---------------------------------------------------------------------------------------
// HTTP

/// The OpenAPI endpoints, as the server is expected to route them.
async fn openapi_endpoint(
    State(server): State<Arc<ApiServer>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let catalog = server.registry().catalog();
    match uri.path() {
        "/openapi/v2" => openapi::v2_response(catalog, &headers),
        path => {
            let rest = path.strip_prefix("/openapi/v3").unwrap_or_default();
            openapi::v3_response(catalog, Some(rest), uri.query(), &headers)
        }
    }
}

/// An API server whose router is extended with the OpenAPI endpoints, on a loopback port.
struct Served {
    url: String,
    _task: tokio::task::JoinHandle<()>,
}

async fn serve(with_openapi: bool) -> Served {
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .build()
        .await
        .expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    server.set_address(addr.to_string());
    let router = if with_openapi {
        axum::Router::new()
            .route("/openapi/v2", axum::routing::get(openapi_endpoint))
            .route("/openapi/v3", axum::routing::get(openapi_endpoint))
            .route("/openapi/v3/{*path}", axum::routing::get(openapi_endpoint))
            .with_state(server.clone())
            .fallback_service(server.router())
    } else {
        server.router()
    };
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.expect("serve");
    });
    Served {
        url: format!("http://{addr}"),
        _task: task,
    }
}

async fn get(url: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
    let url = url.to_string();
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || http_get(&url, &headers))
        .await
        .expect("join")
}

/// A minimal blocking HTTP/1.1 GET (the dev-dependencies have no plain HTTP client).
fn http_get(url: &str, headers: &[(String, String)]) -> (StatusCode, HeaderMap, Vec<u8>) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status_line = lines.next().expect("status line");
    let code: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let mut map = HeaderMap::new();
    for line in lines {
        if let Some((k, v)) = line.split_once(':')
            && let (Ok(name), Ok(value)) = (
                header::HeaderName::from_bytes(k.trim().as_bytes()),
                HeaderValue::from_str(v.trim()),
            )
        {
            map.append(name, value);
        }
    }
    if map
        .get(header::TRANSFER_ENCODING)
        .is_some_and(|v| v == "chunked")
    {
        let mut decoded = Vec::new();
        let mut rest = &body[..];
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap_or("0").trim(), 16)
                    .unwrap_or(0);
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(&rest[end + 2..end + 2 + size]);
            rest = &rest[end + 2 + size + 2..];
        }
        body = decoded;
    }
    (StatusCode::from_u16(code).expect("code"), map, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_caching_follows_kube_apiserver() {
    let served = serve(true).await;
    let (code, headers, body) = get(&format!("{}/openapi/v3", served.url), &[]).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let etag = headers[header::ETAG].to_str().expect("etag").to_string();
    let index: Value = serde_json::from_slice(&body).expect("index");
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .expect("url")
        .to_string();

    let (code, _, body) = get(
        &format!("{}/openapi/v3", served.url),
        &[("If-None-Match", &etag)],
    )
    .await;
    assert_eq!(code, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());

    let (code, headers, body) = get(
        &format!("{}{url}", served.url),
        &[("Accept", "application/json")],
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(headers[header::CACHE_CONTROL], "public, immutable");
    assert!(headers.contains_key(header::EXPIRES));
    let doc: Value = serde_json::from_slice(&body).expect("document");
    assert!(doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());

    let (code, headers, _) = get(
        &format!("{}/openapi/v3/apis/apps/v1?hash=0000", served.url),
        &[],
    )
    .await;
    assert_eq!(code, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(headers[header::LOCATION], url.as_str());

    let (code, headers, _) = get(&format!("{}/openapi/v3/apis/apps/v1", served.url), &[]).await;
    assert_eq!(code, StatusCode::OK);
    assert!(!headers.contains_key(header::CACHE_CONTROL));

    let (code, _, _) = get(&format!("{}/openapi/v3/apis/nope/v1", served.url), &[]).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _, _) = get(
        &format!("{}/openapi/v3/apis/apps/v1", served.url),
        &[(
            "Accept",
            "application/com.github.proto-openapi.spec.v3.v1.0+protobuf",
        )],
    )
    .await;
    assert_eq!(code, StatusCode::NOT_ACCEPTABLE);

    let (code, headers, body) = get(
        &format!("{}/openapi/v2", served.url),
        &[(
            "Accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    assert!(body.starts_with(b"\x0a\x032.0"));
    let (code, headers, body) = get(&format!("{}/openapi/v2", served.url), &[]).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let v2: Value = serde_json::from_slice(&body).expect("v2");
    assert_eq!(v2["swagger"], "2.0");
}

/// The server's own router serves the documents (`/openapi/v3` → `openapi::v3_response`,
/// `/openapi/v2` → `openapi::v2_response`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_routes_openapi() {
    let served = serve(false).await;
    let (code, _, body) = get(&format!("{}/openapi/v3", served.url), &[]).await;
    assert_eq!(
        code,
        StatusCode::OK,
        "the server does not route GET /openapi/v3 to konverge_apiserver::http::openapi::v3_response yet: {}",
        String::from_utf8_lossy(&body)
    );
    let index: Value = serde_json::from_slice(&body).expect("index");
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("url")
        .to_string();
    let (code, headers, _) = get(
        &format!("{}{url}", served.url),
        &[("Accept", "application/json")],
    )
    .await;
    assert_eq!(code, StatusCode::OK, "GET {url}");
    assert_eq!(headers[header::CACHE_CONTROL], "public, immutable");
    let (code, _, body) = get(
        &format!("{}/openapi/v2", served.url),
        &[(
            "Accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    )
    .await;
    assert_eq!(
        code,
        StatusCode::OK,
        "the server does not route GET /openapi/v2 to openapi::v2_response yet"
    );
    assert!(body.starts_with(b"\x0a\x032.0"));
}

// ---------------------------------------------------------------------------------------
// kubectl

/// `kubectl` on `PATH` and the versioned `kubectl.1.NN` binaries next to it.
fn kubectls() -> Vec<PathBuf> {
    let Some(default) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubectl"))
            .find(|p| p.is_file())
    }) else {
        return Vec::new();
    };
    let mut out = vec![default.clone()];
    let dir = std::fs::canonicalize(&default)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    if let Some(dir) = dir
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        let mut versioned: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("kubectl.1."))
            })
            .collect();
        versioned.sort();
        out.extend(versioned);
    }
    out
}

struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn new(binary: &Path, url: &str, dir: &Path) -> Kubectl {
        let name = binary
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("kubectl")
            .to_string();
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: {url}\n\
                 users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n    namespace: default\n\
                 current-context: c\n"
            ),
        )
        .expect("kubeconfig");
        Kubectl {
            binary: binary.to_path_buf(),
            kubeconfig,
            cache: dir.join("cache"),
            dir,
        }
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).expect("manifest");
        path.to_string_lossy().into_owned()
    }

    /// Runs kubectl; (exit code, stdout, stderr).
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let output = Command::new(&self.binary)
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .env("KUBECTL_EXTERNAL_DIFF", "diff -u -N")
            .output()
            .expect("run kubectl");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(
            code,
            0,
            "{} {args:?} failed:\n{out}\n{err}",
            self.binary.display()
        );
        out
    }
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        env:
        - {name: A, value: '1'}
      - name: sidecar
        image: busybox
";

const DEPLOYMENT_CHANGED: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        env:
        - {name: A, value: '1'}
        - {name: B, value: '2'}
";

const CONFIGMAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
";

const CLUSTER_ROLE: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
rules:
- apiGroups: ['']
  resources: [pods]
  verbs: [get]
";

const UNKNOWN_FIELD: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: typo
bogus: true
data:
  a: b
";

/// Runs `check` with every kubectl found against a server with the OpenAPI endpoints.
async fn with_kubectls(check: fn(&Kubectl)) {
    let binaries = kubectls();
    if binaries.is_empty() {
        eprintln!("SKIPPED: no kubectl on PATH");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    for binary in binaries {
        // A fresh server per kubectl: the checks create objects.
        let served = serve(true).await;
        eprintln!("running {}", binary.display());
        let kubectl = Kubectl::new(&binary, &served.url, dir.path());
        tokio::task::spawn_blocking(move || check(&kubectl))
            .await
            .expect("kubectl check");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain() {
    with_kubectls(|k| {
        let out = k.ok(&["explain", "deployment.spec.replicas"]);
        assert!(out.contains("GROUP:      apps"), "{out}");
        assert!(out.contains("KIND:       Deployment"), "{out}");
        assert!(out.contains("FIELD: replicas <integer>"), "{out}");
        assert!(out.contains("Number of desired pods"), "{out}");

        let out = k.ok(&["explain", "pods.spec.containers"]);
        assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
        assert!(out.contains("image\t<string>"), "{out}");

        let out = k.ok(&["explain", "namespace.status.phase"]);
        assert!(out.contains("FIELD: phase <string>"), "{out}");

        let out = k.ok(&["explain", "configmap"]);
        assert!(out.contains("KIND:       ConfigMap"), "{out}");
        assert!(out.contains("metadata\t<ObjectMeta>"), "{out}");

        let out = k.ok(&["explain", "deployments.metadata.labels"]);
        assert!(out.contains("FIELD: labels <map[string]string>"), "{out}");

        let out = k.ok(&["explain", "deployment", "--recursive"]);
        assert!(out.contains("replicas\t<integer>"), "{out}");

        let out = k.ok(&["explain", "roles.rbac.authorization.k8s.io.rules"]);
        assert!(out.contains("FIELD: rules <[]PolicyRule>"), "{out}");

        let (code, _, err) = k.run(&["explain", "deployment.spec.bogus"]);
        assert_ne!(code, 0);
        assert!(err.contains("field \"bogus\" does not exist"), "{err}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_create_and_diff_with_default_validation() {
    with_kubectls(|k| {
        let deployment = k.file("deployment.yaml", DEPLOYMENT);
        let out = k.ok(&["apply", "-f", &deployment]);
        assert!(out.contains("deployment.apps/web created"), "{out}");
        let out = k.ok(&["apply", "-f", &deployment]);
        assert!(out.contains("deployment.apps/web unchanged"), "{out}");

        // Client-side apply computes a strategic merge patch: containers merge by name, the
        // removed sidecar is deleted, env merges by name.
        let changed = k.file("deployment-changed.yaml", DEPLOYMENT_CHANGED);
        let (code, diff, err) = k.run(&["diff", "-f", &changed]);
        assert_eq!(code, 1, "kubectl diff: {diff}\n{err}");
        assert!(diff.contains("nginx:1.27"), "{diff}");
        let (code, out, err) = k.run(&["apply", "-f", &changed]);
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains("deployment.apps/web configured"), "{out}");
        assert!(!err.contains("error calculating patch"), "{err}");
        let live: Value =
            serde_json::from_str(&k.ok(&["get", "deployment", "web", "-o", "json"])).expect("json");
        assert_eq!(live["spec"]["replicas"], 3);
        let containers = live["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers");
        assert_eq!(containers.len(), 1, "{containers:?}");
        assert_eq!(containers[0]["image"], "nginx:1.27");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        let (code, _, _) = k.run(&["diff", "-f", &changed]);
        assert_eq!(code, 0, "no difference left");

        // Cluster-scoped kinds.
        let role = k.file("clusterrole.yaml", CLUSTER_ROLE);
        let out = k.ok(&["apply", "-f", &role]);
        assert!(
            out.contains("clusterrole.rbac.authorization.k8s.io/reader created"),
            "{out}"
        );
        let role = k.file(
            "clusterrole.yaml",
            &CLUSTER_ROLE.replace("[get]", "[get, list]"),
        );
        let out = k.ok(&["apply", "-f", &role]);
        assert!(
            out.contains("clusterrole.rbac.authorization.k8s.io/reader configured"),
            "{out}"
        );

        let configmap = k.file("configmap.yaml", CONFIGMAP);
        let out = k.ok(&["create", "-f", &configmap]);
        assert!(out.contains("configmap/settings created"), "{out}");

        // Validation is the server's (fieldValidation=Strict), not a client-side error.
        let typo = k.file("typo.yaml", UNKNOWN_FIELD);
        let (code, out, err) = k.run(&["apply", "-f", &typo]);
        assert_ne!(code, 0, "an unknown field must be rejected: {out}");
        assert!(err.contains("unknown field \"bogus\""), "{err}");
        assert!(
            !err.contains("ValidationError"),
            "client-side validation ran: {err}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_openapi_v2() {
    with_kubectls(|k| {
        // kubectl parses the v2 protobuf with kube-openapi's strict model parser.
        let (code, out, err) = k.run(&[
            "explain",
            "deployment.spec",
            "--output",
            "plaintext-openapiv2",
        ]);
        if code != 0 && err.contains("unknown flag") {
            return;
        }
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains("DeploymentSpec"), "{out}");
        assert!(out.contains("replicas"), "{out}");
    })
    .await;
}

/// A custom resource's schema in v2 is what apiextensions-apiserver publishes there: only
/// `type: object` when its root keeps unknown fields; otherwise without junctors, without
/// the types of nullable and open values, and without the properties of open objects.
/// v3 keeps the schemas as the definitions give them.
#[test]
fn custom_resources_in_v2_are_published_as_kube_apiserver_publishes_them() {
    use konverge_apiserver::resources::crd;
    let catalog = Catalog::builtin();
    let definition = |kind: &str, plural: &str, schema: Value| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.com")},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {
                    "plural": plural,
                    "singular": kind.to_lowercase(),
                    "kind": kind,
                    "listKind": format!("{kind}List"),
                },
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema},
                }],
            },
        })
    };
    let open = definition(
        "Open",
        "opens",
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    let shaped = definition(
        "Shaped",
        "shapeds",
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size", "note"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "note": {"type": "string", "nullable": true},
                        "free": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {"a": {"type": "string"}},
                        },
                        "choice": {"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "^b"}]},
                        "anything": {
                            "type": "array",
                            "items": {"type": "string"},
                            "x-kubernetes-preserve-unknown-fields": true,
                        },
                    },
                },
            },
        }),
    );
    for rt in crd::served_types(&open)
        .into_iter()
        .chain(crd::served_types(&shaped))
    {
        catalog.insert(rt);
    }
    let v2 = openapi::v2_document(&catalog);
    assert_eq!(
        v2["definitions"]["com.example.v1.Open"],
        json!({
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": "example.com", "kind": "Open", "version": "v1"}],
        })
    );
    let doc = openapi::document(&catalog, "apis/example.com/v1").expect("example.com/v1");
    assert_eq!(
        doc["components"]["schemas"]["com.example.v1.Open"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    let shaped = &v2["definitions"]["com.example.v1.Shaped"];
    assert_eq!(
        shaped["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let spec = &shaped["properties"]["spec"];
    assert_eq!(spec["required"], json!(["size"]));
    assert_eq!(
        spec["properties"]["size"],
        json!({"type": "integer", "minimum": 1})
    );
    assert_eq!(spec["properties"]["note"], json!({}));
    assert_eq!(
        spec["properties"]["free"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(spec["properties"]["choice"], json!({"type": "string"}));
    assert_eq!(
        spec["properties"]["anything"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
}
