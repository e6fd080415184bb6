//! Server-side printing: objects as `meta.k8s.io/v1` `Table`s (what `kubectl get` asks for)
//! and as `PartialObjectMetadata` (what metadata-only clients ask for).

use serde_json::{Value, json};

use crate::resources::ResourceType;

/// How much of each object a Table row carries (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

/// The object's metadata as a `PartialObjectMetadata`.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A `PartialObjectMetadataList` of objects.
pub fn partial_metadata_list(items: &[Value], list_metadata: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
    })
}

/// A `Table` of objects, with the resource's columns between NAME and AGE.
pub fn table(
    rt: &ResourceType,
    items: &[Value],
    list_metadata: Value,
    include: IncludeObject,
) -> Value {
    // Built-in kinds declare their whole table, Name included (not always first: Events);
    // custom resources declare what follows Name.
    let with_name = !rt.columns.iter().any(|c| c.name == "Name");
    let mut columns = Vec::new();
    if with_name {
        columns.push(json!({
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
            "priority": 0,
        }));
    }
    for column in &rt.columns {
        columns.push(json!({
            "name": column.name,
            "type": column.type_,
            "format": column.format,
            "description": column.description,
            "priority": column.priority,
        }));
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let mut cells = Vec::new();
            if with_name {
                cells.push(
                    obj.pointer("/metadata/name")
                        .cloned()
                        .unwrap_or_else(|| json!("")),
                );
            }
            cells.extend(rt.columns.iter().map(|c| c.cell(obj)));
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(obj),
                IncludeObject::Object => row["object"] = obj.clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// How old `obj` is, as the Age column shows it.
pub(crate) fn age(obj: &Value, now: jiff::Timestamp) -> String {
    let Some(created) = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return "<unknown>".into();
    };
    human_duration(now.as_second() - created.as_second())
}

/// kubectl's short human durations (`duration.HumanDuration`): `45s`, `5m10s`, `3h`, `2d5h`,
/// `120d`, `3y1d`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (seconds, text) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (20 * 86400, "20d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), text, "{seconds}");
        }
    }
}
