//! Where a webhook is: an admission webhook's or a conversion webhook's `clientConfig`, and
//! the URL kube-apiserver posts to. Plain data, read by the resources that declare webhooks
//! and by the caller.

/// Where a webhook is (`clientConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `url`: `https://host:port/path`.
    pub url: Option<String>,
    /// `service`.
    pub service: Option<ServiceReference>,
    /// `caBundle`: PEM certificates that sign the webhook's serving certificate (none: the
    /// system's roots).
    pub ca_bundle: Option<Vec<u8>>,
}

/// A webhook behind a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceReference {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The URL path (none: `/`).
    pub path: Option<String>,
    /// The Service port (default 443).
    pub port: i32,
}

impl ServiceReference {
    /// A Service reference, on port 443 unless it names one.
    fn new(namespace: &str, name: &str, path: Option<&str>, port: Option<i32>) -> Self {
        ServiceReference {
            namespace: namespace.to_string(),
            name: name.to_string(),
            path: path.map(String::from),
            port: port.unwrap_or(443),
        }
    }
}

impl ClientConfig {
    /// From an admission webhook's `clientConfig`.
    pub fn admission(
        config: &k8s_openapi::api::admissionregistration::v1::WebhookClientConfig,
    ) -> ClientConfig {
        let service = config
            .service
            .as_ref()
            .map(|s| ServiceReference::new(&s.namespace, &s.name, s.path.as_deref(), s.port));
        ClientConfig::new(config.url.as_deref(), service, config.ca_bundle.as_ref())
    }

    /// From a CRD's `spec.conversion.webhook.clientConfig`.
    pub fn conversion(
        config: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig,
    ) -> ClientConfig {
        let service = config
            .service
            .as_ref()
            .map(|s| ServiceReference::new(&s.namespace, &s.name, s.path.as_deref(), s.port));
        ClientConfig::new(config.url.as_deref(), service, config.ca_bundle.as_ref())
    }

    fn new(
        url: Option<&str>,
        service: Option<ServiceReference>,
        ca_bundle: Option<&k8s_openapi::ByteString>,
    ) -> ClientConfig {
        ClientConfig {
            url: url.map(String::from),
            service,
            ca_bundle: ca_bundle.map(|b| b.0.clone()),
        }
    }

    /// The URL kube-apiserver posts to, with `query` (`timeout=10s`) appended when given:
    /// `https://<name>.<namespace>.svc:<port><path>` for a Service.
    pub fn target(&self, query: Option<&str>) -> String {
        let base = match (&self.url, &self.service) {
            (Some(url), _) => url.clone(),
            (None, Some(s)) => {
                let path = s.path.as_deref().unwrap_or("/");
                format!("https://{}.{}.svc:{}{path}", s.name, s.namespace, s.port)
            }
            (None, None) => "https://".to_string(),
        };
        match query {
            Some(q) if base.contains('?') => format!("{base}&{q}"),
            Some(q) => format!("{base}?{q}"),
            None => base,
        }
    }
}
