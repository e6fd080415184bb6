//! kube-apiserver's API Priority and Fairness controllers, which run in every server:
//!
//! - the config producer (`priority-and-fairness-config-producer`): every minute, the
//!   bootstrap priority levels and FlowSchemas ([`crate::flowcontrol::bootstrap`]) that are
//!   missing are created again; the mandatory ones (`exempt`, `catch-all`) have their spec put
//!   back whatever a client did (but `exempt`'s shares and lendable percent), the suggested
//!   ones only while their `apf.kubernetes.io/autoupdate-spec` annotation says `true` (or,
//!   without one, while nobody changed them: generation 1); and objects carrying the
//!   annotation `true` that the server no longer ships are deleted. (The bootstrap creates
//!   them at start, [`super::bootstrap`].)
//! - the config consumer's status writes (`priority-and-fairness-config-consumer`): before
//!   the server serves when the bootstrap made FlowSchemas ([`settle`]), right after it
//!   serves when it found them all, and whenever a FlowSchema or priority level changes,
//!   each FlowSchema gets a `Dangling` condition
//!   saying whether its priority level exists, by server-side apply of that condition alone,
//!   as kube's controller writes it. A FlowSchema written more than five times in a minute
//!   waits 30 seconds, as in kube, so two servers that disagree do not write forever.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use konverge_store::{KeyRange, WatchRequest, WatchResponse};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::bootstrap;
use crate::error::{ApiError, Reason};
use crate::flowcontrol::{
    AUTO_UPDATE_ANNOTATION, CONSUMER, Config, EXEMPT, GROUP, PRODUCER, bootstrap,
};
use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions};
use crate::resources::ResourceType;

/// How often the producer ensures the bootstrap objects (kube's period).
const ENSURE_PERIOD: Duration = Duration::from_secs(60);

/// How long the consumer waits after a change before writing, so a burst is one pass.
const SETTLE: Duration = Duration::from_millis(20);

/// A FlowSchema's status written more than this many times in [`RATE_WINDOW`] waits.
const MAX_WRITES: usize = 5;
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// How long it waits (kube: 30 to 75 seconds, chosen at random).
const RATE_DELAY: Duration = Duration::from_secs(30);

/// The two resources, if served.
fn resources(registry: &Registry) -> Option<(Arc<ResourceType>, Arc<ResourceType>)> {
    let catalog = registry.catalog();
    Some((
        catalog.get(GROUP, "v1", "prioritylevelconfigurations")?,
        catalog.get(GROUP, "v1", "flowschemas")?,
    ))
}

/// The consumer's first pass, before the server serves, when the bootstrap made FlowSchemas:
/// they get their conditions now, written at once, so a client's first requests (an
/// admission webhook registered at once) never meet these writes. When it found them all
/// ([`bootstrap::Bootstrapped::Found`]) there is nothing to do: [`run`]'s first pass, right
/// after, writes what changed while no server ran. On a new store, what it wrote is
/// remembered for later new stores of this process
/// ([`bootstrap::remember_settled`]), which then hold the conditions from the start and
/// skip it.
pub(crate) async fn settle(registry: &Registry, bootstrapped: bootstrap::Bootstrapped) -> Settled {
    let mut recent = Recent::default();
    // A store written before holds the conditions its last server wrote; what changed since
    // is looked at by the loop's first pass, after the server serves.
    let resources = resources(registry)
        .filter(|_| bootstrapped != bootstrap::Bootstrapped::Found && !bootstrapped.passed());
    let Some((levels, schemas)) = resources else {
        return Settled {
            recent,
            again: None,
        };
    };
    let mut pass = bootstrap::Pass::new(vec![levels.clone(), schemas.clone()]);
    let again = write_conditions(registry, &levels, &schemas, &mut recent, &mut pass).await;
    if !bootstrapped.written_before() && again.is_none() {
        bootstrap::remember_settled(registry, &pass, bootstrap::Keep::Created);
    }
    Settled { recent, again }
}

/// What [`settle`] left for [`run`]: the writes it made, and when to look again if one had
/// to wait or failed.
#[derive(Debug)]
pub(crate) struct Settled {
    recent: Recent,
    again: Option<Instant>,
}

/// Runs the producer and the consumer's status writes until the store closes, from where
/// [`settle`] left them.
pub(crate) async fn run(registry: Registry, settled: Settled) {
    let Some((levels, schemas)) = resources(&registry) else {
        return;
    };
    let Settled {
        mut recent,
        mut again,
    } = settled;
    loop {
        match run_once(&registry, &levels, &schemas, &mut recent, again.take()).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "flow control controllers restarting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn run_once(
    registry: &Registry,
    levels: &Arc<ResourceType>,
    schemas: &Arc<ResourceType>,
    recent: &mut Recent,
    due: Option<Instant>,
) -> Result<(), konverge_store::Error> {
    let store = registry.store();
    let from = store.current_revision().await? + 1;
    let watch = |rt: &ResourceType| {
        WatchRequest::new(KeyRange::prefix(Bytes::from(rt.storage_prefix()))).from_revision(from)
    };
    let mut level_events = store.watch(watch(levels)).await?;
    let mut schema_events = store.watch(watch(schemas)).await?;
    // What changed since `settle` (or since a restart of these watches) is looked at
    // once the watches run: the first pass may have missed it.
    let mut due = Some(due.unwrap_or_else(|| Instant::now() + SETTLE));
    let mut ensure = tokio::time::interval_at(Instant::now() + ENSURE_PERIOD, ENSURE_PERIOD);
    loop {
        let wake = due.unwrap_or_else(|| Instant::now() + ENSURE_PERIOD);
        let changed = tokio::select! {
            message = level_events.recv() => message,
            message = schema_events.recv() => message,
            _ = ensure.tick() => {
                if let Err(e) = ensure_bootstrap(registry, levels, schemas).await {
                    tracing::warn!(error = %e, "ensuring the flow control bootstrap objects failed");
                }
                continue;
            }
            _ = tokio::time::sleep_until(wake), if due.is_some() => {
                let mut pass = bootstrap::Pass::new(Vec::new());
                due = write_conditions(registry, levels, schemas, recent, &mut pass).await;
                continue;
            }
        };
        match changed {
            Some(Ok(WatchResponse::Events(events))) if !events.is_empty() => {
                let soon = Instant::now() + SETTLE;
                due = Some(due.map_or(soon, |due| due.min(soon)));
            }
            Some(Ok(_)) => {}
            Some(Err(konverge_store::Error::Closed)) | None => return Ok(()),
            Some(Err(e)) => return Err(e),
        }
    }
}

/// When each FlowSchema's status was last written, newest first.
#[derive(Debug, Default)]
struct Recent {
    writes: HashMap<String, VecDeque<Instant>>,
}

impl Recent {
    /// Whether `schema` was written too often lately to be written now.
    fn too_often(&mut self, schema: &str, now: Instant) -> bool {
        let Some(times) = self.writes.get_mut(schema) else {
            return false;
        };
        times.retain(|at| now.duration_since(*at) < RATE_WINDOW);
        times.len() > MAX_WRITES
    }

    fn wrote(&mut self, schema: &str, now: Instant) {
        self.writes
            .entry(schema.to_string())
            .or_default()
            .push_back(now);
    }
}

/// Lists `rt`'s objects, typed.
async fn listed<T: serde::de::DeserializeOwned>(
    registry: &Registry,
    rt: &ResourceType,
) -> Result<Vec<T>, ApiError> {
    let listed = registry.list(rt, None, &ListOptions::default()).await?;
    Ok(listed
        .items
        .iter()
        .filter_map(|item| T::deserialize(item.as_ref()).ok())
        .collect())
}

/// Writes the `Dangling` condition of every FlowSchema whose condition is not as it should
/// be; when one had to wait or failed, the time to look again. What it read and wrote is
/// told to `pass`.
async fn write_conditions(
    registry: &Registry,
    levels_rt: &Arc<ResourceType>,
    schemas_rt: &Arc<ResourceType>,
    recent: &mut Recent,
    pass: &mut bootstrap::Pass,
) -> Option<Instant> {
    let read = async {
        let levels: Vec<PriorityLevelConfiguration> = listed(registry, levels_rt).await?;
        let schemas: Vec<FlowSchema> = listed(registry, schemas_rt).await?;
        Ok::<_, ApiError>((levels, schemas))
    };
    let config = match read.await {
        Ok((levels, schemas)) => {
            let key = |rt: &ResourceType, metadata: &ObjectMeta| {
                rt.key(None, metadata.name.as_deref().unwrap_or_default())
            };
            pass.listed
                .extend(levels.iter().map(|l| key(levels_rt, &l.metadata)));
            pass.listed
                .extend(schemas.iter().map(|s| key(schemas_rt, &s.metadata)));
            Config::digest(&levels, &schemas)
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the flow control configuration failed");
            pass.failed = true;
            return Some(Instant::now() + Duration::from_secs(1));
        }
    };
    let mut again = None;
    let now = Instant::now();
    let options = WriteOptions {
        field_manager: Some(CONSUMER.to_string()),
        ..WriteOptions::default()
    };
    let mut writes = Vec::new();
    for wanted in config.dangling().iter().filter(|d| !d.current) {
        if recent.too_often(&wanted.flow_schema, now) {
            again = Some(now + RATE_DELAY);
            continue;
        }
        recent.wrote(&wanted.flow_schema, now);
        let condition = json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "FlowSchema",
            "metadata": {"name": wanted.flow_schema},
            "status": {"conditions": [{
                "type": "Dangling",
                "status": wanted.status,
                "lastTransitionTime": crate::resources::meta::now(),
                "reason": wanted.reason,
                "message": wanted.message,
            }]},
        });
        let options = &options;
        writes.push(async move {
            let written = registry
                .apply(
                    schemas_rt,
                    None,
                    &wanted.flow_schema,
                    Some("status"),
                    condition,
                    options,
                    true,
                )
                .await;
            (&wanted.flow_schema, written)
        });
    }
    // Written together: a disk store commits writes that arrive together at once.
    for (schema, written) in futures::future::join_all(writes).await {
        match written {
            // Deleted meanwhile: its deletion is a change, looked at next.
            Err(e) if e.reason == Reason::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, flow_schema = %schema, "writing a FlowSchema's condition failed");
                pass.failed = true;
                again.get_or_insert(now + Duration::from_secs(1));
            }
            Ok(written) => pass.written.push((schemas_rt.clone(), written.object)),
        }
    }
    again
}

/// One pass of the producer: missing bootstrap objects created, those kept by the server
/// brought back to its spec, and those it no longer ships deleted.
async fn ensure_bootstrap(
    registry: &Registry,
    levels: &ResourceType,
    schemas: &ResourceType,
) -> Result<(), ApiError> {
    let boot = bootstrap();
    let create = WriteOptions {
        field_manager: Some(PRODUCER.to_string()),
        ..WriteOptions::default()
    };
    let mut stored: [BTreeMap<String, Arc<Value>>; 2] = [BTreeMap::new(), BTreeMap::new()];
    for (i, rt) in [levels, schemas].into_iter().enumerate() {
        for item in registry
            .list(rt, None, &ListOptions::default())
            .await?
            .items
        {
            let name = crate::resources::meta::meta_str(&item, "name")
                .unwrap_or_default()
                .to_string();
            stored[i].insert(name, item);
        }
    }
    for (i, rt, list, mandatory) in [
        (0, levels, &boot.suggested_priority_levels, false),
        (1, schemas, &boot.suggested_flow_schemas, false),
        (0, levels, &boot.mandatory_priority_levels, true),
        (1, schemas, &boot.mandatory_flow_schemas, true),
    ] {
        for wanted in list {
            let name = crate::resources::meta::meta_str(wanted, "name").unwrap_or_default();
            let result = match stored[i].get(name) {
                None => registry
                    .create(rt, None, wanted.clone(), &create)
                    .await
                    .map(drop),
                Some(current) => match updated(current, wanted, mandatory) {
                    Some(object) => registry
                        .update(rt, None, name, object, None, &create)
                        .await
                        .map(drop),
                    None => Ok(()),
                },
            };
            match result {
                // Changed meanwhile (by a client, or another server): the next pass sees it.
                Err(e) if matches!(e.reason, Reason::AlreadyExists | Reason::Conflict) => {}
                other => other?,
            }
        }
    }
    for (i, rt, shipped) in [
        (
            0,
            levels,
            [
                &boot.suggested_priority_levels,
                &boot.mandatory_priority_levels,
            ],
        ),
        (
            1,
            schemas,
            [&boot.suggested_flow_schemas, &boot.mandatory_flow_schemas],
        ),
    ] {
        for (name, current) in &stored[i] {
            let shipped_here = shipped.iter().copied().flatten().any(|wanted| {
                crate::resources::meta::meta_str(wanted, "name") == Some(name.as_str())
            });
            if shipped_here || auto_update(current) != Some(true) {
                continue;
            }
            let options = DeleteOptions {
                precondition_resource_version: crate::resources::meta::meta_str(
                    current,
                    "resourceVersion",
                )
                .map(str::to_string),
                ..DeleteOptions::default()
            };
            match registry.delete(rt, None, name, &options).await {
                Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => {}
                other => drop(other?),
            }
        }
    }
    Ok(())
}

/// The value of `object`'s auto-update annotation, read as Go's `strconv.ParseBool`; `None`
/// when it has none or it is not a boolean.
fn auto_update(object: &Value) -> Option<bool> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(AUTO_UPDATE_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|v| konverge_apimachinery::query::strconv_parse_bool(v).ok())
}

/// `current` as the producer would store it, when it differs: kube's ensure strategy. A
/// mandatory object's spec is always the server's; a suggested one's while its annotation
/// says so, or, without a readable one, while it is at generation 1. The annotation is set
/// to what was decided.
fn updated(current: &Value, wanted: &Value, mandatory: bool) -> Option<Value> {
    let annotated = auto_update(current);
    let generation = current
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let keep_spec = mandatory || annotated.unwrap_or(generation == Some(1));
    let set_annotation = annotated != Some(keep_spec);
    let spec_changed = keep_spec && !same_spec(current, wanted);
    if !set_annotation && !spec_changed {
        return None;
    }
    let mut object = current.clone();
    if set_annotation {
        let metadata = crate::resources::meta::metadata_mut(&mut object);
        let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations[AUTO_UPDATE_ANNOTATION] = json!(keep_spec.to_string());
    }
    if spec_changed {
        object["spec"] = wanted["spec"].clone();
    }
    Some(object)
}

/// Whether `current`'s spec is the shipped one; `exempt`'s shares and lendable percent are
/// the operator's to choose (kube's `plcSpecEqualish`).
fn same_spec(current: &Value, wanted: &Value) -> bool {
    let mut wanted_spec = wanted["spec"].clone();
    let exempt_level = wanted["kind"] == "PriorityLevelConfiguration"
        && crate::resources::meta::meta_str(wanted, "name") == Some(EXEMPT);
    if exempt_level {
        let Some(theirs) = current.pointer("/spec/exempt") else {
            return false;
        };
        for field in ["nominalConcurrencyShares", "lendablePercent"] {
            match theirs.get(field) {
                Some(value) => wanted_spec["exempt"][field] = value.clone(),
                None => {
                    if let Some(exempt) = wanted_spec["exempt"].as_object_mut() {
                        exempt.remove(field);
                    }
                }
            }
        }
    }
    current["spec"] == wanted_spec
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(annotation: Option<&str>, generation: i64, spec: Value) -> Value {
        let mut metadata = json!({"name": "global-default", "generation": generation});
        if let Some(value) = annotation {
            metadata["annotations"] = json!({AUTO_UPDATE_ANNOTATION: value});
        }
        json!({"kind": "FlowSchema", "metadata": metadata, "spec": spec})
    }

    #[test]
    fn the_ensure_strategy_is_kubes() {
        let wanted = object(Some("true"), 0, json!({"matchingPrecedence": 9900}));
        let changed = json!({"matchingPrecedence": 1});
        // Kept by the server: its spec is put back.
        let current = object(Some("true"), 2, changed.clone());
        let put_back = updated(&current, &wanted, false).expect("an update");
        assert_eq!(put_back["spec"], wanted["spec"]);
        // The operator said no: left alone.
        assert!(updated(&object(Some("false"), 2, changed.clone()), &wanted, false).is_none());
        // A mandatory one is put back whatever it says, and says so.
        let forced =
            updated(&object(Some("false"), 2, changed.clone()), &wanted, true).expect("an update");
        assert_eq!(forced["spec"], wanted["spec"]);
        assert_eq!(
            forced["metadata"]["annotations"][AUTO_UPDATE_ANNOTATION],
            "true"
        );
        // No annotation: kept while unchanged since its creation, and annotated either way.
        let fresh = updated(&object(None, 1, changed.clone()), &wanted, false).expect("an update");
        assert_eq!(fresh["spec"], wanted["spec"]);
        assert_eq!(
            fresh["metadata"]["annotations"][AUTO_UPDATE_ANNOTATION],
            "true"
        );
        let edited =
            updated(&object(Some("yes"), 3, changed.clone()), &wanted, false).expect("an update");
        assert_eq!(edited["spec"], changed);
        assert_eq!(
            edited["metadata"]["annotations"][AUTO_UPDATE_ANNOTATION],
            "false"
        );
        // Nothing to do.
        assert!(
            updated(
                &object(Some("true"), 5, wanted["spec"].clone()),
                &wanted,
                false
            )
            .is_none()
        );
    }

    #[test]
    fn the_exempt_levels_shares_are_the_operators() {
        let boot = bootstrap();
        let exempt = boot
            .mandatory_priority_levels
            .iter()
            .find(|l| l["metadata"]["name"] == EXEMPT)
            .expect("exempt");
        let mut current = exempt.clone();
        current["spec"]["exempt"]["nominalConcurrencyShares"] = json!(10);
        current["spec"]["exempt"]["lendablePercent"] = json!(50);
        assert!(same_spec(&current, exempt));
        current["spec"]["type"] = json!("Limited");
        assert!(!same_spec(&current, exempt));
    }

    #[test]
    fn a_schema_written_too_often_waits() {
        let mut recent = Recent::default();
        let start = Instant::now();
        for i in 0..=MAX_WRITES {
            let at = start + Duration::from_secs(i as u64);
            assert!(!recent.too_often("s", at));
            recent.wrote("s", at);
        }
        assert!(recent.too_often("s", start + Duration::from_secs(10)));
        assert!(!recent.too_often("other", start));
        assert!(!recent.too_often("s", start + RATE_WINDOW + Duration::from_secs(6)));
    }
}
