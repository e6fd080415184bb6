//! Admission webhooks, as kube-apiserver 1.33 calls them: [`MutatingAdmissionWebhook`] and
//! [`ValidatingAdmissionWebhook`].
//!
//! Where to start:
//!
//! - `config`: the stored MutatingWebhookConfigurations and ValidatingWebhookConfigurations,
//!   parsed into webhooks once per change of admission configuration
//!   ([`Changes::Admission`](crate::lister::Changes::Admission));
//! - `call`: whether a webhook is called for a request (rules and match policy, object and
//!   namespace selectors, and the seam where `matchConditions` are to be evaluated), and the
//!   call itself, through [`Webhooks`](crate::webhook::Webhooks) (`?timeout=10s`, the
//!   `failurePolicy`, `sideEffects` on dry runs, warnings and audit annotations);
//! - `review`: the AdmissionReview sent (v1, or v1beta1 for webhooks that only speak it)
//!   and how the answer is read and checked, with kube-apiserver's words for every way it
//!   can be wrong;
//! - `mutating` and `validating`: the two dispatchers — mutating webhooks one after the
//!   other, their JSON patches applied and `IfNeeded` ones reinvoked; validating webhooks in
//!   parallel.
//!
//! Configuration resources themselves are never sent to webhooks
//! ([`exempt`](crate::admission::matching::exempt)), so a broken webhook can always be
//! removed.

mod call;
mod config;
mod gojson;
mod mutating;
mod review;
mod validating;

pub use mutating::MutatingAdmissionWebhook;
pub use validating::ValidatingAdmissionWebhook;

#[cfg(test)]
mod tests {
    use crate::admission::Trace;

    #[test]
    fn warnings_are_limited_as_kube_apiservers_recorder_limits_them() {
        let trace = Trace::default();
        trace.warn_as_recorded("first");
        trace.warn_as_recorded("first");
        trace.warn_as_recorded("");
        trace.warn_as_recorded("tab\there");
        assert_eq!(trace.warnings(), ["first"]);
        // Past 4096 characters in all, every warning is cut to 256 characters.
        let long = "x".repeat(4000);
        trace.warn_as_recorded(&long);
        assert_eq!(trace.warnings(), ["first".to_string(), long.clone()]);
        let longer = "y".repeat(300);
        trace.warn_as_recorded(&longer);
        assert_eq!(
            trace.warnings(),
            ["first".to_string(), "x".repeat(256), "y".repeat(256)]
        );
        // Once truncating, warnings are added until 4096 characters are written.
        for i in 0..20 {
            trace.warn_as_recorded(&format!("{i:02}{}", "z".repeat(298)));
        }
        let total: usize = trace.warnings().iter().map(|w| w.chars().count()).sum();
        assert_eq!(trace.warnings().len(), 3 + 14);
        assert_eq!(total, 5 + 256 * 16);
    }
}
