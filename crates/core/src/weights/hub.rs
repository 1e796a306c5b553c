use std::path::{Path, PathBuf};

use super::WeightsError;

/// A model published on the Hugging Face Hub, pinned to the revision this code was checked
/// against, with the environment variable that may point at a local copy.
#[derive(Clone, Copy, Debug)]
pub struct HubModel {
    /// Human name, for messages.
    pub name: &'static str,
    /// Hugging Face repository.
    pub repo: &'static str,
    /// Pinned revision (commit).
    pub revision: &'static str,
    /// Environment variable naming a folder.
    pub env_var: &'static str,
    /// Files the folder must hold.
    pub files: &'static [&'static str],
}

/// Where the weights were found, for the log.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightSource {
    /// `--weights DIR` or a parameter.
    Argument,
    /// The environment variable.
    Environment,
    /// The Hugging Face cache.
    HfCache,
    /// Downloaded now.
    Downloaded,
}

/// Where the weights are.
#[derive(Clone, Debug)]
pub struct ResolvedWeights {
    /// The folder.
    pub dir: PathBuf,
    /// How it was found.
    pub source: WeightSource,
}

impl ResolvedWeights {
    /// A file in the folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The Hugging Face hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
/// `~/.cache/huggingface/hub` (the same order as the Python `huggingface_hub`).
pub fn hub_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HF_HUB_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(home) = std::env::var_os("HF_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join("hub");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    home.join(".cache").join("huggingface").join("hub")
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// Told how a download goes (the node shows it on /diagnostics; without one the command line
/// draws a progress bar).
pub trait DownloadProgress: Sync {
    /// `done` of `total` bytes of `file` are in.
    fn bytes(&self, file: &str, done: u64, total: u64);
}

/// Finds the weights of `model`, in order: `explicit` (the `--weights` argument), the model's
/// environment variable, the Hugging Face cache at the pinned revision, else a download of that
/// revision into the cache (with a progress bar) unless `HF_HUB_OFFLINE` is set.
///
/// An explicit folder or variable that lacks a file is an error of its own, not a reason to go
/// looking elsewhere: the user said where the weights are.
pub fn resolve(model: &HubModel, explicit: Option<&Path>) -> Result<ResolvedWeights, WeightsError> {
    resolve_with(model, explicit, None)
}

/// [`resolve`], telling `progress` (instead of drawing a bar) how a download goes; the log
/// gets a line at every tenth of each file.
pub fn resolve_with(
    model: &HubModel,
    explicit: Option<&Path>,
    progress: Option<&dyn DownloadProgress>,
) -> Result<ResolvedWeights, WeightsError> {
    if let Some(path) = explicit {
        return check_folder(model, path, "--weights".to_string(), WeightSource::Argument);
    }
    if let Some(path) = std::env::var_os(model.env_var).filter(|v| !v.is_empty()) {
        return check_folder(model, Path::new(&path), model.env_var.to_string(), WeightSource::Environment);
    }
    let cache = hub_cache_dir();
    let snapshot = cached_snapshot(&cache, model);
    if model.files.iter().all(|f| snapshot.join(f).is_file()) {
        return Ok(ResolvedWeights { dir: snapshot, source: WeightSource::HfCache });
    }
    let why = if offline() {
        "HF_HUB_OFFLINE is set, so no download was tried.".to_string()
    } else {
        match download(model, &cache, progress) {
            Ok(dir) => return Ok(ResolvedWeights { dir, source: WeightSource::Downloaded }),
            Err(e) => format!("The download failed: {e}"),
        }
    };
    Err(WeightsError::NotFound(Box::new(super::NotFound {
        model: model.name,
        files: model.files.join(" + "),
        env_var: model.env_var,
        repo: model.repo,
        revision: model.revision,
        cache: cache.display().to_string(),
        why,
    })))
}

/// The cache's snapshot folder of `model`'s revision: a commit names its folder; a branch (a
/// checkpoint published without a revision we could pin) goes through `refs/<branch>`, which
/// holds the commit it was downloaded at, as the Python `huggingface_hub` writes it.
fn cached_snapshot(cache: &Path, model: &HubModel) -> PathBuf {
    let repo = cache.join(format!("models--{}", model.repo.replace('/', "--")));
    let is_commit = model.revision.len() == 40 && model.revision.bytes().all(|b| b.is_ascii_hexdigit());
    let commit = if is_commit {
        model.revision.to_string()
    } else {
        std::fs::read_to_string(repo.join("refs").join(model.revision))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| model.revision.to_string())
    };
    repo.join("snapshots").join(commit)
}

fn check_folder(
    model: &HubModel,
    path: &Path,
    origin: String,
    source: WeightSource,
) -> Result<ResolvedWeights, WeightsError> {
    // A path to the .safetensors file itself is taken as its folder.
    let dir = if path.is_file() { path.parent().unwrap_or(Path::new(".")) } else { path };
    let missing: Vec<&str> = model.files.iter().copied().filter(|f| !dir.join(f).is_file()).collect();
    if missing.is_empty() {
        Ok(ResolvedWeights { dir: dir.to_path_buf(), source })
    } else {
        Err(WeightsError::IncompleteFolder { origin, path: dir.to_path_buf(), missing: missing.join(" and ") })
    }
}

/// Downloads the pinned revision into the cache (hf-hub writes the same blobs/snapshots layout
/// as the Python client, so both share the files). `HF_ENDPOINT` selects a mirror.
fn download(model: &HubModel, cache: &Path, progress: Option<&dyn DownloadProgress>) -> Result<PathBuf, DownloadError> {
    let mut builder = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cache.to_path_buf()))
        .with_progress(progress.is_none())
        .with_retries(2);
    if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
        builder = builder.with_endpoint(endpoint);
    }
    let api = builder.build().map_err(DownloadError::Client)?;
    let repo = api.repo(hf_hub::Repo::with_revision(
        model.repo.to_string(),
        hf_hub::RepoType::Model,
        model.revision.to_string(),
    ));
    let mut dir = None;
    for file in model.files {
        tracing::info!("downloading {} {} from {}", model.repo, file, repo.url(file));
        // hf-hub asserts on some server answers; a bad mirror must not take the process down.
        let fetch = || match progress {
            Some(sink) => repo.download_with_progress(file, Observed { sink, file, done: 0, total: 0, tenths: 0 }),
            None => repo.download(file),
        };
        let path = std::panic::catch_unwind(std::panic::AssertUnwindSafe(fetch))
            .map_err(|_| DownloadError::Panicked { file })?
            .map_err(|source| DownloadError::File { file, source })?;
        dir = path.parent().map(Path::to_path_buf);
    }
    dir.ok_or(DownloadError::NoFiles)
}

/// A download's progress in words, for the log and the node's /diagnostics:
/// `downloading model.safetensors: 40 % of 5.2 MB`.
pub fn download_step(file: &str, percent: u64, total_bytes: u64) -> String {
    format!("downloading {file}: {percent} % of {:.1} MB", total_bytes as f64 / 1e6)
}

/// hf-hub's progress calls turned into [`DownloadProgress`] and a log line per tenth.
struct Observed<'a> {
    sink: &'a dyn DownloadProgress,
    file: &'static str,
    done: u64,
    total: u64,
    /// Tenths of the file logged so far.
    tenths: u64,
}

impl hf_hub::api::Progress for Observed<'_> {
    fn init(&mut self, size: usize, _filename: &str) {
        self.total = size as u64;
        self.sink.bytes(self.file, 0, self.total);
    }

    fn update(&mut self, size: usize) {
        self.done = (self.done + size as u64).min(self.total);
        self.sink.bytes(self.file, self.done, self.total);
        let tenths = (self.done * 10).checked_div(self.total).unwrap_or(10);
        if tenths > self.tenths {
            self.tenths = tenths;
            tracing::info!("{}", download_step(self.file, tenths * 10, self.total));
        }
    }

    fn finish(&mut self) {}
}

/// Why a download of the pinned revision failed.
#[derive(Debug, thiserror::Error)]
enum DownloadError {
    /// The Hub client could not be set up.
    #[error(transparent)]
    Client(hf_hub::api::sync::ApiError),
    /// A file did not download.
    #[error("{file}: {source}")]
    File { file: &'static str, source: hf_hub::api::sync::ApiError },
    /// The client panicked on the server's answer (caught: a bad mirror must not end the process).
    #[error("{file}: the download client failed on the server's answer")]
    Panicked { file: &'static str },
    /// The model lists no files.
    #[error("no files to download")]
    NoFiles,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_revision_is_found_through_its_ref_a_commit_directly() {
        let cache = tempfile::tempdir().unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let model = |revision| HubModel { name: "m", repo: "org/name", revision, env_var: "X", files: &[] };
        let repo = cache.path().join("models--org--name");
        assert_eq!(cached_snapshot(cache.path(), &model(commit)), repo.join("snapshots").join(commit));
        // No ref yet (never downloaded): a folder that does not exist, so the files are missing.
        assert_eq!(cached_snapshot(cache.path(), &model("main")), repo.join("snapshots/main"));
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), format!("{commit}\n")).unwrap();
        assert_eq!(cached_snapshot(cache.path(), &model("main")), repo.join("snapshots").join(commit));
    }
}
