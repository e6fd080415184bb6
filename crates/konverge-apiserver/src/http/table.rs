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
