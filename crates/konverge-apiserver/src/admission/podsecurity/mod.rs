//! `PodSecurity`: Pod Security Admission, as kube-apiserver runs it with its default
//! configuration.
//!
//! Where to start: [`PodSecurity`] (`plugin.rs`) decides what a write is checked against;
//! `policy.rs` turns a namespace's `pod-security.kubernetes.io/*` labels into the level and
//! version each mode (enforce, audit, warn) holds pods to; `checks.rs` holds every check of
//! the `baseline` and `restricted` levels in each version it had, and reports violations in
//! kube-apiserver's words and order.

mod checks;
mod plugin;
mod policy;

pub use plugin::PodSecurity;
