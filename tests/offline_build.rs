//! README's first command builds and runs on a machine with only a Rust toolchain: a fresh clone
//! of the repository, `cmake` hidden from PATH (Cyclone DDS, the one part that needs it, is the
//! node's), the command run exactly as README writes it. The clone builds into this run's target
//! folder: crates.io dependencies built alike are reused, while the workspace's own crates (the
//! clone's paths are new packages to cargo) and any dependency with other features build anew.

mod common;

use std::path::Path;
use std::process::Command;

/// A folder holding a `cmake` that fails loudly, to stand first on PATH.
fn hide_cmake(dir: &Path) -> std::ffi::OsString {
    let shim = dir.join("no-cmake");
    std::fs::create_dir(&shim).unwrap();
    std::fs::write(
        shim.join("cmake"),
        "#!/bin/sh\necho 'cmake is hidden: this build must not need it' >&2\nexit 127\n",
    )
    .unwrap();
    let exe = shim.join("cmake");
    let mut perms = std::fs::metadata(&exe).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&exe, perms).unwrap();
    std::env::join_paths(std::iter::once(shim).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())))
        .unwrap()
}

#[test]
#[ignore = "builds over this run's artifacts; tools/test.sh runs it after every other test"]
fn readme_main_command_builds_and_runs_from_a_fresh_clone_without_cmake() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let clone = dir.path().join("sp_dust3r");
    let cloned = Command::new("git").args(["clone", "--quiet"]).arg(root).arg(&clone).status().unwrap();
    assert!(cloned.success(), "git clone");
    let path = hide_cmake(dir.path());
    let hidden = Command::new("cmake").env("PATH", &path).output().unwrap();
    assert_eq!(hidden.status.code(), Some(127), "the shim stands first on PATH");

    let (main, _) = common::readme_commands();
    let args: Vec<&str> = main.split_whitespace().collect();
    assert_eq!(args[..3], ["cargo", "run", "--release"], "{main}");
    // This run's target folder (`target/release/sp_dust3r` is this run's binary).
    let exe = Path::new(env!("CARGO_BIN_EXE_sp_dust3r"));
    let target = exe.parent().and_then(Path::parent).unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(&args[1..]).current_dir(&clone);
    // A user's shell: none of the variables cargo sets for this test.
    for (name, _) in std::env::vars() {
        if (name.starts_with("CARGO_") && name != "CARGO_HOME") || name == "RUSTFLAGS" {
            cargo.env_remove(name);
        }
    }
    cargo.env("PATH", &path).env("CARGO_TARGET_DIR", target).env("CARGO_NET_OFFLINE", "true");
    let (summary, stderr) = common::run_with_test_weights(&mut cargo, dir.path());
    assert!(!stderr.contains("cyclors") && !stderr.contains("cmake is hidden"), "{stderr}");
    assert!(stderr.contains("Compiling sp_dust3r_core"), "the clone's crates were built: {stderr}");
    assert!(clone.join(summary["eval"]["metrics"].as_str().unwrap()).is_file(), "{summary}");
}
