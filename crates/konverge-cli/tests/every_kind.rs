//! Real kubectl over one manifest of every built-in kind of Kubernetes 1.33: apply, the
//! `kubectl get` table, `-o yaml`, `explain`, a patch and a delete, for each.

mod common;

use common::{Up, write};

const MANIFEST: &str = include_str!("fixtures/every-kind.yaml");

/// Each kind of the manifest: the resource kubectl names it by, and its object.
fn objects() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for doc in MANIFEST.split("\n---\n") {
        let field = |key: &str| {
            doc.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let api_version = field("apiVersion:");
        let kind = field("kind:");
        let name = doc
            .lines()
            .find_map(|l| l.strip_prefix("metadata: {name: "))
            .map(|v| v.trim_end_matches('}').trim().to_string())
            .expect("every object is named");
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let resource = if group.is_empty() {
            kind.to_lowercase()
        } else {
            format!("{}.{group}", kind.to_lowercase())
        };
        out.push((resource, kind, name));
    }
    out
}

#[test]
fn every_built_in_kind_through_kubectl() {
    let up = Up::start();
    let file = write(up.dir.path(), "every-kind.yaml", MANIFEST);
    let applied = up.ok(&["apply", "-f", &file]);
    let objects = objects();
    assert_eq!(applied.lines().count(), objects.len(), "{applied}");
    assert!(objects.len() >= 50, "one object of every kind");
    for (resource, kind, name) in &objects {
        // The table kubectl prints (wide: an Event's name is a wide column): a header and
        // the object's row.
        let table = up.ok(&["get", resource, name, "-o", "wide"]);
        let mut lines = table.lines();
        let header = lines.next().unwrap_or_default();
        assert!(
            header.starts_with("NAME") || header.starts_with("LAST SEEN"),
            "{resource}: {table}"
        );
        assert!(table.contains(name.as_str()), "{resource}: {table}");
        // The object, as YAML, is the kind it was created as.
        let yaml = up.ok(&["get", resource, name, "-o", "yaml"]);
        assert!(
            yaml.contains(&format!("kind: {kind}")),
            "{resource}: {yaml}"
        );
        // A label patch lands.
        up.ok(&["label", resource, name, "checked=yes"]);
        let labelled = up.json(&["get", resource, name]);
        assert_eq!(
            labelled["metadata"]["labels"]["checked"], "yes",
            "{resource}"
        );
    }
    // explain reads the published schemas of the new kinds.
    for (resource, field) in [
        ("cronjob", "spec.schedule"),
        ("poddisruptionbudget", "spec.minAvailable"),
        ("ingress", "spec.rules"),
        ("horizontalpodautoscaler", "spec.metrics"),
        ("networkpolicy", "spec.podSelector"),
        ("priorityclass", "value"),
    ] {
        let explained = up.ok(&["explain", &format!("{resource}.{field}")]);
        assert!(explained.contains("FIELD:"), "{resource}: {explained}");
    }
    let deleted = up.ok(&["delete", "-f", &file]);
    assert_eq!(deleted.lines().count(), objects.len(), "{deleted}");
    for (resource, _, name) in &objects {
        let (_, out, err) = up.run(
            &["get", resource, name, "--ignore-not-found", "-o", "name"],
            None,
        );
        // Namespaces finish terminating in the background; everything else is gone at once.
        if resource != "namespace" {
            assert_eq!(out.trim(), "", "{resource} {name} still there: {err}");
        }
    }
}
