//! The Rust a user needs: `rust-version` in Cargo.toml is what rustup users and colcon builds
//! are told, so it must not be lower than what any locked dependency declares (else an older
//! toolchain fails in the middle of `colcon build`). Our own code against it is clippy's
//! `incompatible_msrv` lint, a gate in CI.

use std::path::PathBuf;
use std::process::Command;

/// A `rust-version`: major, minor, patch.
type Version = (u64, u64, u64);

/// A `rust-version` as (major, minor, patch); a missing part is 0.
fn parse(v: &str) -> Option<Version> {
    let mut parts = v.trim().split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next().flatten().unwrap_or(0), parts.next().flatten().unwrap_or(0)))
}

/// This machine's target triple, as rustc names it.
fn host() -> String {
    let out = Command::new("rustc").arg("-vV").output().expect("rustc runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host").to_string()
}

#[test]
fn rust_version_is_at_least_every_locked_dependencys() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform", &host()])
        .current_dir(&root)
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let members: Vec<&str> =
        meta["workspace_members"].as_array().expect("members").iter().filter_map(|m| m.as_str()).collect();
    let packages = meta["packages"].as_array().expect("packages");
    let declared = |p: &serde_json::Value| p["rust_version"].as_str().and_then(parse);
    let ours: Vec<(String, Option<Version>)> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
        .map(|p| (p["name"].as_str().unwrap_or("?").to_string(), declared(p)))
        .collect();
    assert_eq!(ours.len(), members.len(), "{ours:?}");
    let ours_version = ours[0].1.expect("the workspace declares rust-version");
    assert!(ours.iter().all(|(_, v)| *v == Some(ours_version)), "one rust-version for the workspace: {ours:?}");
    let (needed, by) = packages
        .iter()
        .filter(|p| !p["id"].as_str().is_some_and(|id| members.contains(&id)))
        .filter_map(|p| Some((declared(p)?, format!("{} {}", p["name"].as_str()?, p["version"].as_str()?))))
        .max()
        .expect("dependencies declare rust-version");
    assert!(ours_version >= needed, "rust-version {ours_version:?} is below {by}'s {needed:?}");
    // Nor above it: a higher number turns users away for nothing (our own code is held to the
    // number by clippy).
    assert_eq!(ours_version, needed, "rust-version {ours_version:?} is above every dependency's (highest: {by})");
}

#[test]
fn versions_compare_by_their_numbers() {
    assert_eq!(parse("1.89"), Some((1, 89, 0)));
    assert_eq!(parse("1.88.0"), Some((1, 88, 0)));
    assert!(parse("1.100") > parse("1.89.1"));
    assert_eq!(parse("x"), None);
}
