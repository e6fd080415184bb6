//! The downward API's selectors, shared by env vars and downwardAPI volumes: which pod
//! fields (`validateObjectFieldSelector`) and container resources
//! (`validateContainerResourceFieldSelector`) a pod may expose to itself.

use serde_json::{Value, json};

use super::quantity;
use super::*;
use crate::error::Cause;

/// `SplitMaybeSubscriptedPath`: `metadata.labels['app']` is `metadata.labels` and `app`.
fn split_subscript(field_path: &str) -> Option<(&str, &str)> {
    let (path, subscript) = field_path.strip_suffix("']")?.split_once("['")?;
    (!path.is_empty()).then_some((path, subscript))
}

/// `validateObjectFieldSelector`: a field of the pod, as `ConvertDownwardAPIFieldLabel`
/// knows them, and one of `allowed` (or a label or annotation).
pub(super) fn object_field_selector(
    fs: &Value,
    at: &str,
    allowed: &[&str],
    causes: &mut Vec<Cause>,
) {
    let version = fs.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let field_path = fs.get("fieldPath").and_then(Value::as_str).unwrap_or("");
    if version.is_empty() {
        causes.push(required(format!("{at}.apiVersion")));
        return;
    }
    if field_path.is_empty() {
        causes.push(required(format!("{at}.fieldPath")));
        return;
    }
    const CONVERTIBLE: &[&str] = &[
        "metadata.annotations",
        "metadata.labels",
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.schedulerName",
        "status.phase",
        "status.hostIP",
        "status.hostIPs",
        "status.podIP",
        "status.podIPs",
    ];
    let converted = if version != "v1" {
        Err(format!("unsupported pod version: {version}"))
    } else if let Some((path, subscript)) = split_subscript(field_path) {
        match path {
            "metadata.annotations" | "metadata.labels" => Ok((path, Some(subscript))),
            _ => Err(format!(
                "field label does not support subscript: {field_path}"
            )),
        }
    } else if field_path == "spec.host" {
        Ok(("spec.nodeName", None))
    } else if CONVERTIBLE.contains(&field_path) {
        Ok((field_path, None))
    } else {
        Err(format!("field label not supported: {field_path}"))
    };
    match converted {
        Err(problem) => causes.push(Cause::invalid(
            format!("{at}.fieldPath"),
            &json!(field_path),
            format!("error converting fieldPath: {problem}"),
        )),
        Ok((path, Some(subscript))) => {
            // Annotation keys are taken in lower case.
            let key = match path {
                "metadata.annotations" => subscript.to_lowercase(),
                _ => subscript.to_string(),
            };
            for problem in konverge_apimachinery::selector::label_key_errors(&key) {
                causes.push(Cause::invalid(at, &json!(subscript), problem));
            }
        }
        Ok((path, None)) if !allowed.contains(&path) => {
            causes.push(not_supported(format!("{at}.fieldPath"), path, allowed));
        }
        Ok(_) => {}
    }
}

/// `validateContainerResourceFieldSelector`: a container's limit or request, a divisor
/// that suits it; volumes name the container.
pub(super) fn resource_field_selector(fs: &Value, at: &str, volume: bool, causes: &mut Vec<Cause>) {
    const RESOURCES: &[&str] = &[
        "limits.cpu",
        "limits.ephemeral-storage",
        "limits.memory",
        "requests.cpu",
        "requests.ephemeral-storage",
        "requests.memory",
    ];
    let resource = fs.get("resource").and_then(Value::as_str).unwrap_or("");
    let container = fs
        .get("containerName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if volume && container.is_empty() {
        causes.push(required(format!("{at}.containerName")));
    } else if resource.is_empty() {
        causes.push(required(format!("{at}.resource")));
    } else if !RESOURCES.contains(&resource)
        && !resource.starts_with("limits.hugepages-")
        && !resource.starts_with("requests.hugepages-")
    {
        causes.push(not_supported(format!("{at}.resource"), resource, RESOURCES));
    }
    // `validateContainerResourceDivisor`: shown with the resource, not the divisor.
    let divisor = fs.get("divisor").and_then(quantity::parse);
    if let Some(divisor) = divisor.filter(|d| d.nanos != 0) {
        const SIZES: &[&str] = &[
            "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
        ];
        let problem = match resource {
            "limits.cpu" | "requests.cpu" if !matches!(divisor.canonical.as_str(), "1m" | "1") => {
                Some("only divisor's values 1m and 1 are supported with the cpu resource")
            }
            "limits.memory" | "requests.memory" if !SIZES.contains(&divisor.canonical.as_str()) => {
                Some(
                    "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource",
                )
            }
            "limits.ephemeral-storage" | "requests.ephemeral-storage"
                if !SIZES.contains(&divisor.canonical.as_str()) =>
            {
                Some(
                    "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the local ephemeral storage resource",
                )
            }
            _ => None,
        };
        if let Some(problem) = problem {
            causes.push(Cause::invalid(
                format!("{at}.divisor"),
                &json!(resource),
                problem,
            ));
        }
    }
}
