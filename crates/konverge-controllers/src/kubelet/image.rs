//! Image names and ids as containerd reports them.

use k8s_openapi::api::core::v1::Container;

/// The image as containerd reports it: `nginx` is `docker.io/library/nginx:latest`.
pub(super) fn normalize_image(image: &str) -> String {
    let (first, rest) = image.split_once('/').unwrap_or(("", image));
    let qualified = if first.is_empty() {
        format!("docker.io/library/{rest}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        image.to_string()
    } else {
        format!("docker.io/{image}")
    };
    with_default_tag(&qualified)
}

/// `image`, with `:latest` when it names neither a tag nor a digest.
pub(super) fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or_default();
    if last.contains(':') || last.contains('@') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// 64 hex digits that depend only on `input` (FNV-1a, four seeds): fake but stable ids.
pub(super) fn fake_digest(input: &str) -> String {
    (0u64..4)
        .map(|seed| {
            let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for byte in input.bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
            format!("{hash:016x}")
        })
        .collect()
}

/// Whether the kubelet pulls the container's image every time it starts it: policy
/// `Always`, which the API server defaults for an image tagged `latest` or not at all.
/// (`IfNotPresent` and `Never` images are taken as present on every node.)
pub(super) fn pulls_always(c: &Container) -> bool {
    match c.image_pull_policy.as_deref() {
        Some(policy) => policy == "Always",
        None => {
            let image = c.image.as_deref().unwrap_or_default();
            let last = image.rsplit('/').next().unwrap_or_default();
            !last.contains('@') && last.rsplit_once(':').is_none_or(|(_, tag)| tag == "latest")
        }
    }
}

/// A fake but stable image size in bytes (10 to 100 MB), for the `Pulled` event.
pub(super) fn image_size(image: &str) -> u64 {
    let digest = fake_digest(image);
    let seed = u64::from_str_radix(&digest[..8], 16).unwrap_or(0);
    10_000_000 + seed % 90_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_normalized_as_containerd_reports_them() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            normalize_image("nginx:1.27"),
            "docker.io/library/nginx:1.27"
        );
        assert_eq!(
            normalize_image("bitnami/redis"),
            "docker.io/bitnami/redis:latest"
        );
        assert_eq!(
            normalize_image("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(
            normalize_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
    }

    #[test]
    fn images_tagged_latest_or_untagged_are_pulled_every_time() {
        let container = |image: &str, policy: Option<&str>| Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(Into::into),
            ..Container::default()
        };
        assert!(pulls_always(&container("nginx", None)));
        assert!(pulls_always(&container("nginx:latest", None)));
        assert!(pulls_always(&container("localhost:5000/app", None)));
        assert!(!pulls_always(&container("nginx:1.27", None)));
        assert!(!pulls_always(&container("nginx@sha256:abc", None)));
        assert!(!pulls_always(&container("nginx", Some("IfNotPresent"))));
        assert!(pulls_always(&container("nginx:1.27", Some("Always"))));
    }

    #[test]
    fn digests_are_stable_and_64_hex_digits() {
        let digest = fake_digest("nginx");
        assert_eq!(digest.len(), 64);
        assert_eq!(digest, fake_digest("nginx"));
        assert_ne!(digest, fake_digest("redis"));
        let size = image_size("docker.io/library/nginx:latest");
        assert!((10_000_000..100_000_000).contains(&size), "{size}");
        assert_eq!(size, image_size("docker.io/library/nginx:latest"));
    }
}
