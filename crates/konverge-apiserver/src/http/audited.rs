//! One request's audit events (see [`crate::audit`]): begun once the requester is known,
//! `RequestReceived` written at once, the request's object kept at level `Request` and up,
//! and `ResponseComplete` written with the answer (a watch: `ResponseStarted` when it starts,
//! `ResponseComplete` when its stream ends).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use http::StatusCode;
use konverge_apimachinery::request_info::RequestInfo;
use serde_json::{Value, json};

use crate::audit::{Audit, Decision, Level, Stage, micro_time, object_ref, without_managed_fields};
use crate::auth::authz::Attributes;
use crate::auth::user::UserInfo;

/// The largest body kept for the log; kube-apiserver refuses request bodies over 3 MiB.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// Who asked, as whom, and what authorization decided: filled in as the request is admitted.
#[derive(Debug, Default)]
pub(super) struct Who {
    /// The authenticated user.
    pub(super) requester: Option<UserInfo>,
    /// The user acted as (the requester, or whom it impersonates).
    pub(super) user: Option<UserInfo>,
    /// Allowed or not, and why.
    pub(super) decision: Option<(bool, String)>,
}

/// A request being audited.
pub(super) struct Audited {
    audit: Arc<Audit>,
    decision: Decision,
    event: Value,
}

impl Audited {
    /// Starts auditing `parts` if the policy wants it, writing `RequestReceived`.
    pub(super) fn begin(
        audit: &Arc<Audit>,
        parts: &http::request::Parts,
        info: &RequestInfo,
        who: &Who,
        received: jiff::Timestamp,
    ) -> Option<Audited> {
        let requester = who.requester.clone().unwrap_or_default();
        let user = who.user.clone().unwrap_or_else(|| requester.clone());
        let attributes = Attributes::of_request(&user, info);
        let decision = audit.decide(&attributes);
        if decision.level == Level::None {
            return None;
        }
        let mut event = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": decision.level.name(),
            "auditID": uuid::Uuid::new_v4().to_string(),
            "requestURI": parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_string(), |pq| pq.to_string()),
            "verb": attributes.verb,
            "user": requester.to_json(),
            "sourceIPs": parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|peer| vec![peer.0.ip().to_string()])
                .unwrap_or_default(),
            "requestReceivedTimestamp": micro_time(received),
        });
        if who.user.is_some() && who.user.as_ref() != who.requester.as_ref() {
            event["impersonatedUser"] = user.to_json();
        }
        if let Some(agent) = parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
        {
            event["userAgent"] = json!(agent);
        }
        if let Some(reference) = object_ref(&attributes) {
            event["objectRef"] = reference;
        }
        if let Some((allowed, reason)) = &who.decision {
            event["annotations"] = json!({
                "authorization.k8s.io/decision": if *allowed { "allow" } else { "forbid" },
                "authorization.k8s.io/reason": reason,
            });
        }
        let audited = Audited {
            audit: audit.clone(),
            decision,
            event,
        };
        audited.write(Stage::RequestReceived, None);
        Some(audited)
    }

    fn write(&self, stage: Stage, fill: Option<&dyn Fn(&mut Value)>) {
        if !self.decision.writes(stage) {
            return;
        }
        let mut event = self.event.clone();
        event["stage"] = json!(stage.name());
        event["stageTimestamp"] = json!(micro_time(jiff::Timestamp::now()));
        if let Some(fill) = fill {
            fill(&mut event);
        }
        self.audit.write(&event);
    }

    fn object(&self, bytes: &[u8]) -> Option<Value> {
        let object: Value = serde_json::from_slice(bytes).ok()?;
        Some(if self.decision.omit_managed_fields {
            without_managed_fields(object)
        } else {
            object
        })
    }

    /// Keeps the request's object for the log at level `Request` and up.
    pub(super) async fn keep_request_object(&mut self, req: Request) -> Request {
        if self.decision.level < Level::Request {
            return req;
        }
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, BODY_LIMIT)
            .await
            .unwrap_or_default();
        if let Some(object) = self.object(&bytes) {
            self.event["requestObject"] = object;
        }
        Request::from_parts(parts, Body::from(bytes))
    }

    /// Writes the answer's events and hands the answer on.
    pub(super) async fn finish(self, response: Response, long_running: bool) -> Response {
        let code = response.status();
        if long_running && code == StatusCode::OK {
            self.write(Stage::ResponseStarted, None);
            let complete = Complete(Some(self));
            let (parts, body) = response.into_parts();
            let stream = futures::StreamExt::map(body.into_data_stream(), move |chunk| {
                // The stream owns the guard: when it ends or is dropped, the watch is over.
                let _complete = &complete;
                chunk
            });
            return Response::from_parts(parts, Body::from_stream(stream));
        }
        let keep_body = code.as_u16() >= 400 || self.decision.level == Level::RequestResponse;
        if !keep_body {
            self.write(
                Stage::ResponseComplete,
                Some(&|event| {
                    event["responseStatus"] = json!({"metadata": {}, "code": code.as_u16()});
                }),
            );
            return response;
        }
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, BODY_LIMIT)
            .await
            .unwrap_or_default();
        let object = self.object(&bytes);
        let status = response_status(code, object.as_ref());
        let response_object = (self.decision.level == Level::RequestResponse)
            .then_some(object)
            .flatten();
        self.write(
            Stage::ResponseComplete,
            Some(&|event| {
                event["responseStatus"] = status.clone();
                if let Some(object) = &response_object {
                    event["responseObject"] = object.clone();
                }
            }),
        );
        Response::from_parts(parts, Body::from(bytes))
    }
}

/// An answer's `responseStatus`: the code, and for a failure what its `Status` says.
fn response_status(code: StatusCode, body: Option<&Value>) -> Value {
    let mut status = json!({"metadata": {}, "code": code.as_u16()});
    if let Some(body) = body.filter(|b| code.as_u16() >= 400 && b["kind"] == "Status") {
        for field in ["status", "message", "reason", "details"] {
            if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
                status[field] = value.clone();
            }
        }
    }
    status
}

/// Writes a watch's `ResponseComplete` when its stream is dropped.
struct Complete(Option<Audited>);

impl Drop for Complete {
    fn drop(&mut self) {
        if let Some(audited) = self.0.take() {
            audited.write(
                Stage::ResponseComplete,
                Some(&|event| {
                    event["responseStatus"] = json!({"metadata": {}, "code": 200});
                }),
            );
        }
    }
}
