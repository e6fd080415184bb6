//! Pod volumes and volume mounts: one source per volume, the common sources' fields
//! (secret, config map, downward API, projected, host path, NFS, claim, CSI, ephemeral),
//! and mounts that name a valid volume.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::downward::{object_field_selector, resource_field_selector};
use super::*;
use crate::error::Cause;

/// The fields downward API volumes may take from the pod (sorted).
const VOLUME_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];

/// `validateDownwardAPIVolumeFile`, reported (as kube-apiserver does) on the source's path,
/// not the item's.
fn downward_api_file(file: &Value, at: &str, causes: &mut Vec<Cause>) {
    let target = file.get("path").and_then(Value::as_str).unwrap_or("");
    let path_at = format!("{at}.path");
    if target.is_empty() {
        causes.push(required(&path_at));
    }
    local_non_reserved_path(target, &path_at, causes);
    let field_ref = file.get("fieldRef").filter(|f| !f.is_null());
    let resource_ref = file.get("resourceFieldRef").filter(|f| !f.is_null());
    match (field_ref, resource_ref) {
        (Some(fs), resource) => {
            object_field_selector(fs, &format!("{at}.fieldRef"), VOLUME_FIELD_PATHS, causes);
            if resource.is_some() {
                causes.push(Cause::invalid(
                    at,
                    &json!("resource"),
                    "fieldRef and resourceFieldRef can not be specified simultaneously",
                ));
            }
        }
        (None, Some(fs)) => {
            resource_field_selector(fs, &format!("{at}.resourceFieldRef"), true, causes)
        }
        (None, None) => causes.push(required_because(
            at,
            "one of fieldRef and resourceFieldRef is required",
        )),
    }
    file_mode(file, "mode", at, causes);
}

/// `validateProjectionSources`: one kind per source, names, items, token lifetimes, and
/// no path twice.
fn projected_sources(projected: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut paths = BTreeSet::new();
    let mut claim = |path: &str, shown: &str, causes: &mut Vec<Cause>| {
        if !path.is_empty() && !paths.insert(path.to_string()) {
            // Reported on the projection, shown with the source's name or the path.
            causes.push(Cause::invalid(
                at,
                &json!(shown),
                "conflicting duplicate paths",
            ));
        }
    };
    for (i, source) in items(projected, "sources") {
        let source_at = format!("{at}.sources[{i}]");
        let mut kinds = 0;
        for kind in ["secret", "configMap"] {
            let Some(s) = source.get(kind).filter(|s| !s.is_null()) else {
                continue;
            };
            kinds += 1;
            let kind_at = format!("{source_at}.{kind}");
            require_str(s, "name", &kind_at, causes);
            let name = s.get("name").and_then(Value::as_str).unwrap_or("");
            for (j, item) in items(s, "items") {
                key_to_path(item, &format!("{kind_at}.items[{j}]"), causes);
                claim(
                    item.get("path").and_then(Value::as_str).unwrap_or(""),
                    name,
                    causes,
                );
            }
        }
        if let Some(d) = source.get("downwardAPI").filter(|s| !s.is_null()) {
            kinds += 1;
            for item in d
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                downward_api_file(item, &format!("{source_at}.downwardAPI"), causes);
                let path = item.get("path").and_then(Value::as_str).unwrap_or("");
                claim(path, path, causes);
            }
        }
        if let Some(token) = source.get("serviceAccountToken").filter(|s| !s.is_null()) {
            kinds += 1;
            let seconds = token
                .get("expirationSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let seconds_at = format!("{source_at}.serviceAccountToken.expirationSeconds");
            if seconds < 600 {
                causes.push(Cause::invalid(
                    &seconds_at,
                    &json!(seconds),
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if seconds > 1 << 32 {
                causes.push(Cause::invalid(
                    &seconds_at,
                    &json!(seconds),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
            // kube-apiserver reports the token's path on the projection.
            let path = token.get("path").and_then(Value::as_str).unwrap_or("");
            if path.is_empty() {
                causes.push(required(format!("{at}.path")));
            } else {
                local_non_reserved_path(path, &format!("{at}.path"), causes);
            }
        }
        if source
            .get("clusterTrustBundle")
            .is_some_and(|s| !s.is_null())
        {
            kinds += 1;
        }
        if kinds > 1 {
            causes.push(forbidden(
                source_at,
                "may not specify more than 1 volume type per source",
            ));
        }
    }
}

/// The sources a volume may have, in the order `validateVolumeSource` looks at them.
const VOLUME_SOURCES: &[&str] = &[
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
];

const FILE_MODE: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// `ValidateVolumes`: each volume's source and name. Returns the names of the volumes
/// without errors, the ones mounts may refer to.
pub(super) fn volumes(spec: &Value, path: &str, causes: &mut Vec<Cause>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, volume) in items(spec, "volumes") {
        let at = format!("{path}.volumes[{i}]");
        let mut problems = volume_source(volume, &at);
        let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            problems.push(required(format!("{at}.name")));
        } else {
            problems.extend(check_name(NameRule::Label, name, &format!("{at}.name")));
        }
        if names.contains(name) {
            problems.push(duplicate(format!("{at}.name"), &json!(name)));
        }
        if problems.is_empty() {
            names.insert(name.to_string());
        }
        causes.extend(problems);
    }
    names
}

/// `validateVolumeSource`: one source, and the common ones well formed.
fn volume_source(volume: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut found = false;
    for key in VOLUME_SOURCES {
        let Some(source) = volume.get(*key).filter(|s| !s.is_null()) else {
            continue;
        };
        if found && *key != "emptyDir" {
            // kube-apiserver misspells this one.
            let name = if *key == "downwardAPI" {
                "downwarAPI"
            } else {
                key
            };
            causes.push(forbidden(
                format!("{at}.{name}"),
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        found = true;
        let path = format!("{at}.{key}");
        match *key {
            "emptyDir" => causes.extend(
                quantity_value(source.get("sizeLimit"))
                    .is_some_and(|q| q < 0.0)
                    .then(|| {
                        forbidden(
                            format!("{path}.sizeLimit"),
                            "SizeLimit field must be a valid resource quantity",
                        )
                    }),
            ),
            "hostPath" => host_path(source, &path, &mut causes),
            "secret" | "configMap" => {
                let name = if *key == "secret" {
                    "secretName"
                } else {
                    "name"
                };
                require_str(source, name, &path, &mut causes);
                file_mode(source, "defaultMode", &path, &mut causes);
                for (j, item) in items(source, "items") {
                    key_to_path(item, &format!("{path}.items[{j}]"), &mut causes);
                }
            }
            "downwardAPI" => {
                file_mode(source, "defaultMode", &path, &mut causes);
                for item in source
                    .get("items")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    downward_api_file(item, &path, &mut causes);
                }
            }
            "projected" => {
                file_mode(source, "defaultMode", &path, &mut causes);
                projected_sources(source, &path, &mut causes);
            }
            "persistentVolumeClaim" => require_str(source, "claimName", &path, &mut causes),
            "nfs" => {
                require_str(source, "server", &path, &mut causes);
                require_str(source, "path", &path, &mut causes);
                let dir = source.get("path").and_then(Value::as_str).unwrap_or("");
                if !dir.starts_with('/') {
                    causes.push(Cause::invalid(
                        format!("{path}.path"),
                        &json!(dir),
                        "must be an absolute path",
                    ));
                }
            }
            "csi" => {
                let driver = source.get("driver").and_then(Value::as_str).unwrap_or("");
                let field = format!("{path}.driver");
                if driver.is_empty() {
                    causes.push(required(&field));
                }
                if driver.len() > 63 {
                    causes.push(too_long(&field, 63));
                }
                for problem in crate::resources::meta::name_problems(
                    NameRule::Subdomain,
                    &driver.to_lowercase(),
                ) {
                    causes.push(Cause::invalid(&field, &json!(driver), problem));
                }
            }
            "ephemeral" => causes.extend(
                source
                    .get("volumeClaimTemplate")
                    .is_none_or(Value::is_null)
                    .then(|| required(format!("{path}.volumeClaimTemplate"))),
            ),
            _ => {}
        }
    }
    if !found {
        causes.push(required_because(at, "must specify a volume type"));
    }
    causes
}

/// A string field of `obj` that must be set.
fn require_str(obj: &Value, field: &str, path: &str, causes: &mut Vec<Cause>) {
    if obj
        .get(field)
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(required(format!("{path}.{field}")));
    }
}

/// `validateHostPathVolumeSource`.
fn host_path(source: &Value, path: &str, causes: &mut Vec<Cause>) {
    let dir = source.get("path").and_then(Value::as_str).unwrap_or("");
    if dir.is_empty() {
        causes.push(required(format!("{path}.path")));
        return;
    }
    no_backsteps(dir, &format!("{path}.path"), causes);
    if let Some(kind) = source.get("type").and_then(Value::as_str) {
        const TYPES: &[&str] = &[
            "",
            "BlockDevice",
            "CharDevice",
            "Directory",
            "DirectoryOrCreate",
            "File",
            "FileOrCreate",
            "Socket",
        ];
        if !TYPES.contains(&kind) {
            causes.push(not_supported(format!("{path}.type"), kind, TYPES));
        }
    }
}

/// `validatePathNoBacksteps`.
fn no_backsteps(target: &str, path: &str, causes: &mut Vec<Cause>) {
    if target.split('/').any(|part| part == "..") {
        causes.push(Cause::invalid(
            path,
            &json!(target),
            "must not contain '..'",
        ));
    }
}

/// `ValidateLocalDescendingPath`: relative, without `..`.
pub(super) fn local_descending_path(target: &str, path: &str, causes: &mut Vec<Cause>) {
    if target.starts_with('/') {
        causes.push(Cause::invalid(
            path,
            &json!(target),
            "must be a relative path",
        ));
    }
    no_backsteps(target, path, causes);
}

/// A file mode (`defaultMode`, `mode`) is 0 to 0777.
fn file_mode(source: &Value, field: &str, path: &str, causes: &mut Vec<Cause>) {
    if let Some(mode) = source.get(field).and_then(Value::as_i64)
        && !(0..=0o777).contains(&mode)
    {
        causes.push(Cause::invalid(
            format!("{path}.{field}"),
            &json!(mode),
            FILE_MODE,
        ));
    }
}

/// `validateKeyToPath`: a secret's or config map's item.
fn key_to_path(item: &Value, path: &str, causes: &mut Vec<Cause>) {
    if item
        .get("key")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(required(format!("{path}.key")));
    }
    let target = item.get("path").and_then(Value::as_str).unwrap_or("");
    let at = format!("{path}.path");
    if target.is_empty() {
        causes.push(required(&at));
    }
    local_non_reserved_path(target, &at, causes);
    file_mode(item, "mode", path, causes);
}

/// `ValidateLocalNonReservedPath`: relative, without `..`, not starting with `..`.
fn local_non_reserved_path(target: &str, at: &str, causes: &mut Vec<Cause>) {
    local_descending_path(target, at, causes);
    if target.starts_with("..") && !target.starts_with("../") {
        causes.push(Cause::invalid(
            at,
            &json!(target),
            "must not start with '..'",
        ));
    }
}

/// `ValidateVolumeMounts`: each mount names a volume, at a path of its own.
pub(super) fn volume_mounts(
    c: &Value,
    at: &str,
    volumes: &BTreeSet<String>,
    causes: &mut Vec<Cause>,
) {
    let devices: Vec<(&str, &str)> = c
        .get("volumeDevices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|d| {
            (
                d.get("name").and_then(Value::as_str).unwrap_or(""),
                d.get("devicePath").and_then(Value::as_str).unwrap_or(""),
            )
        })
        .collect();
    let privileged = c.pointer("/securityContext/privileged") == Some(&json!(true));
    let mut mount_paths = BTreeSet::new();
    // kube-apiserver reports sub-paths, propagation and recursive read-only on the list,
    // without the mount's index.
    let list = format!("{at}.volumeMounts");
    for (j, mount) in items(c, "volumeMounts") {
        let path = format!("{list}[{j}]");
        let name = mount.get("name").and_then(Value::as_str).unwrap_or("");
        let target = mount.get("mountPath").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(required(format!("{path}.name")));
        }
        if !volumes.contains(name) {
            causes.push(not_found(format!("{path}.name"), name));
        }
        if target.is_empty() {
            causes.push(required(format!("{path}.mountPath")));
        }
        if !mount_paths.insert(target) {
            causes.push(Cause::invalid(
                format!("{path}.mountPath"),
                &json!(target),
                "must be unique",
            ));
        }
        if devices.iter().any(|(n, _)| *n == name) {
            causes.push(Cause::invalid(
                format!("{path}.name"),
                &json!(name),
                "must not already exist in volumeDevices",
            ));
        }
        if devices.iter().any(|(_, p)| *p == target) {
            causes.push(Cause::invalid(
                format!("{path}.mountPath"),
                &json!(target),
                "must not already exist as a path in volumeDevices",
            ));
        }
        let sub_path = mount.get("subPath").and_then(Value::as_str).unwrap_or("");
        if !sub_path.is_empty() {
            local_descending_path(sub_path, &format!("{list}.subPath"), causes);
        }
        let expr = mount
            .get("subPathExpr")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !expr.is_empty() {
            if !sub_path.is_empty() {
                causes.push(Cause::invalid(
                    format!("{path}.subPathExpr"),
                    &json!(expr),
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            local_descending_path(expr, &format!("{list}.subPathExpr"), causes);
        }
        let propagation = mount.get("mountPropagation").and_then(Value::as_str);
        if let Some(mode) = propagation {
            let at = format!("{list}.mountPropagation");
            if !matches!(mode, "Bidirectional" | "HostToContainer" | "None") {
                causes.push(not_supported(
                    &at,
                    mode,
                    &["Bidirectional", "HostToContainer", "None"],
                ));
            }
            if mode == "Bidirectional" && !privileged {
                causes.push(forbidden(
                    at,
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
        if let Some(mode) = mount.get("recursiveReadOnly").and_then(Value::as_str) {
            let at = format!("{list}.recursiveReadOnly");
            match mode {
                "Disabled" => {}
                "Enabled" | "IfPossible" => {
                    if mount.get("readOnly") != Some(&json!(true)) {
                        causes.push(forbidden(
                            &at,
                            "may only be specified when readOnly is true",
                        ));
                    }
                    if propagation.is_some_and(|p| p != "None") {
                        causes.push(forbidden(
                            &at,
                            "may only be specified when mountPropagation is None or not specified",
                        ));
                    }
                }
                other => causes.push(not_supported(
                    &at,
                    other,
                    &["Disabled", "Enabled", "IfPossible"],
                )),
            }
        }
    }
}
