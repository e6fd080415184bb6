//! Request accounting: every request that reached the [`FaultLayer`](crate::FaultLayer), with
//! what it asked for and how it was answered.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use http::StatusCode;

use crate::request_info::{RequestInfo, Verb};
use crate::rule::Rule;

/// One request and the status it was answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// What the request asked for.
    pub request: RequestInfo,
    /// The response's status code (for a watch, the status its stream started with).
    pub status: StatusCode,
    /// Whether a fault answered it (an injected error), so the server never saw it.
    pub injected: bool,
}

impl fmt::Display for RequestRecord {
    /// `update configmaps/status default/x -> 200`, or the method and path for requests that
    /// are not about a resource.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.request;
        match (r.verb, &r.resource) {
            (Some(verb), Some(_)) => {
                write!(f, "{verb} {}", r.qualified_resource())?;
                if let Some(sub) = &r.subresource {
                    write!(f, "/{sub}")?;
                }
                match (&r.namespace, &r.name) {
                    (Some(ns), Some(name)) => write!(f, " {ns}/{name}")?,
                    (Some(ns), None) => write!(f, " -n {ns}")?,
                    (None, Some(name)) => write!(f, " {name}")?,
                    (None, None) => {}
                }
            }
            _ => write!(f, "{} {}", r.method, r.path)?,
        }
        write!(f, " -> {}", self.status.as_u16())?;
        if self.injected {
            f.write_str(" (injected)")?;
        }
        Ok(())
    }
}

/// The requests a [`FaultLayer`](crate::FaultLayer) has seen, in the order their responses
/// started. A cheap handle: clones share one log.
///
/// This is how a controller test asserts what a reconcile did over the API, for example that
/// a second reconcile of a converged object writes nothing:
///
/// ```no_run
/// # async fn example(env: konverge_testkit::TestEnv) {
/// env.requests().reset();
/// // ... reconcile again ...
/// assert_eq!(env.requests().writes(), 0, "{:#?}", env.requests().records());
/// # }
/// ```
#[derive(Clone, Default)]
pub struct RequestLog {
    records: Arc<Mutex<Vec<RequestRecord>>>,
}

impl fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records = self.lock();
        f.debug_list()
            .entries(records.iter().map(|r| r.to_string()))
            .finish()
    }
}

impl RequestLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RequestRecord>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn push(&self, record: RequestRecord) {
        self.lock().push(record);
    }

    /// A copy of every record so far.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.lock().clone()
    }

    /// How many requests were recorded.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no request was recorded (since the last [`reset`](Self::reset)).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// How many `verb` requests for `resource` were recorded, answered or injected.
    /// `resource` is a plural name (`configmaps`, matching the resource itself) or
    /// `plural/subresource` (`deployments/status`), as in [`Rule::resource`].
    pub fn count(&self, verb: Verb, resource: &str) -> usize {
        self.count_matching(&Rule::new().verb(verb).resource(resource))
    }

    /// How many recorded requests `rule` matches.
    pub fn count_matching(&self, rule: &Rule) -> usize {
        self.lock()
            .iter()
            .filter(|r| rule.matches(&r.request))
            .count()
    }

    /// How many writes (create, update, patch, delete, deletecollection — of any resource or
    /// subresource) were attempted, whatever they were answered.
    pub fn writes(&self) -> usize {
        self.lock()
            .iter()
            .filter(|r| r.request.verb.is_some_and(Verb::is_write))
            .count()
    }

    /// Forgets every record so far.
    pub fn reset(&self) {
        self.lock().clear();
    }
}
