//! The generator of `src/table.rs` (shared by `examples/generate.rs`, which writes it, and
//! `tests/table.rs`, which checks the committed file is current).
//!
//! Inputs, all on disk after `cargo fetch`:
//!
//! - the prost sources of `k8s-pb` (protobuf field numbers and types), parsed with `syn`;
//! - the `k8s-openapi` JSON schemas (via `schemars`) of [`roots`] and everything they
//!   reference: each protobuf field is matched to the JSON property whose name is equal
//!   ignoring case and non-alphanumerics (`pod_ip` ↔ `podIP`, `r#ref` ↔ `$ref`);
//! - `generator/go-fields.txt`: for every field, its JSON name and whether the Go field is
//!   a pointer, `omitempty` or inline. It is extracted from the Kubernetes Go sources
//!   (`--go-src`, see [`extract_go_fields`]) and committed, because neither the protobuf nor
//!   the OpenAPI definitions say how Go writes a field's zero value.
//!
//! Every mismatch fails loudly: a protobuf field with neither a JSON property nor a newer
//! `k8s-openapi` version knowing it, a JSON name disagreeing with Go's, a field without Go
//! facts, a special message whose layout differs from what the decoder hardcodes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::Value;

/// Where the generated table and the Go facts live, relative to the crate.
pub(crate) const TABLE_PATH: &str = "src/table.rs";
pub(crate) const FACTS_PATH: &str = "generator/go-fields.txt";

type Result<T, E = String> = std::result::Result<T, E>;

/// A kind request bodies may carry.
#[derive(Debug, Clone)]
pub(crate) struct Root {
    /// The k8s-openapi schema name (`io.k8s.api.core.v1.Pod`).
    schema: String,
    /// `None`: accepted under any apiVersion.
    api_version: Option<&'static str>,
    kind: &'static str,
}

fn root<T: k8s_openapi::Resource + JsonSchema>(generator: &mut SchemaGenerator) -> Root {
    generator.subschema_for::<T>();
    Root {
        schema: T::schema_name().into_owned(),
        api_version: Some(T::API_VERSION),
        kind: T::KIND,
    }
}

/// The kinds to generate tables for. Adding a kind is one line here, then rerunning the
/// generator (its Go facts need `--go-src` if it brings new messages).
pub(crate) fn roots(generator: &mut SchemaGenerator) -> Vec<Root> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admission, apps::v1 as apps, authentication::v1 as authn,
        authorization::v1 as authz, autoscaling::v1 as autoscaling,
        autoscaling::v2 as autoscaling2, batch::v1 as batch, certificates::v1 as certificates,
        coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
        events::v1 as events, flowcontrol::v1 as flowcontrol, networking::v1 as networking,
        node::v1 as node, policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling,
        storage::v1 as storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    let g = generator;
    let mut roots = vec![
        // Served by konverge.
        root::<core::Namespace>(g),
        root::<core::ConfigMap>(g),
        root::<core::Secret>(g),
        root::<core::Pod>(g),
        root::<core::Service>(g),
        root::<core::ServiceAccount>(g),
        root::<core::Event>(g),
        root::<core::Node>(g),
        root::<core::Endpoints>(g),
        root::<apps::Deployment>(g),
        root::<apps::ReplicaSet>(g),
        root::<apps::StatefulSet>(g),
        root::<apps::DaemonSet>(g),
        root::<batch::Job>(g),
        root::<coordination::Lease>(g),
        root::<events::Event>(g),
        root::<rbac::Role>(g),
        root::<rbac::ClusterRole>(g),
        root::<rbac::RoleBinding>(g),
        root::<rbac::ClusterRoleBinding>(g),
        root::<autoscaling::Scale>(g),
        root::<apiextensions::CustomResourceDefinition>(g),
        // Subresource and review bodies (pods/binding, pods/eviction,
        // serviceaccounts/token, `kubectl auth can-i`), and more kinds.
        root::<core::Binding>(g),
        root::<core::PersistentVolumeClaim>(g),
        root::<policy::Eviction>(g),
        root::<authn::TokenRequest>(g),
        root::<authz::SelfSubjectAccessReview>(g),
        root::<authz::SelfSubjectRulesReview>(g),
        root::<batch::CronJob>(g),
        root::<apps::ControllerRevision>(g),
        // The rest of Kubernetes 1.33's built-in kinds.
        root::<core::LimitRange>(g),
        root::<core::PersistentVolume>(g),
        root::<core::PodTemplate>(g),
        root::<core::ReplicationController>(g),
        root::<core::ResourceQuota>(g),
        root::<admission::MutatingWebhookConfiguration>(g),
        root::<admission::ValidatingWebhookConfiguration>(g),
        root::<admission::ValidatingAdmissionPolicy>(g),
        root::<admission::ValidatingAdmissionPolicyBinding>(g),
        root::<authn::TokenReview>(g),
        root::<authn::SelfSubjectReview>(g),
        root::<authz::SubjectAccessReview>(g),
        root::<authz::LocalSubjectAccessReview>(g),
        root::<autoscaling::HorizontalPodAutoscaler>(g),
        root::<autoscaling2::HorizontalPodAutoscaler>(g),
        root::<certificates::CertificateSigningRequest>(g),
        root::<discovery::EndpointSlice>(g),
        root::<flowcontrol::FlowSchema>(g),
        root::<flowcontrol::PriorityLevelConfiguration>(g),
        root::<networking::Ingress>(g),
        root::<networking::IngressClass>(g),
        root::<networking::NetworkPolicy>(g),
        root::<networking::ServiceCIDR>(g),
        root::<networking::IPAddress>(g),
        root::<node::RuntimeClass>(g),
        root::<policy::PodDisruptionBudget>(g),
        root::<scheduling::PriorityClass>(g),
        root::<storage::CSIDriver>(g),
        root::<storage::CSINode>(g),
        root::<storage::CSIStorageCapacity>(g),
        root::<storage::StorageClass>(g),
        root::<storage::VolumeAttachment>(g),
    ];
    g.subschema_for::<meta::DeleteOptions>();
    roots.push(Root {
        schema: meta::DeleteOptions::schema_name().into_owned(),
        api_version: None,
        kind: "DeleteOptions",
    });
    roots
}

// ---------------------------------------------------------------------------------------
// k8s-pb sources
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum PbType {
    String,
    Bool,
    Int32,
    Int64,
    Double,
    Bytes,
    /// The full protobuf name as k8s-pb spells it (`k8s.io.api.core.v1.Pod`).
    Message(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PbCard {
    Single,
    Repeated,
    Map,
}

#[derive(Debug, Clone)]
struct PbField {
    /// The Rust field name without `r#`.
    name: String,
    number: u32,
    ty: PbType,
    card: PbCard,
}

#[derive(Debug, Clone)]
struct PbMessage {
    /// The full name as k8s-pb spells it.
    full: String,
    fields: Vec<PbField>,
}

/// All prost messages of the k8s-pb sources, by lower-cased full name.
fn load_pb(src: &Path) -> Result<BTreeMap<String, PbMessage>> {
    let mut files = Vec::new();
    collect_rs(src, &mut files)?;
    files.sort();
    let mut out = BTreeMap::new();
    for file in files {
        let rel = file
            .strip_prefix(src)
            .map_err(|e| e.to_string())?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if module.is_empty() {
            continue;
        }
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{file:?}: {e}"))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{file:?}: {e}"))?;
        for item in parsed.items {
            let syn::Item::Struct(item) = item else {
                continue;
            };
            if !derives_prost_message(&item.attrs) {
                continue;
            }
            let full = format!("k8s.io.{}.{}", module.join("."), item.ident);
            let mut fields = Vec::new();
            for field in &item.fields {
                let Some(attr) = field.attrs.iter().find(|a| a.path().is_ident("prost")) else {
                    continue;
                };
                let name = field
                    .ident
                    .as_ref()
                    .map(|i| i.to_string().trim_start_matches("r#").to_owned())
                    .ok_or_else(|| format!("{full}: unnamed field"))?;
                let tokens = attr
                    .meta
                    .require_list()
                    .map_err(|e| format!("{full}.{name}: {e}"))?
                    .tokens
                    .to_string();
                fields.push(
                    parse_prost_field(&tokens, &field.ty, &module, name.clone())
                        .map_err(|e| format!("{full}.{name}: {e}"))?,
                );
            }
            fields.sort_by_key(|f| f.number);
            out.insert(full.to_lowercase(), PbMessage { full, fields });
        }
    }
    Ok(out)
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{dir:?}: {e}"))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn derives_prost_message(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("derive")
            && a.meta.require_list().is_ok_and(|l| {
                l.tokens
                    .to_string()
                    .replace(' ', "")
                    .contains("prost::Message")
            })
    })
}

/// Parses `string, optional, tag = "1"` (the tokens of `#[prost(...)]`).
fn parse_prost_field(
    tokens: &str,
    ty: &syn::Type,
    module: &[String],
    name: String,
) -> Result<PbField> {
    let mut kind: Option<String> = None;
    let mut map_value: Option<String> = None;
    let mut number = None;
    let mut card = PbCard::Single;
    for part in split_top_level(tokens) {
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().trim_matches('"').to_owned())),
            None => (part.trim(), None),
        };
        match key {
            "tag" => {
                number = Some(
                    value
                        .as_deref()
                        .unwrap_or_default()
                        .parse::<u32>()
                        .map_err(|e| e.to_string())?,
                );
            }
            "optional" | "boxed" | "packed" | "required" => {}
            "repeated" => card = PbCard::Repeated,
            "btree_map" | "map" | "hash_map" => {
                card = PbCard::Map;
                let value = value.unwrap_or_default();
                let (k, v) = value
                    .split_once(',')
                    .ok_or_else(|| format!("bad map spec {value:?}"))?;
                if k.trim() != "string" {
                    return Err(format!("map key {k:?} is not string"));
                }
                map_value = Some(v.trim().to_owned());
            }
            "string" | "bool" | "int32" | "int64" | "double" | "bytes" | "message" => {
                kind = Some(key.to_owned());
            }
            other => {
                return Err(format!(
                    "unsupported prost attribute {other:?} in {tokens:?}"
                ));
            }
        }
    }
    let number = number.ok_or("no tag")?;
    let kind = match card {
        PbCard::Map => map_value.ok_or("no map value type")?,
        _ => kind.ok_or_else(|| format!("no type in {tokens:?}"))?,
    };
    let ty = match kind.as_str() {
        "string" => PbType::String,
        "bool" => PbType::Bool,
        "int32" => PbType::Int32,
        "int64" => PbType::Int64,
        "double" => PbType::Double,
        "bytes" => PbType::Bytes,
        "message" => PbType::Message(resolve_type(ty, module)?),
        other => return Err(format!("unsupported protobuf type {other:?}")),
    };
    Ok(PbField {
        name,
        number,
        ty,
        card,
    })
}

fn split_top_level(tokens: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut in_string = false;
    for c in tokens.chars() {
        match c {
            '"' => {
                in_string = !in_string;
                current.push(c);
            }
            ',' if !in_string => parts.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        parts.push(current);
    }
    parts
}

/// The full protobuf name of the message type inside `Option<…>`, `Vec<…>`, `Box<…>` or
/// `BTreeMap<String, …>`, resolved relative to `module`.
fn resolve_type(ty: &syn::Type, module: &[String]) -> Result<String> {
    let syn::Type::Path(path) = ty else {
        return Err("unsupported field type".to_owned());
    };
    let last = path.path.segments.last().ok_or("empty type path")?;
    let wrapper = matches!(
        last.ident.to_string().as_str(),
        "Option" | "Vec" | "Box" | "BTreeMap" | "HashMap"
    );
    if wrapper {
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return Err("no type arguments".to_owned());
        };
        let inner = args
            .args
            .iter()
            .filter_map(|a| match a {
                syn::GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .next_back()
            .ok_or("no type argument")?;
        return resolve_type(inner, module);
    }
    let mut at: Vec<String> = module.to_vec();
    let segments: Vec<String> = path
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    let (name, prefix) = segments.split_last().ok_or("empty path")?;
    for segment in prefix {
        match segment.as_str() {
            "super" => {
                at.pop().ok_or("super beyond the crate root")?;
            }
            "crate" => at.clear(),
            "self" => {}
            other => at.push(other.to_owned()),
        }
    }
    Ok(format!("k8s.io.{}.{name}", at.join(".")))
}

// ---------------------------------------------------------------------------------------
// k8s-openapi schemas
// ---------------------------------------------------------------------------------------

/// The JSON property names of each k8s-openapi definition, by lower-cased schema name, with
/// the schema name's own spelling.
struct Schemas {
    defs: BTreeMap<String, (String, Vec<String>)>,
}

impl Schemas {
    fn from_definitions(definitions: &serde_json::Map<String, Value>) -> Self {
        let defs = definitions
            .iter()
            .map(|(name, schema)| {
                let properties = schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                (name.to_lowercase(), (name.clone(), properties))
            })
            .collect();
        Self { defs }
    }

    fn get(&self, schema_name: &str) -> Option<&(String, Vec<String>)> {
        self.defs.get(&schema_name.to_lowercase())
    }
}

/// `k8s.io.api.core.v1.Pod` ↔ `io.k8s.api.core.v1.Pod` (`_` in package names ↔ `-`).
fn schema_name_of(proto_full: &str) -> String {
    let rest = proto_full.strip_prefix("k8s.io.").unwrap_or(proto_full);
    let (package, name) = rest.rsplit_once('.').unwrap_or(("", rest));
    format!("io.k8s.{}.{name}", package.replace('_', "-"))
}

fn proto_name_of(schema_name: &str) -> String {
    let rest = schema_name.strip_prefix("io.k8s.").unwrap_or(schema_name);
    let (package, name) = rest.rsplit_once('.').unwrap_or(("", rest));
    format!("k8s.io.{}.{name}", package.replace('-', "_"))
}

fn normalize(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Property names of every definition in every k8s-openapi version's sources, by schema
/// name: a protobuf field missing from the served version's schema is skipped only if some
/// version knows it (a field the served version does not have yet).
fn other_versions_properties(openapi_src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    collect_rs(openapi_src, &mut files)?;
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{file:?}: {e}"))?;
        let Some(schema_name) = text.lines().find_map(|line| {
            let line = line.trim();
            line.strip_prefix('"')
                .and_then(|l| l.strip_suffix("\".into()"))
                .filter(|l| l.starts_with("io.k8s."))
        }) else {
            continue;
        };
        let entry = out.entry(schema_name.to_lowercase()).or_default();
        // Every JSON property is written by the Serialize impl.
        const MARK: &str = "serialize_field(&mut state, \"";
        for (at, _) in text.match_indices(MARK) {
            let rest = text.get(at + MARK.len()..).unwrap_or_default();
            if let Some(end) = rest.find('"') {
                entry.insert(normalize(rest.get(..end).unwrap_or_default()));
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Go facts
// ---------------------------------------------------------------------------------------

/// What the Go struct field behind a protobuf field looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GoField {
    /// The JSON name (empty for inline fields).
    json: String,
    pointer: bool,
    omitempty: bool,
    inline: bool,
}

/// Go facts by (message full name as in the table, field number).
type Facts = BTreeMap<(String, u32), GoField>;

fn parse_facts(text: &str) -> Result<Facts> {
    let mut facts = Facts::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [message, number, json, flags] = parts[..] else {
            return Err(format!("{FACTS_PATH}:{}: expected 4 columns", i + 1));
        };
        let number = number
            .parse()
            .map_err(|e| format!("{FACTS_PATH}:{}: {e}", i + 1))?;
        let flags: BTreeSet<&str> = flags.split(',').filter(|f| *f != "-").collect();
        for flag in &flags {
            if !["ptr", "omitempty", "inline"].contains(flag) {
                return Err(format!("{FACTS_PATH}:{}: unknown flag {flag}", i + 1));
            }
        }
        facts.insert(
            (message.to_owned(), number),
            GoField {
                json: if json == "-" {
                    String::new()
                } else {
                    json.to_owned()
                },
                pointer: flags.contains("ptr"),
                omitempty: flags.contains("omitempty"),
                inline: flags.contains("inline"),
            },
        );
    }
    Ok(facts)
}

fn render_facts(facts: &Facts, source: &str) -> String {
    let mut out = String::new();
    out.push_str(
        "# Generated by `cargo run -p konverge-protobuf --example generate -- --go-src DIR`.\n\
         # How the Go struct field behind each protobuf field serializes to JSON, for every\n\
         # message in src/table.rs: <message> <field number> <JSON name or - if inline>\n\
         # <flags: ptr (Go pointer), omitempty, inline; - for none>.\n",
    );
    let _ = writeln!(out, "# Source: {source}");
    for ((message, number), field) in facts {
        let mut flags = Vec::new();
        if field.pointer {
            flags.push("ptr");
        }
        if field.omitempty {
            flags.push("omitempty");
        }
        if field.inline {
            flags.push("inline");
        }
        let flags = if flags.is_empty() {
            "-".to_owned()
        } else {
            flags.join(",")
        };
        let json = if field.json.is_empty() {
            "-"
        } else {
            &field.json
        };
        let _ = writeln!(out, "{message} {number} {json} {flags}");
    }
    out
}

/// Reads the Go struct fields carrying protobuf tags in the Go package of `message`
/// (`k8s.io.api.core.v1` → `<go_src>/api/core/v1/*.go`), returning them by field number for
/// the struct named like the message.
pub(crate) fn extract_go_fields(go_src: &Path, message: &str) -> Result<BTreeMap<u32, GoField>> {
    let rest = message
        .strip_prefix("k8s.io.")
        .ok_or("not a k8s.io message")?;
    let (package, name) = rest.rsplit_once('.').ok_or("no package")?;
    let mut dir = go_src.to_path_buf();
    for (i, segment) in package.split('.').enumerate() {
        dir.push(if i == 0 {
            segment.replace('_', "-")
        } else {
            segment.to_owned()
        });
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{dir:?}: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "go") && !p.to_string_lossy().ends_with("_test.go")
        })
        .collect();
    files.sort();
    let mut found = None;
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{file:?}: {e}"))?;
        let mut current: Option<&str> = None;
        let mut fields = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("type ") {
                if rest.strip_suffix(" struct{}").map(str::trim) == Some(name) {
                    found = Some(BTreeMap::new());
                    break;
                }
                if let Some(struct_name) = rest.strip_suffix(" struct {") {
                    current = Some(struct_name.trim());
                    fields = BTreeMap::new();
                }
                continue;
            }
            if line.starts_with('}') {
                if current == Some(name) {
                    found = Some(std::mem::take(&mut fields));
                }
                current = None;
                continue;
            }
            if current != Some(name) || line.trim_start().starts_with("//") {
                continue;
            }
            let Some((decl, tag)) = line.split_once('`') else {
                continue;
            };
            let Some(protobuf) = struct_tag(tag, "protobuf") else {
                continue;
            };
            if protobuf == "-" {
                continue;
            }
            let number: u32 = protobuf
                .split(',')
                .nth(1)
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("{file:?}: bad protobuf tag in {line:?}"))?;
            let json = struct_tag(tag, "json")
                .ok_or_else(|| format!("{file:?}: no json tag in {line:?}"))?;
            let mut options = json.split(',');
            let json_name = options.next().unwrap_or_default().to_owned();
            let options: Vec<&str> = options.collect();
            for option in &options {
                if !["omitempty", "inline"].contains(option) {
                    return Err(format!(
                        "{file:?}: unsupported json option {option:?} in {line:?}"
                    ));
                }
            }
            let decl: Vec<&str> = decl.split_whitespace().collect();
            let go_type = match decl[..] {
                [_name, ty] => ty,
                [ty] => ty,
                _ => return Err(format!("{file:?}: cannot parse field {line:?}")),
            };
            let inline = options.contains(&"inline");
            if inline != json_name.is_empty() {
                return Err(format!("{file:?}: inline field with a JSON name: {line:?}"));
            }
            fields.insert(
                number,
                GoField {
                    json: json_name,
                    pointer: go_type.starts_with('*'),
                    omitempty: options.contains(&"omitempty"),
                    inline,
                },
            );
        }
        if found.is_some() {
            break;
        }
    }
    found.ok_or_else(|| format!("no Go struct {name} in {dir:?}"))
}

/// The value of `key:"…"` in a Go struct tag.
fn struct_tag<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    let start = tag.find(&format!("{key}:\""))? + key.len() + 2;
    let rest = tag.get(start..)?;
    rest.get(..rest.find('"')?)
}

// ---------------------------------------------------------------------------------------
// The closure and the table
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repr {
    Object,
    Time,
    MicroTime,
    Duration,
    Quantity,
    IntOrString,
    RawExtension,
    FieldsV1,
    Json,
    JsonSchemaPropsOrArray,
    JsonSchemaPropsOrBool,
    JsonSchemaPropsOrStringArray,
    StringList,
}

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
const APIEXT: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1";

/// A message's fields as (number, k8s-pb field name, type, card).
type Layout = Vec<(u32, &'static str, PbType, PbCard)>;

/// The messages with their own JSON encoding, and the layout the decoder hardcodes for
/// them: (number, k8s-pb field name, type, card).
fn special(full: &str) -> Option<(Repr, Layout)> {
    use PbCard::{Repeated, Single};
    let schema = || PbType::Message(format!("{APIEXT}.JSONSchemaProps"));
    let time = || {
        vec![
            (1, "seconds", PbType::Int64, Single),
            (2, "nanos", PbType::Int32, Single),
        ]
    };
    let raw = || vec![(1, "raw", PbType::Bytes, Single)];
    let (package, name) = full.rsplit_once('.')?;
    Some(match (package, name) {
        (META, "Time") => (Repr::Time, time()),
        (META, "MicroTime") => (Repr::MicroTime, time()),
        (META, "Duration") => (Repr::Duration, vec![(1, "duration", PbType::Int64, Single)]),
        (META, "FieldsV1") => (Repr::FieldsV1, raw()),
        (META, "Verbs") | (_, "ExtraValue") => (
            Repr::StringList,
            vec![(1, "items", PbType::String, Repeated)],
        ),
        ("k8s.io.apimachinery.pkg.runtime", "RawExtension") => (Repr::RawExtension, raw()),
        ("k8s.io.apimachinery.pkg.api.resource", "Quantity") => {
            (Repr::Quantity, vec![(1, "string", PbType::String, Single)])
        }
        ("k8s.io.apimachinery.pkg.util.intstr", "IntOrString") => (
            Repr::IntOrString,
            vec![
                (1, "type", PbType::Int64, Single),
                (2, "int_val", PbType::Int32, Single),
                (3, "str_val", PbType::String, Single),
            ],
        ),
        (APIEXT, "JSON") => (Repr::Json, raw()),
        (APIEXT, "JSONSchemaPropsOrArray") => (
            Repr::JsonSchemaPropsOrArray,
            vec![
                (1, "schema", schema(), Single),
                (2, "j_son_schemas", schema(), Repeated),
            ],
        ),
        (APIEXT, "JSONSchemaPropsOrBool") => (
            Repr::JsonSchemaPropsOrBool,
            vec![
                (1, "allows", PbType::Bool, Single),
                (2, "schema", schema(), Single),
            ],
        ),
        (APIEXT, "JSONSchemaPropsOrStringArray") => (
            Repr::JsonSchemaPropsOrStringArray,
            vec![
                (1, "schema", schema(), Single),
                (2, "property", PbType::String, Repeated),
            ],
        ),
        _ => return None,
    })
}

#[derive(Debug, Clone)]
struct OutField {
    number: u32,
    json: String,
    ty: PbType,
    card: PbCard,
    absent: &'static str,
    omit_zero: bool,
    inline: bool,
}

#[derive(Debug, Clone)]
struct OutMessage {
    repr: Repr,
    fields: Vec<OutField>,
}

/// Where the generator's inputs are.
pub(crate) struct Inputs {
    /// k8s-pb's `src` directory.
    pub(crate) pb_src: PathBuf,
    /// k8s-openapi's `src` directory.
    pub(crate) openapi_src: PathBuf,
    /// Kubernetes Go sources to extract the Go facts from (a directory holding `api/`,
    /// `apimachinery/` and `apiextensions-apiserver/`); `None`: read `generator/go-fields.txt`.
    pub(crate) go_src: Option<PathBuf>,
    /// The release `go_src` is at (`v0.33.13`), recorded in the facts file.
    pub(crate) go_release: Option<String>,
    /// The crate directory.
    pub(crate) crate_dir: PathBuf,
}

/// The generated files' contents.
pub(crate) struct Output {
    pub(crate) table: String,
    pub(crate) facts: String,
}

/// Runs the generator.
pub(crate) fn generate(inputs: &Inputs) -> Result<Output> {
    let pb = load_pb(&inputs.pb_src)?;
    let mut generator = SchemaGenerator::new(SchemaSettings::draft2020_12());
    let roots = roots(&mut generator);
    let schemas = Schemas::from_definitions(generator.definitions());
    let other_versions = other_versions_properties(&inputs.openapi_src)?;
    let committed_facts = match &inputs.go_src {
        Some(_) => Facts::new(),
        None => {
            let path = inputs.crate_dir.join(FACTS_PATH);
            parse_facts(&std::fs::read_to_string(&path).map_err(|e| format!("{path:?}: {e}"))?)?
        }
    };
    let mut facts = Facts::new();

    // Canonical names: the k8s-openapi (= Go) spelling where there is a schema.
    let canonical = |pb_full: &str| -> String {
        match schemas.get(&schema_name_of(pb_full)) {
            Some((schema_name, _)) => proto_name_of(schema_name),
            None => pb_full.to_owned(),
        }
    };

    let mut out: BTreeMap<String, OutMessage> = BTreeMap::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut queue: VecDeque<String> = VecDeque::new();
    let mut kinds = Vec::new();
    for root in &roots {
        let name = proto_name_of(&root.schema);
        let pb_message = pb
            .get(&name.to_lowercase())
            .ok_or_else(|| format!("root {name}: no k8s-pb message"))?;
        let name = canonical(&pb_message.full);
        kinds.push((root.api_version, root.kind, name.clone()));
        queue.push_back(name);
    }
    let mut seen: BTreeSet<String> = queue.iter().cloned().collect();
    let mut inline_parent: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let mut props_of: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();

    while let Some(name) = queue.pop_front() {
        let pb_message = pb
            .get(&name.to_lowercase())
            .ok_or_else(|| format!("{name}: no k8s-pb message"))?;
        let mut fields = Vec::new();
        let mut enqueue = |ty: &PbType, queue: &mut VecDeque<String>| -> String {
            match ty {
                PbType::Message(target) => {
                    let target = canonical(target);
                    if seen.insert(target.clone()) {
                        queue.push_back(target.clone());
                    }
                    target
                }
                _ => String::new(),
            }
        };
        if let Some((repr, layout)) = special(&name) {
            let actual: Vec<(u32, String, PbType, PbCard)> = pb_message
                .fields
                .iter()
                .map(|f| {
                    let ty = match &f.ty {
                        PbType::Message(m) => PbType::Message(canonical(m)),
                        other => other.clone(),
                    };
                    (f.number, f.name.clone(), ty, f.card)
                })
                .collect();
            let expected: Vec<(u32, String, PbType, PbCard)> = layout
                .into_iter()
                .map(|(n, f, t, c)| (n, f.to_owned(), t, c))
                .collect();
            if actual != expected {
                return Err(format!(
                    "{name}: layout {actual:?} differs from what the decoder expects: {expected:?}"
                ));
            }
            for field in &pb_message.fields {
                let target = enqueue(&field.ty, &mut queue);
                fields.push(OutField {
                    number: field.number,
                    json: camel(&field.name),
                    ty: match &field.ty {
                        PbType::Message(_) => PbType::Message(target),
                        other => other.clone(),
                    },
                    card: field.card,
                    absent: "Omit",
                    omit_zero: false,
                    inline: false,
                });
            }
            out.insert(name.clone(), OutMessage { repr, fields });
            continue;
        }

        // Messages embedded inline (VolumeSource, ProbeHandler, …) have no schema of their
        // own: their properties are the parent's.
        let (schema_name, properties) = match schemas.get(&schema_name_of(&name)) {
            Some((schema_name, properties)) => (schema_name.clone(), properties.clone()),
            None => inline_parent.get(&name).cloned().ok_or_else(|| {
                format!("{name}: no k8s-openapi schema {}", schema_name_of(&name))
            })?,
        };
        props_of.insert(name.clone(), (schema_name.clone(), properties.clone()));
        let by_normalized: BTreeMap<String, &String> =
            properties.iter().map(|p| (normalize(p), p)).collect();
        if by_normalized.len() != properties.len() {
            return Err(format!(
                "{name}: JSON properties collide when normalized: {properties:?}"
            ));
        }
        let go_fields = match &inputs.go_src {
            Some(go_src) => Some(extract_go_fields(go_src, &name)?),
            None => None,
        };
        if let Some(go_fields) = &go_fields {
            for number in go_fields.keys() {
                if !pb_message.fields.iter().any(|f| f.number == *number) {
                    return Err(format!(
                        "{name}: Go field {number} ({:?}) is missing from k8s-pb",
                        go_fields.get(number)
                    ));
                }
            }
        }
        for field in &pb_message.fields {
            let matched = by_normalized
                .get(&normalize(&field.name))
                .map(|s| (*s).clone());
            let fact = match &go_fields {
                Some(go_fields) => go_fields.get(&field.number).cloned(),
                None => committed_facts.get(&(name.clone(), field.number)).cloned(),
            };
            let Some(fact) = fact else {
                if matched.is_some() {
                    return Err(format!(
                        "{name}.{} (field {}): no Go facts; rerun the generator with --go-src",
                        field.name, field.number
                    ));
                }
                // A field the served version does not know: only if some version does.
                let known_elsewhere = other_versions
                    .get(&schema_name.to_lowercase())
                    .is_some_and(|p| p.contains(&normalize(&field.name)));
                if !known_elsewhere {
                    return Err(format!(
                        "{name}.{} (field {}): no JSON property matches in {schema_name} \
                         (properties: {properties:?}) nor in any k8s-openapi version",
                        field.name, field.number
                    ));
                }
                skipped.push(format!("{name}.{} ({})", field.name, field.number));
                continue;
            };
            if fact.inline {
                if matched.is_some() {
                    return Err(format!(
                        "{name}.{}: inline in Go but a JSON property",
                        field.name
                    ));
                }
            } else if matched.as_deref() != Some(fact.json.as_str()) {
                return Err(format!(
                    "{name}.{} (field {}): JSON name from the schema {matched:?} differs from Go's {:?}",
                    field.name, field.number, fact.json
                ));
            }
            facts.insert((name.clone(), field.number), fact.clone());
            let target = enqueue(&field.ty, &mut queue);
            if fact.inline {
                inline_parent.insert(target.clone(), (schema_name.clone(), properties.clone()));
            }
            let ty = match &field.ty {
                PbType::Message(_) => PbType::Message(target),
                other => other.clone(),
            };
            let (absent, omit_zero) = go_semantics(&fact, &ty, field.card);
            fields.push(OutField {
                number: field.number,
                json: fact.json.clone(),
                ty,
                card: field.card,
                absent,
                omit_zero,
                inline: fact.inline,
            });
        }
        out.insert(
            name.clone(),
            OutMessage {
                repr: Repr::Object,
                fields,
            },
        );
    }

    // Inline fields: the embedded message's properties must be the parent's.
    for (name, message) in &out {
        for field in message.fields.iter().filter(|f| f.inline) {
            let PbType::Message(target) = &field.ty else {
                return Err(format!(
                    "{name}: inline field {} is not a message",
                    field.number
                ));
            };
            let (_, parent_properties) = props_of.get(name).ok_or("no properties")?;
            let child = out.get(target).ok_or("inline target missing")?;
            if child.repr != Repr::Object {
                return Err(format!("{name}: inline field {} is special", field.number));
            }
            for child_field in child.fields.iter().filter(|f| !f.inline) {
                if !parent_properties.contains(&child_field.json) {
                    return Err(format!(
                        "{name}: inline {target}.{} is not a property of the parent",
                        child_field.json
                    ));
                }
            }
        }
    }

    let facts_source = format!(
        "k8s.io/api, k8s.io/apimachinery and k8s.io/apiextensions-apiserver {}",
        inputs
            .go_release
            .as_deref()
            .unwrap_or("(release not given)")
    );
    let facts_text = if inputs.go_src.is_some() {
        render_facts(&facts, &facts_source)
    } else {
        // Keep the committed file (header included) when it already has exactly these facts.
        let path = inputs.crate_dir.join(FACTS_PATH);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path:?}: {e}"))?;
        let unused: Vec<_> = committed_facts
            .keys()
            .filter(|k| !facts.contains_key(*k))
            .collect();
        if !unused.is_empty() {
            return Err(format!(
                "{FACTS_PATH} has facts for fields not in the table: {unused:?}"
            ));
        }
        text
    };
    Ok(Output {
        table: render_table(&out, &kinds, &skipped)?,
        facts: facts_text,
    })
}

/// Go's JSON semantics of a field: what it writes when the protobuf message lacks the
/// field, and whether a present zero scalar is dropped.
fn go_semantics(fact: &GoField, ty: &PbType, card: PbCard) -> (&'static str, bool) {
    let nil = if fact.omitempty { "Omit" } else { "Null" };
    match (card, ty) {
        (PbCard::Repeated | PbCard::Map, _) => (nil, false),
        // []byte is a slice.
        (PbCard::Single, PbType::Bytes) => (nil, fact.omitempty),
        (PbCard::Single, PbType::Message(_)) if fact.pointer => (nil, false),
        // omitempty never drops a struct.
        (PbCard::Single, PbType::Message(_)) => ("Zero", false),
        (PbCard::Single, _) if fact.pointer => (nil, false),
        (PbCard::Single, _) if fact.omitempty => ("Omit", true),
        (PbCard::Single, _) => ("Zero", false),
    }
}

fn camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn static_name(full: &str) -> String {
    full.strip_prefix("k8s.io.")
        .unwrap_or(full)
        .replace('.', "_")
}

fn render_table(
    messages: &BTreeMap<String, OutMessage>,
    kinds: &[(Option<&'static str>, &'static str, String)],
    skipped: &[String],
) -> Result<String> {
    let mut out = String::new();
    out.push_str(
        "//! GENERATED by `cargo run -p konverge-protobuf --example generate`; do not edit.\n\
         //! From the k8s-pb prost sources (field numbers and types), the k8s-openapi schemas\n\
         //! (JSON names) and generator/go-fields.txt (Go pointer/omitempty/inline facts).\n",
    );
    if !skipped.is_empty() {
        out.push_str("//!\n//! Skipped (in k8s-pb, newer than the served API version):\n");
        for s in skipped {
            let _ = writeln!(out, "//! - {s}");
        }
    }
    out.push_str("\nuse crate::schema::{Absent, Card, Field, KindEntry, Message, Repr, Ty};\n\n");
    out.push_str(
        "/// The kinds request bodies may carry.\npub(crate) static KINDS: &[KindEntry] = &[\n",
    );
    for (api_version, kind, message) in kinds {
        let api_version = match api_version {
            Some(v) => format!("Some({v:?})"),
            None => "None".to_owned(),
        };
        let _ = writeln!(
            out,
            "    KindEntry {{ api_version: {api_version}, kind: {kind:?}, message: &{} }},",
            static_name(message)
        );
    }
    out.push_str("];\n\n");
    out.push_str("/// Every message in the table.\n#[allow(dead_code)]\npub(crate) static ALL: &[&Message] = &[\n");
    for name in messages.keys() {
        let _ = writeln!(out, "    &{},", static_name(name));
    }
    out.push_str("];\n");
    for (name, message) in messages {
        let _ = writeln!(
            out,
            "\npub(crate) static {}: Message = Message {{\n    name: {name:?},\n    repr: Repr::{:?},\n    fields: &[",
            static_name(name),
            message.repr
        );
        for field in &message.fields {
            let ty = match &field.ty {
                PbType::String => "Ty::String".to_owned(),
                PbType::Bool => "Ty::Bool".to_owned(),
                PbType::Int32 => "Ty::Int32".to_owned(),
                PbType::Int64 => "Ty::Int64".to_owned(),
                PbType::Double => "Ty::Double".to_owned(),
                PbType::Bytes => "Ty::Bytes".to_owned(),
                PbType::Message(target) => {
                    if !messages.contains_key(target) {
                        return Err(format!(
                            "{name}: field {} refers to missing {target}",
                            field.number
                        ));
                    }
                    format!("Ty::Message(&{})", static_name(target))
                }
            };
            let _ = writeln!(
                out,
                "        Field::new({}, {:?}, {ty}, Card::{:?}, Absent::{}, {}, {}),",
                field.number, field.json, field.card, field.absent, field.omit_zero, field.inline
            );
        }
        out.push_str("    ],\n};\n");
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Locating the inputs
// ---------------------------------------------------------------------------------------

/// The `src` directory of a dependency, from `cargo metadata` (falling back to the cargo
/// registry under `$CARGO_HOME`).
pub(crate) fn dependency_src(crate_dir: &Path, name: &str, version: &str) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(crate_dir)
        .output();
    if let Ok(output) = output
        && output.status.success()
        && let Ok(metadata) = serde_json::from_slice::<Value>(&output.stdout)
    {
        let found = metadata["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| {
                p["name"] == name
                    && p["version"]
                        .as_str()
                        .is_some_and(|v| v.starts_with(version))
            });
        if let Some(manifest) = found.and_then(|p| p["manifest_path"].as_str()) {
            let dir = Path::new(manifest)
                .parent()
                .ok_or("manifest without parent")?;
            return Ok(dir.join("src"));
        }
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("no CARGO_HOME")?;
    let registry = cargo_home.join("registry/src");
    for index in std::fs::read_dir(&registry).map_err(|e| format!("{registry:?}: {e}"))? {
        let index = index.map_err(|e| e.to_string())?.path();
        for entry in std::fs::read_dir(&index).map_err(|e| e.to_string())? {
            let path = entry.map_err(|e| e.to_string())?.path();
            let file = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if file.starts_with(&format!("{name}-{version}")) {
                return Ok(path.join("src"));
            }
        }
    }
    Err(format!("cannot find the sources of {name} {version}"))
}

/// The inputs for this crate, located from its manifest directory.
pub(crate) fn default_inputs(
    crate_dir: &Path,
    go_src: Option<PathBuf>,
    go_release: Option<String>,
) -> Result<Inputs> {
    Ok(Inputs {
        pb_src: dependency_src(crate_dir, "k8s-pb", "0.9")?,
        openapi_src: dependency_src(crate_dir, "k8s-openapi", "0.29")?,
        go_src,
        go_release,
        crate_dir: crate_dir.to_path_buf(),
    })
}
