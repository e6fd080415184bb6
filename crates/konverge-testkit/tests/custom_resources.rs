//! Custom resources through kube::Client, as an operator uses them on a real cluster:
//! `#[derive(CustomResource)]` types, their definition established, objects created,
//! applied (server-side, status too), listed, watched, validated and deleted.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konverge_testkit::TestEnv;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "konverge.test",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd",
    category = "all",
    printcolumn = r#"{"name":"Size", "type":"integer", "jsonPath":".spec.size"}"#,
    scale = r#"{"specReplicasPath":".spec.size", "statusReplicasPath":".status.size"}"#
)]
struct WidgetSpec {
    #[schemars(length(min = 3))]
    name: String,
    #[schemars(range(max = 10))]
    size: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    color: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
struct WidgetStatus {
    ready: bool,
    #[serde(default)]
    size: i32,
}

async fn established(env: &TestEnv, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let name = crd.name_any();
    crds.create(&PostParams::default(), &crd).await?;
    let ready = await_condition(crds, &name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(5), ready).await??;
    Ok(())
}

fn widget(name: &str, size: i32) -> Widget {
    Widget::new(
        name,
        WidgetSpec {
            name: format!("widget-{name}"),
            size,
            color: None,
        },
    )
}

#[tokio::test]
async fn derived_custom_resources_work_through_kube_client() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, Widget::crd()).await?;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");

    // Create, get, list.
    let created = widgets
        .create(&PostParams::default(), &widget("a", 1))
        .await?;
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(widgets.get("a").await?.spec, widget("a", 1).spec);
    assert_eq!(widgets.list(&ListParams::default()).await?.items.len(), 1);

    // Server-side apply creates, and records the manager.
    let ssa = PatchParams::apply("widget-controller");
    let applied = widgets
        .patch(
            "b",
            &ssa,
            &Patch::Apply(json!({
                "apiVersion": "konverge.test/v1",
                "kind": "Widget",
                "metadata": {"name": "b"},
                "spec": {"name": "widget-b", "size": 2},
            })),
        )
        .await?;
    assert_eq!(applied.spec.size, 2);
    let managers: Vec<_> = applied
        .managed_fields()
        .iter()
        .map(|m| (m.manager.clone(), m.operation.clone()))
        .collect();
    assert_eq!(
        managers,
        vec![(Some("widget-controller".into()), Some("Apply".into()))]
    );

    // Status through its subresource, applied: generation does not move.
    let with_status = widgets
        .patch_status(
            "b",
            &ssa,
            &Patch::Apply(json!({
                "apiVersion": "konverge.test/v1",
                "kind": "Widget",
                "metadata": {"name": "b"},
                "status": {"ready": true, "size": 2},
            })),
        )
        .await?;
    assert_eq!(
        with_status.status,
        Some(WidgetStatus {
            ready: true,
            size: 2
        })
    );
    assert_eq!(with_status.metadata.generation, Some(1));
    let status_entry = with_status
        .managed_fields()
        .iter()
        .find(|m| m.subresource.as_deref() == Some("status"))
        .expect("a status entry");
    assert_eq!(status_entry.manager.as_deref(), Some("widget-controller"));

    // A spec change bumps generation.
    let mut changed = widgets.get("b").await?;
    changed.spec.size = 3;
    let replaced = widgets
        .replace("b", &PostParams::default(), &changed)
        .await?;
    assert_eq!(replaced.metadata.generation, Some(2));

    // Watch sees a change.
    let stream = watcher(widgets.clone(), watcher::Config::default()).applied_objects();
    let mut stream = Box::pin(stream);
    let first = tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await??;
    assert!(first.is_some());
    widgets
        .create(&PostParams::default(), &widget("c", 4))
        .await?;
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(w) = stream.next().await {
            if w?.name_any() == "c" {
                return anyhow::Ok(true);
            }
        }
        Ok(false)
    })
    .await??;
    assert!(seen);

    // Delete.
    widgets.delete("a", &DeleteParams::default()).await?;
    assert!(widgets.get_opt("a").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn the_schema_rejects_bad_objects_with_kubernetes_wording() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, Widget::crd()).await?;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    let mut bad = widget("short", 11);
    bad.spec.name = "ab".into();
    let err = widgets
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("invalid");
    let kube::Error::Api(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert!(
        status.message.contains(
            "spec.name: Invalid value: \"ab\": spec.name in body should be at least 3 chars long"
        ),
        "{}",
        status.message
    );
    assert!(
        status.message.contains(
            "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
        ),
        "{}",
        status.message
    );
    // Nothing was stored.
    assert!(widgets.get_opt("short").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn apply_conflicts_name_each_field_and_manager() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, Widget::crd()).await?;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    let config = |size: i32, color: &str| {
        Patch::Apply(json!({
            "apiVersion": "konverge.test/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"name": "widget-w", "size": size, "color": color},
        }))
    };
    widgets
        .patch("w", &PatchParams::apply("alice"), &config(1, "red"))
        .await?;
    // Same values: shared ownership, no conflict.
    widgets
        .patch("w", &PatchParams::apply("bob"), &config(1, "red"))
        .await?;
    let err = widgets
        .patch("w", &PatchParams::apply("carol"), &config(2, "blue"))
        .await
        .expect_err("conflict");
    let kube::Error::Api(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert!(
        status.message.starts_with("Apply failed with 4 conflicts"),
        "{}",
        status.message
    );
    // Forced: carol takes the fields.
    let forced = widgets
        .patch(
            "w",
            &PatchParams::apply("carol").force(),
            &config(2, "blue"),
        )
        .await?;
    assert_eq!(forced.spec.size, 2);
    assert_eq!(forced.spec.color.as_deref(), Some("blue"));
    // Carol stops applying color, which only she owns since she forced it: it is removed.
    widgets
        .patch(
            "w",
            &PatchParams::apply("carol"),
            &Patch::Apply(json!({
                "apiVersion": "konverge.test/v1",
                "kind": "Widget",
                "metadata": {"name": "w"},
                "spec": {"name": "widget-w", "size": 2},
            })),
        )
        .await?;
    assert_eq!(widgets.get("w").await?.spec.color, None);
    Ok(())
}

#[tokio::test]
async fn deleting_the_definition_deletes_its_objects() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, Widget::crd()).await?;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    for name in ["x", "y"] {
        widgets
            .create(&PostParams::default(), &widget(name, 1))
            .await?;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let uid = crds
        .get("widgets.konverge.test")
        .await?
        .uid()
        .expect("a uid");
    crds.delete("widgets.konverge.test", &DeleteParams::default())
        .await?;
    let gone = await_condition(crds, "widgets.konverge.test", conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(10), gone).await??;
    // The resource is no longer served, and nothing of it is stored.
    assert!(widgets.list(&ListParams::default()).await.is_err());
    let stored = env
        .store()
        .range(konverge_store::RangeRequest::new(
            konverge_store::KeyRange::prefix("/registry/konverge.test/widgets/"),
        ))
        .await?;
    assert!(stored.kvs.is_empty());
    Ok(())
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(group = "konverge.test", version = "v1", kind = "Cluster")]
struct ClusterSpec {
    region: String,
}

#[tokio::test]
async fn cluster_scoped_resources_and_apply_options() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, Cluster::crd()).await?;
    let clusters: Api<Cluster> = Api::all(env.client());
    let config = json!({
        "apiVersion": "konverge.test/v1",
        "kind": "Cluster",
        "metadata": {"name": "east"},
        "spec": {"region": "us-east-1"},
    });
    let applied = clusters
        .patch("east", &PatchParams::apply("ops"), &Patch::Apply(&config))
        .await?;
    assert_eq!(applied.metadata.namespace, None);
    assert_eq!(clusters.list(&ListParams::default()).await?.items.len(), 1);

    // An apply without a field manager is refused, as kube-apiserver refuses it.
    let err = clusters
        .patch("east", &PatchParams::default(), &Patch::Apply(&config))
        .await
        .expect_err("no field manager");
    let kube::Error::Api(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );

    // Unknown fields are dropped with a Warning header by default (fieldValidation=Warn).
    let body = serde_json::to_vec(&json!({
        "apiVersion": "konverge.test/v1",
        "kind": "Cluster",
        "metadata": {"name": "west"},
        "spec": {"region": "us-west-2", "zone": "b"},
    }))?;
    let request = http::Request::post("/apis/konverge.test/v1/clusters")
        .header("content-type", "application/json")
        .body(body)?;
    let response = env
        .client()
        .send(request.map(kube::client::Body::from))
        .await?;
    assert_eq!(response.status(), 201);
    let warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(String::from))
        .collect();
    assert_eq!(
        warnings,
        vec![r#"299 - "unknown field \"spec.zone\"""#.to_string()]
    );
    let west = clusters.get("west").await?;
    assert_eq!(west.spec.region, "us-west-2");
    Ok(())
}

/// `Widget::crd()` with `selectableFields` on its version.
fn selectable_widgets(fields: &[&str]) -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(Widget::crd())?;
    crd["spec"]["versions"][0]["selectableFields"] = fields
        .iter()
        .map(|path| json!({"jsonPath": path}))
        .collect();
    Ok(serde_json::from_value(crd)?)
}

#[tokio::test]
async fn selectable_fields_filter_lists_and_watches() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, selectable_widgets(&[".spec.color", ".spec.size"])?).await?;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    for (name, color, size) in [
        ("a", Some("blue"), 1),
        ("b", Some("red"), 2),
        ("c", None, 2),
    ] {
        let mut w = widget(name, size);
        w.spec.color = color.map(String::from);
        widgets.create(&PostParams::default(), &w).await?;
    }
    let names = |fields: &str| {
        let widgets = widgets.clone();
        let params = ListParams::default().fields(fields);
        async move {
            let listed = widgets.list(&params).await?;
            anyhow::Ok(listed.iter().map(ResourceExt::name_any).collect::<Vec<_>>())
        }
    };
    assert_eq!(names("spec.color=blue").await?, ["a"]);
    assert_eq!(names("spec.color!=blue").await?, ["b", "c"]);
    // An absent field selects as the empty string; integers as their decimal text.
    assert_eq!(names("spec.color=").await?, ["c"]);
    assert_eq!(names("spec.size=2,metadata.name!=b").await?, ["c"]);

    // A watch with the selector sees an object arrive when it starts to match.
    let stream = watcher(
        widgets.clone(),
        watcher::Config::default().fields("spec.color=green"),
    )
    .applied_objects();
    let mut stream = Box::pin(stream);
    widgets
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "green"}})),
        )
        .await?;
    let seen = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await??
        .expect("an object");
    assert_eq!(seen.name_any(), "b");

    // Fields that are not selectable are refused as kube-apiserver refuses them for custom
    // resources.
    let err = widgets
        .list(&ListParams::default().fields("spec.name=widget-a"))
        .await
        .expect_err("not selectable");
    let kube::Error::Api(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (400, "field label not supported: spec.name")
    );
    Ok(())
}

#[tokio::test]
async fn bad_selectable_fields_are_refused_with_kubernetes_wording() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let crd = selectable_widgets(&[
        ".metadata.name",
        ".spec.missing",
        ".spec",
        ".spec.color",
        ".spec.color",
        ".spec['color']",
        "",
    ])?;
    let err = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect_err("invalid");
    let kube::Error::Api(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let at = "spec.versions[0].selectableFields";
    for expected in [
        format!(
            r#"{at}[0].jsonPath: Invalid value: ".metadata.name": is an invalid path: does not refer to a valid field"#
        ),
        format!(
            r#"{at}[1].jsonPath: Invalid value: ".spec.missing": is an invalid path: does not refer to a valid field"#
        ),
        format!(
            r#"{at}[2].jsonPath: Invalid value: ".spec": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."#
        ),
        format!(r#"{at}[4].jsonPath: Duplicate value: ".spec.color""#),
        format!(
            r#"{at}[5].jsonPath: Invalid value: ".spec['color']": is an invalid path: array notation is not allowed"#
        ),
        format!("{at}[6].jsonPath: Required value"),
    ] {
        assert!(
            status.message.contains(&expected),
            "{expected}\nnot in\n{}",
            status.message
        );
    }
    assert!(crds.get_opt(&crd.name_any()).await?.is_none());

    // More than eight distinct fields.
    let mut crd = serde_json::to_value(Widget::crd())?;
    let props = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    let mut paths = Vec::new();
    for i in 0..9 {
        props[format!("f{i}")] = json!({"type": "string"});
        paths.push(json!({"jsonPath": format!(".spec.f{i}")}));
    }
    crd["spec"]["versions"][0]["selectableFields"] = json!(paths);
    let crd: CustomResourceDefinition = serde_json::from_value(crd)?;
    let err = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect_err("too many");
    let kube::Error::Api(status) = err else {
        panic!("not a status: {err}")
    };
    assert!(
        status
            .message
            .contains("spec.versions[0].selectableFields: Too many: 9: must have at most 8 items"),
        "{}",
        status.message
    );
    Ok(())
}

#[tokio::test]
async fn schema_defaults_apply_to_objects_stored_before_them() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, Widget::crd()).await?;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    widgets
        .create(&PostParams::default(), &widget("old", 1))
        .await?;
    assert_eq!(widgets.get("old").await?.spec.color, None);

    // The definition gains a default: objects stored before read with it, as they do from
    // kube-apiserver (which defaults what it decodes from storage).
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let patch = json!([{
        "op": "add",
        "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/color/default",
        "value": "blue",
    }]);
    crds.patch(
        &Widget::crd().name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(patch)?),
    )
    .await?;
    let mut color = None;
    for _ in 0..200 {
        color = widgets.get("old").await?.spec.color;
        if color.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(color.as_deref(), Some("blue"));
    let listed = widgets.list(&ListParams::default()).await?;
    assert_eq!(listed.items[0].spec.color.as_deref(), Some("blue"));
    let first = tokio::time::timeout(
        Duration::from_secs(5),
        Box::pin(watcher(widgets.clone(), watcher::Config::default()).applied_objects()).try_next(),
    )
    .await??
    .expect("an object");
    assert_eq!(first.spec.color.as_deref(), Some("blue"));

    // Reading does not write: the stored object is unchanged until something updates it.
    let stored = env
        .store()
        .range(konverge_store::RangeRequest::new(
            konverge_store::KeyRange::key(b"/registry/konverge.test/widgets/default/old".to_vec()),
        ))
        .await?;
    let stored: serde_json::Value = serde_json::from_slice(&stored.kvs[0].value)?;
    assert!(stored["spec"].get("color").is_none(), "{stored}");
    Ok(())
}

#[tokio::test]
async fn custom_resources_are_json_even_for_protobuf_clients() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    established(&env, Widget::crd()).await?;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await?;
    let path = "/apis/konverge.test/v1/namespaces/default/widgets/w";
    // Protobuf preferred, JSON acceptable: JSON, as kube-apiserver answers for custom
    // resources.
    let request = http::Request::get(path)
        .header(
            "accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )
        .body(Vec::new())?;
    let text = env.client().request_text(request).await?;
    assert!(text.starts_with('{'), "{text}");
    // Protobuf only: 406 with kube-apiserver's words.
    let request = http::Request::get(path)
        .header("accept", "application/vnd.kubernetes.protobuf")
        .body(Vec::new())?;
    match env.client().request_text(request).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 406);
            assert_eq!(
                status.message,
                "only the following media types are accepted: application/json, application/yaml"
            );
        }
        other => panic!("expected 406, got {other:?}"),
    }
    Ok(())
}

/// A definition whose rules do not type-check, or could cost too much, is refused as
/// kube-apiserver refuses it: at the path its one shared schema is kept under
/// (`spec.validation`), in cel-go's words.
#[tokio::test]
async fn rules_are_type_checked_and_costed_when_a_definition_is_written() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let with_rules = |rules: serde_json::Value, extra: serde_json::Value| -> anyhow::Result<_> {
        let mut crd = serde_json::to_value(Widget::crd())?;
        let spec =
            &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        spec["x-kubernetes-validations"] = rules;
        if let Some(extra) = extra.as_object() {
            for (k, v) in extra {
                spec["properties"][k] = v.clone();
            }
        }
        Ok(serde_json::from_value::<CustomResourceDefinition>(crd)?)
    };
    let refused = |crd: CustomResourceDefinition| {
        let crds = crds.clone();
        async move {
            match crds.create(&PostParams::default(), &crd).await {
                Err(kube::Error::Api(status)) => {
                    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
                    status.message
                }
                other => panic!("not refused: {other:?}"),
            }
        }
    };
    let at = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
    let message = refused(with_rules(json!([{"rule": "self.sise <= 10"}]), json!({}))?).await;
    assert_eq!(
        message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"widgets.konverge.test\" is invalid: {at}: Invalid value: apiextensions.ValidationRule{{Rule:\"self.sise <= 10\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: compilation failed: ERROR: <input>:1:5: undefined field 'sise'\n | self.sise <= 10\n | ....^"
        )
    );
    let message = refused(with_rules(
        json!([{"rule": "self.tags.all(a, self.tags.all(b, a == b || a != b))"}]),
        json!({"tags": {"type": "array", "items": {"type": "string"}}}),
    )?)
    .await;
    assert!(
        message.contains(&format!(
            "{at}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x"
        )),
        "{message}"
    );
    // Bounded, the same rule is taken, and runs.
    let crd = with_rules(
        json!([{"rule": "self.tags.all(a, self.tags.exists_one(b, a == b))", "message": "tags must be unique"}]),
        json!({"tags": {"type": "array", "maxItems": 8, "items": {"type": "string", "maxLength": 16}}}),
    )?;
    established(&env, crd).await?;
    // A typed Widget has no tags: write it as a dynamic object.
    let resource = kube::api::ApiResource::erase::<Widget>(&());
    let widgets: Api<kube::api::DynamicObject> =
        Api::default_namespaced_with(env.client(), &resource);
    let mut w = serde_json::to_value(widget("w", 1))?;
    w["spec"]["tags"] = json!(["a", "a"]);
    let err = widgets
        .create(&PostParams::default(), &serde_json::from_value(w.clone())?)
        .await
        .expect_err("duplicate tags");
    assert!(
        err.to_string()
            .contains("spec: Invalid value: \"object\": tags must be unique"),
        "{err}"
    );
    w["spec"]["tags"] = json!(["a", "b"]);
    widgets
        .create(&PostParams::default(), &serde_json::from_value(w)?)
        .await?;
    Ok(())
}
