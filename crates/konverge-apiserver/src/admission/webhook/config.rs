//! The webhooks of the stored configurations, parsed once per change of admission
//! configuration, in kube-apiserver's order: configurations by name, then each
//! configuration's webhooks as it lists them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::admission::matching::{MatchPolicy, Rule, Selectors, exempt};
use crate::auth::authz::Authorization;
use crate::error::Result;
use crate::lister::{Lister, View};
use crate::resources::ResourceType;
use crate::webhook::{ClientConfig, Webhooks};

/// Which configurations a [`Source`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `validatingwebhookconfigurations`.
    Validating,
    /// `mutatingwebhookconfigurations`.
    Mutating,
}

impl Kind {
    fn plural(self) -> &'static str {
        match self {
            Kind::Validating => "validatingwebhookconfigurations",
            Kind::Mutating => "mutatingwebhookconfigurations",
        }
    }
}

/// What a failure to call a webhook does to the request (`failurePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailurePolicy {
    /// The request fails.
    Fail,
    /// The request goes on as if the webhook had allowed it.
    Ignore,
}

/// One webhook of a configuration, ready to match and call.
#[derive(Debug)]
pub(crate) struct Hook {
    /// `<configuration>/<webhook>/<n>`: which webhook this is, even when a configuration
    /// repeats a name (kube-apiserver's webhook accessor UID).
    pub(crate) uid: String,
    /// The webhook's name.
    pub(crate) name: String,
    /// The configuration's name.
    pub(crate) configuration: String,
    /// Where it is.
    pub(crate) client: ClientConfig,
    /// Which requests it wants.
    pub(crate) rules: Vec<Rule>,
    /// How requests for other versions of its resources match.
    pub(crate) match_policy: MatchPolicy,
    /// Its namespace and object selectors, or why they do not parse.
    pub(crate) selectors: std::result::Result<Selectors, String>,
    /// What a failure to call it does.
    pub(crate) failure_policy: FailurePolicy,
    /// `sideEffects` (empty when unset).
    pub(crate) side_effects: String,
    /// How long a call may take.
    pub(crate) timeout: Duration,
    /// The AdmissionReview versions it understands, in its order of preference.
    pub(crate) review_versions: Vec<String>,
    /// Its `matchConditions`, compiled (see [`super::call::conditions_match`]).
    pub(crate) conditions: crate::admission::policy::Conditions,
    /// Mutating webhooks only: `reinvocationPolicy: IfNeeded`.
    pub(crate) reinvoke_if_needed: bool,
}

/// The fields both kinds of webhook share.
struct Fields<'a> {
    name: &'a str,
    client_config: &'a WebhookClientConfig,
    rules: Option<&'a Vec<RuleWithOperations>>,
    match_policy: Option<&'a str>,
    namespace_selector: Option<&'a LabelSelector>,
    object_selector: Option<&'a LabelSelector>,
    failure_policy: Option<&'a str>,
    side_effects: &'a str,
    timeout_seconds: Option<i32>,
    review_versions: &'a [String],
    match_conditions: Option<&'a Vec<MatchCondition>>,
    reinvocation_policy: Option<&'a str>,
}

impl Hook {
    fn new(uid: String, configuration: &str, fields: Fields<'_>) -> Hook {
        Hook {
            uid,
            name: fields.name.to_string(),
            configuration: configuration.to_string(),
            client: ClientConfig::admission(fields.client_config),
            rules: fields
                .rules
                .map(|rules| rules.iter().map(Rule::new).collect())
                .unwrap_or_default(),
            match_policy: MatchPolicy::parse(fields.match_policy),
            selectors: Selectors::new(fields.namespace_selector, fields.object_selector)
                .map_err(|e| e.to_string()),
            failure_policy: match fields.failure_policy {
                Some("Ignore") => FailurePolicy::Ignore,
                _ => FailurePolicy::Fail,
            },
            side_effects: fields.side_effects.to_string(),
            // Stored configurations always have a timeout (10s by default); the clamp keeps a
            // configuration written past validation from stalling a request for long.
            timeout: Duration::from_secs(
                u64::try_from(fields.timeout_seconds.unwrap_or(10).clamp(1, 30)).unwrap_or(10),
            ),
            review_versions: fields.review_versions.to_vec(),
            conditions: crate::admission::policy::Conditions::compile(
                fields.match_conditions.map_or(&[][..], Vec::as_slice),
            ),
            reinvoke_if_needed: fields.reinvocation_policy == Some("IfNeeded"),
        }
    }

    /// Whether some write of `rt` (in any version, when the match policy is `Equivalent`)
    /// could match one of the rules.
    fn may_match(&self, rt: &ResourceType, registry: &dyn Lister) -> bool {
        if self.rules.iter().any(|r| r.may_match(rt)) {
            return true;
        }
        self.match_policy == MatchPolicy::Equivalent
            && registry
                .catalog()
                .all()
                .iter()
                .filter(|o| o.group == rt.group && o.plural == rt.plural && o.version != rt.version)
                .any(|o| self.rules.iter().any(|r| r.may_match(o)))
    }
}

/// The webhooks as of one change of admission configuration.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// Every webhook, in the order they are consulted.
    pub(crate) hooks: Vec<Arc<Hook>>,
}

/// The webhooks of one kind of configuration, re-read whenever admission configuration
/// changes ([`Changes::Admission`](crate::lister::Changes::Admission)) and never otherwise.
#[derive(Debug)]
pub(crate) struct Source {
    kind: Kind,
    registry: Arc<dyn Lister>,
    webhooks: Webhooks,
    authorization: Authorization,
    snapshot: View<Snapshot>,
}

impl Source {
    /// The webhooks of `kind` configurations stored in `registry`; their `matchConditions`
    /// ask `authorization` what their `authorizer` checks.
    pub(crate) fn new(
        kind: Kind,
        registry: Arc<dyn Lister>,
        webhooks: Webhooks,
        authorization: Authorization,
    ) -> Source {
        Source {
            kind,
            registry,
            webhooks,
            authorization,
            snapshot: View::new(crate::lister::Changes::Admission),
        }
    }

    /// How the webhooks are reached.
    pub(crate) fn webhooks(&self) -> &Webhooks {
        &self.webhooks
    }

    /// What `matchConditions` ask their authorization checks of.
    pub(crate) fn authorization(&self) -> &Authorization {
        &self.authorization
    }

    /// The parsed webhooks, if no configuration changed since they were read.
    fn fresh(&self) -> Option<Arc<Snapshot>> {
        self.snapshot.fresh(self.registry.as_ref())
    }

    /// Whether any webhook could match some write of `rt`. True while the configurations
    /// changed since they were read: the next admission reads them again.
    pub(crate) fn may_handle(&self, rt: &ResourceType) -> bool {
        if exempt(rt) {
            return false;
        }
        match self.fresh() {
            Some(snapshot) => snapshot
                .hooks
                .iter()
                .any(|h| h.may_match(rt, self.registry.as_ref())),
            None => true,
        }
    }

    /// The webhooks, read again if any configuration changed since they last were.
    pub(crate) async fn hooks(&self) -> Result<Arc<Snapshot>> {
        self.snapshot
            .get(self.registry.as_ref(), |_| async {
                Ok(Snapshot {
                    hooks: self.read().await?,
                })
            })
            .await
    }

    async fn read(&self) -> Result<Vec<Arc<Hook>>> {
        let Some(rt) =
            self.registry
                .catalog()
                .get("admissionregistration.k8s.io", "v1", self.kind.plural())
        else {
            return Ok(Vec::new());
        };
        let mut items = self.registry.list(&rt, None, None).await?;
        let name = |v: &serde_json::Value| {
            v.pointer("/metadata/name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        items.sort_by_key(|a| name(a));
        let mut hooks = Vec::new();
        for item in items {
            let configuration = name(&item);
            let mut seen = std::collections::HashMap::<String, usize>::new();
            let mut uid = |hook: &str| {
                let n = seen.entry(hook.to_string()).or_default();
                let uid = format!("{configuration}/{hook}/{n}");
                *n += 1;
                uid
            };
            // A configuration that does not decode (written around validation) is skipped,
            // as kube-apiserver's informer would never have delivered it.
            // The two kinds' webhooks are different types with the same fields (mutating
            // ones add `reinvocationPolicy`).
            macro_rules! hooks_of {
                ($configuration:ty, |$w:ident| $reinvocation:expr) => {{
                    let Ok(parsed) = serde_json::from_value::<$configuration>((*item).clone())
                    else {
                        continue;
                    };
                    for $w in parsed.webhooks.iter().flatten() {
                        let w = $w;
                        let fields = Fields {
                            name: &w.name,
                            client_config: &w.client_config,
                            rules: w.rules.as_ref(),
                            match_policy: w.match_policy.as_deref(),
                            namespace_selector: w.namespace_selector.as_ref(),
                            object_selector: w.object_selector.as_ref(),
                            failure_policy: w.failure_policy.as_deref(),
                            side_effects: &w.side_effects,
                            timeout_seconds: w.timeout_seconds,
                            review_versions: &w.admission_review_versions,
                            match_conditions: w.match_conditions.as_ref(),
                            reinvocation_policy: $reinvocation,
                        };
                        hooks.push(Arc::new(Hook::new(uid(&w.name), &configuration, fields)));
                    }
                }};
            }
            match self.kind {
                Kind::Validating => hooks_of!(ValidatingWebhookConfiguration, |w| None),
                Kind::Mutating => hooks_of!(MutatingWebhookConfiguration, |w| w
                    .reinvocation_policy
                    .as_deref()),
            }
        }
        Ok(hooks)
    }
}
