//! `konverge envtest assets [DIR]`: the folder envtest's `KUBEBUILDER_ASSETS` names.
//!
//! `kube-apiserver` and `etcd` in it are symbolic links to this `konverge` binary (which acts
//! as the program its name says), `kubectl` one to the kubectl on `PATH`. The path is printed
//! alone on stdout, as `setup-envtest use -p path` prints it, so
//! `export KUBEBUILDER_ASSETS=$(konverge envtest assets)` is the whole set-up. Running it again
//! refreshes the links (after the binary moved, or kubectl changed).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

#[derive(clap::Args)]
pub(crate) struct AssetsArgs {
    /// The folder to write (default: $HOME/.konverge/envtest/bin).
    dir: Option<PathBuf>,
}

pub(super) fn run(args: AssetsArgs) -> anyhow::Result<()> {
    let dir = args
        .dir
        .unwrap_or_else(|| crate::up::default_data_dir().join("envtest").join("bin"));
    let dir = write(&dir)?;
    println!("{}", dir.display());
    Ok(())
}

/// Writes the assets folder `dir` (see the module documentation); returns it absolute.
pub(crate) fn write(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the assets folder {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let konverge = std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .context("finding the konverge binary")?;
    link(&konverge, &dir.join("kube-apiserver"))?;
    link(&konverge, &dir.join("etcd"))?;
    match kubectl_on_path(&dir) {
        Some(kubectl) => link(&kubectl, &dir.join("kubectl"))?,
        None => {
            let stale = dir.join("kubectl");
            if stale.symlink_metadata().is_ok() {
                std::fs::remove_file(&stale)
                    .with_context(|| format!("removing {}", stale.display()))?;
            }
            eprintln!(
                "no kubectl on PATH: {} has kube-apiserver and etcd only (envtest needs \
                 kubectl only for tests that run it)",
                dir.display()
            );
        }
    }
    Ok(dir)
}

/// Points `link` at `target`, replacing whatever `link` was (atomically: a new link is made
/// beside it and renamed over it).
fn link(target: &Path, link: &Path) -> anyhow::Result<()> {
    let fresh = link.with_extension("konverge-new");
    let _ = std::fs::remove_file(&fresh);
    std::os::unix::fs::symlink(target, &fresh)
        .with_context(|| format!("linking {} to {}", fresh.display(), target.display()))?;
    std::fs::rename(&fresh, link).with_context(|| format!("replacing {}", link.display()))?;
    Ok(())
}

/// The kubectl `PATH` finds, resolved, unless it is the one in the assets folder itself.
fn kubectl_on_path(assets: &Path) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .filter(|candidate| candidate.parent() != Some(assets))
        .filter_map(|candidate| candidate.canonicalize().ok())
        .find(|resolved| resolved.is_file() && !resolved.starts_with(assets))
}
