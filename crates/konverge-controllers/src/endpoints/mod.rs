//! kcm's three controllers of Service endpoints: [`ENDPOINTS`] (kcm's
//! `pkg/controller/endpoint`), [`ENDPOINTSLICE`] (`pkg/controller/endpointslice` and the
//! `k8s.io/endpointslice` reconciler) and [`ENDPOINTSLICE_MIRRORING`]
//! (`pkg/controller/endpointslicemirroring`).
//!
//! - [`subsets`]: for every Service with a selector, an Endpoints object of the same name
//!   listing its pods' addresses, ready and not ready, with the ports each pod serves.
//! - [`slices`]: the same pods as EndpointSlices owned by the Service, at most 100 endpoints
//!   each, with ready/serving/terminating conditions, node names and zones.
//! - [`mirroring`]: for Services without a selector, the Endpoints their users write,
//!   mirrored into EndpointSlices.
//! - [`addresses`]: what they share: which pods count, their addresses and ports, which
//!   Services a pod change concerns, and the trigger-time annotation.
//!
//! Every write compares the desired object with the cached one, ignoring what the server
//! sets, and is skipped when they agree, so a resync writes nothing.

pub mod addresses;
pub mod mirroring;
pub mod slices;
pub mod subsets;

pub use mirroring::ENDPOINTSLICE_MIRRORING;
pub use slices::ENDPOINTSLICE;
pub use subsets::ENDPOINTS;

/// The label naming the Service an EndpointSlice belongs to (`discovery.LabelServiceName`).
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// The label naming the controller that manages an EndpointSlice
/// (`discovery.LabelManagedBy`).
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

/// Endpoints labelled `true` are not mirrored (`discovery.LabelSkipMirror`).
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";

/// The label on the Endpoints and EndpointSlices of a headless Service
/// (`v1.IsHeadlessService`).
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";

/// The annotation holding the time of the last pod or Service change an Endpoints or
/// EndpointSlice reflects (`v1.EndpointsLastChangeTriggerTime`).
pub const ANNOTATION_LAST_CHANGE_TRIGGER_TIME: &str =
    "endpoints.kubernetes.io/last-change-trigger-time";

/// The annotation on an Endpoints object truncated to 1000 addresses
/// (`v1.EndpointsOverCapacity`), valued `truncated`.
pub const ANNOTATION_OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

/// The annotation of leader-election records kept in Endpoints, which are neither mirrored
/// nor deleted as leftovers (`resourcelock.LeaderElectionRecordAnnotationKey`).
pub const ANNOTATION_LEADER: &str = "control-plane.alpha.kubernetes.io/leader";

/// The node label giving an endpoint its zone (`v1.LabelTopologyZone`).
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
