//! What every sync of the StatefulSet controller shares (its own file so that the sync in
//! `control` and the wiring in the module root both use it without importing each other).

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use konverge_runtime::Store;

use crate::clock::Clock;
use crate::events::Events;
use crate::expectations::Expectations;

/// What every sync shares.
pub(crate) struct Ctx {
    pub(crate) client: kube::Client,
    pub(crate) clock: Clock,
    pub(crate) events: Events,
    pub(crate) expectations: Expectations,
    pub(crate) pods: Store<Pod>,
    pub(crate) claims: Store<PersistentVolumeClaim>,
    pub(crate) revisions: Store<ControllerRevision>,
}
