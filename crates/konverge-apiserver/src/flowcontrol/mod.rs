//! API Priority and Fairness, as far as a request can see it: every request is classified as
//! kube-apiserver 1.33 classifies it, by the FlowSchemas and PriorityLevelConfigurations
//! stored, and its response names the FlowSchema and priority level that took it
//! (`X-Kubernetes-PF-FlowSchema-UID`, `X-Kubernetes-PF-PriorityLevel-UID`).
//!
//! - [`Config`]: the stored objects digested as kube's config controller digests them:
//!   priority levels with broken specs ignored, FlowSchemas whose priority level does not
//!   exist left out (and marked `Dangling`), the mandatory `exempt` and `catch-all` objects
//!   supplied when missing, each priority level's share of the server's 600 seats.
//! - [`FlowControl`]: the classifier the dispatcher asks, which rebuilds its [`Config`]
//!   whenever the objects change ([`Changes::FlowControl`]) and publishes the seat limits and
//!   dispatch counts as kube's `apiserver_flowcontrol_*` metrics.
//! - [`bootstrap`]: the mandatory and suggested objects kube-apiserver 1.33 creates and keeps
//!   (`priority-and-fairness-config-producer`); the controller that keeps them and writes the
//!   FlowSchemas' `Dangling` conditions is
//!   [`controllers::flowcontrol`](crate::controllers::flowcontrol).
//!
//! What is not done: requests are classified, never queued or refused. Each priority level's
//! seats are computed and published, but nothing waits for a seat, so no request gets 429.

mod rules;

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use http::{HeaderMap, HeaderValue};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use konverge_apimachinery::request_info::RequestInfo;
use serde_json::Value;

use crate::auth::user::UserInfo;
use crate::error::Result;
use crate::lister::{Changes, Lister, View};
use crate::metrics::Metrics;

/// The API group of FlowSchemas and PriorityLevelConfigurations.
pub const GROUP: &str = "flowcontrol.apiserver.k8s.io";

/// The response header naming the uid of the FlowSchema that took a request.
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";

/// The response header naming the uid of the priority level that took a request.
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";

/// The annotation saying whether the server keeps a bootstrap object's spec as it ships it.
pub const AUTO_UPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";

/// The field manager of the bootstrap objects' writes.
pub const PRODUCER: &str = "api-priority-and-fairness-config-producer-v1";

/// The field manager of the FlowSchemas' `Dangling` conditions.
pub const CONSUMER: &str = "api-priority-and-fairness-config-consumer-v1";

/// The seats the priority levels share: kube-apiserver's `--max-requests-inflight` (400) and
/// `--max-mutating-requests-inflight` (200) defaults together.
pub const SERVER_CONCURRENCY_LIMIT: i64 = 600;

/// The priority level and FlowSchema that must always exist, named alike.
pub const EXEMPT: &str = "exempt";

/// The priority level and FlowSchema that take what nothing else does.
pub const CATCH_ALL: &str = "catch-all";

/// The objects kube-apiserver 1.33 creates, in the order it ensures them.
#[derive(Debug)]
pub struct Bootstrap {
    /// The suggested priority levels (`system`, `node-high`, ... `global-default`).
    pub suggested_priority_levels: Vec<Value>,
    /// The suggested FlowSchemas (`system-nodes`, ... `global-default`).
    pub suggested_flow_schemas: Vec<Value>,
    /// `catch-all` and `exempt`.
    pub mandatory_priority_levels: Vec<Value>,
    /// `exempt` and `catch-all`.
    pub mandatory_flow_schemas: Vec<Value>,
}

/// The bootstrap objects, read once per process (from `bootstrap.json`, kube's
/// `k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap` as data).
pub fn bootstrap() -> &'static Bootstrap {
    static BOOTSTRAP: LazyLock<Bootstrap> = LazyLock::new(|| {
        let data: Value = serde_json::from_str(include_str!("bootstrap.json")).unwrap_or_default();
        let list = |name: &str| data[name].as_array().cloned().unwrap_or_default();
        Bootstrap {
            suggested_priority_levels: list("suggestedPriorityLevelConfigurations"),
            suggested_flow_schemas: list("suggestedFlowSchemas"),
            mandatory_priority_levels: list("mandatoryPriorityLevelConfigurations"),
            mandatory_flow_schemas: list("mandatoryFlowSchemas"),
        }
    });
    &BOOTSTRAP
}

/// The mandatory object `name` of `list`, typed.
fn mandatory<T: serde::de::DeserializeOwned>(list: &[Value], name: &str) -> Option<T> {
    list.iter()
        .find(|object| object.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        .and_then(|object| serde_json::from_value(object.clone()).ok())
}

/// Which FlowSchema and priority level took a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// The FlowSchema's name.
    pub flow_schema: String,
    /// Its uid (empty for a mandatory one the server supplied because none is stored).
    pub flow_schema_uid: String,
    /// The priority level's name.
    pub priority_level: String,
    /// Its uid (empty likewise).
    pub priority_level_uid: String,
}

impl Classification {
    /// Names both in `headers`, as kube's filter does on every response it classified.
    pub fn set_headers(&self, headers: &mut HeaderMap) {
        for (name, uid) in [
            (FLOW_SCHEMA_UID_HEADER, &self.flow_schema_uid),
            (PRIORITY_LEVEL_UID_HEADER, &self.priority_level_uid),
        ] {
            if let Ok(value) = HeaderValue::from_str(uid) {
                headers.insert(name, value);
            }
        }
    }
}

/// A priority level's execution seats, as kube computes them from its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seats {
    /// Its nominal seats: the server's seats times its share of all shares, rounded up.
    pub nominal: i64,
    /// The fewest it keeps: what it may not lend (`lendablePercent`).
    pub lower: i64,
    /// The most it may use: what it may borrow (`borrowingLimitPercent`, or the server's
    /// whole limit when unset).
    pub upper: i64,
}

/// A priority level in use.
#[derive(Debug, Clone)]
struct Level {
    uid: String,
    seats: Seats,
}

/// What a FlowSchema's `Dangling` condition should say, and whether it says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dangling {
    /// The FlowSchema.
    pub flow_schema: String,
    /// `True` when its priority level does not exist (or is broken).
    pub status: &'static str,
    /// `NotFound` or `Found`.
    pub reason: &'static str,
    /// kube's message.
    pub message: String,
    /// Whether the stored condition already says this.
    pub current: bool,
}

/// The FlowSchemas and priority levels digested, for classifying requests.
#[derive(Debug, Default)]
pub struct Config {
    /// The FlowSchemas in matching order (precedence, then name), mandatory ones supplied.
    schemas: Vec<FlowSchema>,
    /// The priority levels by name.
    levels: BTreeMap<String, Level>,
    /// Every stored FlowSchema's `Dangling` condition as it should be.
    dangling: Vec<Dangling>,
}

impl Config {
    /// Digests the stored objects as kube's config controller does.
    pub fn digest(levels: &[PriorityLevelConfiguration], schemas: &[FlowSchema]) -> Config {
        let mut digested: BTreeMap<String, &PriorityLevelConfiguration> = BTreeMap::new();
        for level in levels {
            if well_formed(level) {
                digested.insert(name_of(&level.metadata), level);
            }
        }
        let boot = bootstrap();
        let mut imagined = Vec::new();
        for name in [EXEMPT, CATCH_ALL] {
            if !digested.contains_key(name)
                && let Some(level) =
                    mandatory::<PriorityLevelConfiguration>(&boot.mandatory_priority_levels, name)
            {
                imagined.push(level);
            }
        }
        let mut dangling = Vec::with_capacity(schemas.len());
        let mut sequence: Vec<FlowSchema> = Vec::with_capacity(schemas.len() + 2);
        for schema in schemas {
            let level = schema
                .spec
                .as_ref()
                .map(|spec| spec.priority_level_configuration.name.clone())
                .unwrap_or_default();
            // Levels the server supplies do not count: kube checks the stored ones only.
            let found = digested.contains_key(&level);
            dangling.push(dangling_condition(schema, &level, found));
            if found {
                sequence.push(schema.clone());
            }
        }
        sequence.sort_by(|a, b| {
            precedence(a)
                .cmp(&precedence(b))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        let has = |sequence: &[FlowSchema], name: &str| {
            sequence
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(name))
        };
        if !has(&sequence, EXEMPT)
            && let Some(exempt) = mandatory::<FlowSchema>(&boot.mandatory_flow_schemas, EXEMPT)
        {
            sequence.insert(0, exempt);
        }
        if !has(&sequence, CATCH_ALL)
            && let Some(catch_all) =
                mandatory::<FlowSchema>(&boot.mandatory_flow_schemas, CATCH_ALL)
        {
            sequence.push(catch_all);
        }
        let all: Vec<&PriorityLevelConfiguration> =
            digested.values().copied().chain(imagined.iter()).collect();
        let share_sum: i64 = all.iter().map(|level| shares(level).0).sum();
        let levels = all
            .into_iter()
            .map(|level| {
                let (share, lendable, borrowing) = shares(level);
                let seats = seats(share, share_sum, lendable, borrowing);
                let uid = level.metadata.uid.clone().unwrap_or_default();
                (name_of(&level.metadata), Level { uid, seats })
            })
            .collect();
        Config {
            schemas: sequence,
            levels,
            dangling,
        }
    }

    /// The FlowSchema and priority level that take the request of `user` described by
    /// `info`: the first FlowSchema in matching order whose rules take it, `catch-all` when
    /// none does.
    pub fn classify(&self, user: &UserInfo, info: &RequestInfo) -> Option<Classification> {
        let schema = self
            .schemas
            .iter()
            .find(|schema| rules::matches_schema(schema, user, info))
            .or_else(|| {
                self.schemas
                    .iter()
                    .find(|s| s.metadata.name.as_deref() == Some(CATCH_ALL))
            })?;
        let level_name = schema
            .spec
            .as_ref()
            .map(|spec| spec.priority_level_configuration.name.clone())
            .unwrap_or_default();
        let level = self.levels.get(&level_name)?;
        Some(Classification {
            flow_schema: name_of(&schema.metadata),
            flow_schema_uid: schema.metadata.uid.clone().unwrap_or_default(),
            priority_level: level_name,
            priority_level_uid: level.uid.clone(),
        })
    }

    /// Each priority level in use and its seats, by name.
    pub fn seats(&self) -> impl Iterator<Item = (&str, Seats)> {
        self.levels
            .iter()
            .map(|(name, level)| (name.as_str(), level.seats))
    }

    /// Every stored FlowSchema's `Dangling` condition as it should be.
    pub fn dangling(&self) -> &[Dangling] {
        &self.dangling
    }
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn precedence(schema: &FlowSchema) -> i32 {
    schema
        .spec
        .as_ref()
        .and_then(|spec| spec.matching_precedence)
        .unwrap_or(0)
}

/// Whether kube's queue-set construction would take `level`: its type names the one member
/// it has, a `Reject` limit has no queuing and a `Queue` one has, and only `exempt` is of
/// type `Exempt`.
fn well_formed(level: &PriorityLevelConfiguration) -> bool {
    let Some(spec) = level.spec.as_ref() else {
        return false;
    };
    let limited = spec.type_ == "Limited";
    let exempt = spec.type_ == "Exempt";
    if limited != spec.limited.is_some() || exempt != spec.exempt.is_some() {
        return false;
    }
    if exempt != (level.metadata.name.as_deref() == Some(EXEMPT)) {
        return false;
    }
    spec.limited.as_ref().is_none_or(|limited| {
        limited
            .limit_response
            .as_ref()
            .is_some_and(|response| (response.type_ == "Reject") == response.queuing.is_none())
    })
}

/// A level's nominal concurrency shares, lendable percent and borrowing limit percent.
fn shares(level: &PriorityLevelConfiguration) -> (i64, Option<i64>, Option<i64>) {
    let spec = level.spec.as_ref();
    if let Some(limited) = spec.and_then(|spec| spec.limited.as_ref()) {
        return (
            i64::from(limited.nominal_concurrency_shares.unwrap_or(0)),
            limited.lendable_percent.map(i64::from),
            limited.borrowing_limit_percent.map(i64::from),
        );
    }
    let exempt = spec.and_then(|spec| spec.exempt.as_ref());
    (
        exempt
            .and_then(|e| e.nominal_concurrency_shares)
            .map_or(0, i64::from),
        exempt.and_then(|e| e.lendable_percent).map(i64::from),
        None,
    )
}

/// kube's seats of a level with `share` of `share_sum` shares (`math.Ceil` of the nominal,
/// `math.Round` of what it lends and borrows).
fn seats(share: i64, share_sum: i64, lendable: Option<i64>, borrowing: Option<i64>) -> Seats {
    if share_sum == 0 {
        return Seats {
            nominal: 0,
            lower: 0,
            upper: SERVER_CONCURRENCY_LIMIT,
        };
    }
    let nominal = ((SERVER_CONCURRENCY_LIMIT * share) as f64 / share_sum as f64).ceil() as i64;
    let percent = |p: i64| (nominal as f64 * p as f64 / 100.0).round() as i64;
    let lendable = lendable.map_or(0, percent);
    let borrowing = borrowing.map_or(SERVER_CONCURRENCY_LIMIT, percent);
    Seats {
        nominal,
        lower: nominal - lendable,
        upper: nominal + borrowing,
    }
}

/// What `schema`'s `Dangling` condition should say, kube's words.
fn dangling_condition(schema: &FlowSchema, level: &str, found: bool) -> Dangling {
    let (status, reason, message) = if found {
        (
            "False",
            "Found",
            format!(
                "This FlowSchema references the PriorityLevelConfiguration object named {} and it exists",
                konverge_apimachinery::gofmt::quote(level)
            ),
        )
    } else {
        (
            "True",
            "NotFound",
            format!(
                "This FlowSchema references the PriorityLevelConfiguration object named {} but there is no such object",
                konverge_apimachinery::gofmt::quote(level)
            ),
        )
    };
    let current = schema
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c.type_.as_deref() == Some("Dangling"))
        })
        .is_some_and(|c| {
            c.status.as_deref() == Some(status)
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message.as_str())
        });
    Dangling {
        flow_schema: name_of(&schema.metadata),
        status,
        reason,
        message,
        current,
    }
}

/// Whether kube's priority-and-fairness filter leaves a request unclassified: long-running
/// requests other than watches (proxies, and a pod's attach, exec, log and port forwarding).
fn unclassified(info: &RequestInfo) -> bool {
    info.verb == "proxy"
        || matches!(
            info.subresource.as_str(),
            "attach" | "exec" | "proxy" | "log" | "portforward"
        )
}

/// The classifier requests go through, over the stored configuration.
pub struct FlowControl {
    lister: Arc<dyn Lister>,
    metrics: Arc<Metrics>,
    config: View<Config>,
}

impl std::fmt::Debug for FlowControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowControl").finish_non_exhaustive()
    }
}

impl FlowControl {
    /// A classifier reading `lister`'s FlowSchemas and priority levels, publishing to
    /// `metrics`.
    pub fn new(lister: Arc<dyn Lister>, metrics: Arc<Metrics>) -> FlowControl {
        FlowControl {
            lister,
            metrics,
            config: View::new(Changes::FlowControl),
        }
    }

    /// The configuration as of the objects' latest change, rebuilt if they changed.
    pub async fn config(&self) -> Result<Arc<Config>> {
        self.config
            .get(self.lister.as_ref(), |_| async {
                let catalog = self.lister.catalog().clone();
                let (Some(levels_rt), Some(schemas_rt)) = (
                    catalog.get(GROUP, "v1", "prioritylevelconfigurations"),
                    catalog.get(GROUP, "v1", "flowschemas"),
                ) else {
                    return Ok(Config::digest(&[], &[]));
                };
                let levels: Vec<PriorityLevelConfiguration> =
                    typed(self.lister.list(&levels_rt, None, None).await?);
                let schemas: Vec<FlowSchema> =
                    typed(self.lister.list(&schemas_rt, None, None).await?);
                let config = Config::digest(&levels, &schemas);
                for (level, seats) in config.seats() {
                    self.metrics.set_priority_level_seats(
                        level,
                        seats.nominal,
                        seats.lower,
                        seats.upper,
                    );
                }
                Ok(config)
            })
            .await
    }

    /// Classifies the request of `user` described by `info` and counts it as dispatched;
    /// `None` for the long-running requests kube leaves unclassified, or when the
    /// configuration cannot be read.
    pub async fn classify(&self, user: &UserInfo, info: &RequestInfo) -> Option<Classification> {
        if unclassified(info) {
            return None;
        }
        let config = match self.config().await {
            Ok(config) => config,
            Err(e) => {
                tracing::warn!(error = %e, "reading the flow control configuration failed");
                return None;
            }
        };
        let classification = config.classify(user, info)?;
        self.metrics
            .dispatched(&classification.priority_level, &classification.flow_schema);
        Some(classification)
    }
}

/// The objects of `listed` that decode as `T`.
fn typed<T: serde::de::DeserializeOwned>(listed: Vec<Arc<Value>>) -> Vec<T> {
    listed
        .iter()
        .filter_map(|object| T::deserialize(object.as_ref()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_bootstrap() -> (Vec<PriorityLevelConfiguration>, Vec<FlowSchema>) {
        let boot = bootstrap();
        let levels = boot
            .suggested_priority_levels
            .iter()
            .chain(&boot.mandatory_priority_levels)
            .map(|v| serde_json::from_value(v.clone()).expect("a level"))
            .collect();
        let schemas = boot
            .suggested_flow_schemas
            .iter()
            .chain(&boot.mandatory_flow_schemas)
            .map(|v| serde_json::from_value(v.clone()).expect("a schema"))
            .collect();
        (levels, schemas)
    }

    #[test]
    fn the_bootstrap_objects_are_kubes() {
        let boot = bootstrap();
        let names = |list: &[Value]| -> Vec<String> {
            list.iter()
                .map(|v| {
                    v["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(
            names(&boot.suggested_priority_levels),
            [
                "system",
                "node-high",
                "leader-election",
                "workload-high",
                "workload-low",
                "global-default"
            ]
        );
        assert_eq!(
            names(&boot.mandatory_priority_levels),
            ["catch-all", "exempt"]
        );
        assert_eq!(names(&boot.mandatory_flow_schemas), ["exempt", "catch-all"]);
        assert_eq!(boot.suggested_flow_schemas.len(), 11);
    }

    /// The seats kube-apiserver 1.33 publishes for its bootstrap levels
    /// (`apiserver_flowcontrol_nominal_limit_seats` and the bounds).
    #[test]
    fn seats_are_kubes_for_the_bootstrap_levels() {
        let (levels, schemas) = all_bootstrap();
        let config = Config::digest(&levels, &schemas);
        let seats: BTreeMap<&str, Seats> = config.seats().collect();
        let want = |nominal, lower, upper| Seats {
            nominal,
            lower,
            upper,
        };
        assert_eq!(seats["global-default"], want(49, 24, 649));
        assert_eq!(seats["workload-low"], want(245, 24, 845));
        assert_eq!(seats["workload-high"], want(98, 49, 698));
        assert_eq!(seats["system"], want(74, 50, 674));
        assert_eq!(seats["node-high"], want(98, 73, 698));
        assert_eq!(seats["leader-election"], want(25, 25, 625));
        assert_eq!(seats["catch-all"], want(13, 13, 613));
        assert_eq!(seats["exempt"], want(0, 0, 600));
    }

    #[test]
    fn requests_go_to_the_first_matching_schema() {
        let (levels, schemas) = all_bootstrap();
        let config = Config::digest(&levels, &schemas);
        let at = |user: &UserInfo, method: &str, path: &str| {
            let info = RequestInfo::parse(method, path, None).expect("parses");
            let c = config.classify(user, &info).expect("classified");
            (c.flow_schema, c.priority_level)
        };
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        let admin = UserInfo::admin();
        assert_eq!(at(&admin, "GET", "/api/v1/pods"), pair("exempt", "exempt"));
        let someone = UserInfo::new("someone", &["system:authenticated"]);
        assert_eq!(at(&someone, "GET", "/readyz"), pair("probes", "exempt"));
        assert_eq!(
            at(&someone, "GET", "/api/v1/namespaces/a/pods"),
            pair("global-default", "global-default")
        );
        let node = UserInfo::new("system:node:n1", &["system:nodes", "system:authenticated"]);
        assert_eq!(
            at(&node, "PATCH", "/api/v1/nodes/n1/status"),
            pair("system-node-high", "node-high")
        );
        assert_eq!(
            at(&node, "GET", "/api/v1/namespaces/a/pods"),
            pair("system-nodes", "system")
        );
        let sa = UserInfo::service_account("kube-system", "endpoint-controller", "u");
        assert_eq!(
            at(&sa, "PUT", "/api/v1/namespaces/a/endpoints/e"),
            pair("endpoint-controller", "workload-high")
        );
        assert_eq!(
            at(
                &sa,
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
            ),
            pair("system-leader-election", "leader-election")
        );
        let other_sa = UserInfo::service_account("default", "app", "u");
        assert_eq!(
            at(&other_sa, "GET", "/api/v1/namespaces/default/pods"),
            pair("service-accounts", "workload-low")
        );
        // Nothing but an unknown group: only the mandatory catch-all, as a fallback.
        let stranger = UserInfo::new("x", &[]);
        assert_eq!(
            at(&stranger, "GET", "/version"),
            pair("catch-all", "catch-all")
        );
    }

    #[test]
    fn a_schema_whose_level_is_missing_dangles_and_is_left_out() {
        let (mut levels, schemas) = all_bootstrap();
        levels.retain(|l| l.metadata.name.as_deref() != Some("global-default"));
        // The mandatory levels themselves missing: supplied, but schemas naming them dangle.
        levels.retain(|l| l.metadata.name.as_deref() != Some(EXEMPT));
        let config = Config::digest(&levels, &schemas);
        let dangling: BTreeMap<&str, &Dangling> = config
            .dangling()
            .iter()
            .map(|d| (d.flow_schema.as_str(), d))
            .collect();
        let global = dangling["global-default"];
        assert_eq!((global.status, global.reason), ("True", "NotFound"));
        assert_eq!(
            global.message,
            "This FlowSchema references the PriorityLevelConfiguration object named \"global-default\" but there is no such object"
        );
        assert!(!global.current);
        assert_eq!(dangling["system-nodes"].status, "False");
        assert_eq!(
            dangling["system-nodes"].message,
            "This FlowSchema references the PriorityLevelConfiguration object named \"system\" and it exists"
        );
        assert_eq!(dangling["probes"].status, "True");
        // The stored exempt schema dangles; the server's own takes its place, with its level.
        let info = RequestInfo::parse("GET", "/api/v1/pods", None).expect("parses");
        let c = config
            .classify(&UserInfo::admin(), &info)
            .expect("classified");
        assert_eq!(
            (c.flow_schema.as_str(), c.priority_level.as_str()),
            (EXEMPT, EXEMPT)
        );
        assert_eq!(
            (c.flow_schema_uid.as_str(), c.priority_level_uid.as_str()),
            ("", "")
        );
        let someone = UserInfo::new("someone", &["system:authenticated"]);
        let c = config.classify(&someone, &info).expect("classified");
        assert_eq!(c.flow_schema, CATCH_ALL);
        let seats: BTreeMap<&str, Seats> = config.seats().collect();
        assert!(seats.contains_key(EXEMPT) && !seats.contains_key("global-default"));
    }
}
