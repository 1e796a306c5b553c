//! The download path against an in-test HTTP server that answers like the Hugging Face Hub's
//! `resolve` endpoint (on loopback; nothing leaves the machine): the pinned revision is fetched
//! into the cache in the Hub's layout, and found there on the next run without any server.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;

use common::{fixture_dir, fixture_png};

const REVISION: &str = "734450e9ffe229074f5998494ddc615475cdb20a";

/// Serves `files` under `/magic-leap-community/superpoint/resolve/<REVISION>/<name>` with the
/// headers the Hub sends (etag, x-repo-commit, content-range), honouring `Range: bytes=N-`.
fn serve(listener: TcpListener, files: Vec<(String, Vec<u8>)>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { return };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request = String::new();
        if reader.read_line(&mut request).is_err() {
            continue;
        }
        let (mut range_start, mut range_end) = (None, None);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
                let mut parts = v.trim().split('-');
                range_start = parts.next().and_then(|s| s.parse::<usize>().ok());
                range_end = parts.next().and_then(|s| s.parse::<usize>().ok());
            }
        }
        let path = request.split_whitespace().nth(1).unwrap_or("");
        let prefix = format!("/magic-leap-community/superpoint/resolve/{REVISION}/");
        let file = path.strip_prefix(&prefix).and_then(|name| files.iter().find(|(n, _)| n == name));
        let Some((name, body)) = file else {
            let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            continue;
        };
        let start = range_start.unwrap_or(0).min(body.len());
        let end = range_end.map_or(body.len(), |e| (e + 1).min(body.len())).max(start);
        let slice = &body[start..end];
        let header = format!(
            "HTTP/1.1 206 Partial Content\r\netag: \"etag-{name}\"\r\nx-repo-commit: {REVISION}\r\n\
             content-range: bytes {start}-{}/{}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            end.saturating_sub(1),
            body.len(),
            slice.len()
        );
        let _ = stream.write_all(header.as_bytes());
        let _ = stream.write_all(slice);
        let _ = stream.flush();
        let mut sink = [0u8; 1];
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_millis(10)));
        let _ = stream.read(&mut sink);
    }
}

#[test]
fn downloads_the_pinned_revision_into_the_cache_then_uses_the_cache() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let files: Vec<(String, Vec<u8>)> = ["model.safetensors", "config.json"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(fixture_dir("superpoint").join(f)).unwrap()))
        .collect();
    let expected = files.clone();
    std::thread::spawn(move || serve(listener, files));

    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let png = fixture_png(work.path());
    let run = |envs: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"));
        cmd.arg("superpoint")
            .args(["--image".as_ref(), png.as_os_str(), "--out".as_ref(), work.path().join("o.npz").as_os_str()])
            .env_remove("SP_DUST3R_SUPERPOINT_WEIGHTS")
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_ENDPOINT")
            .env_remove("HF_HUB_OFFLINE")
            .env("HF_HOME", home.path());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };

    let out = run(&[("HF_ENDPOINT", &endpoint)]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("Downloaded"), "{log}");
    let snapshot = home.path().join(format!("hub/models--magic-leap-community--superpoint/snapshots/{REVISION}"));
    for (name, bytes) in &expected {
        assert_eq!(&std::fs::read(snapshot.join(name)).unwrap(), bytes, "{name} content");
    }

    // Offline now: the cache alone must do.
    let out = run(&[("HF_HUB_OFFLINE", "1")]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && log.contains("HfCache"), "{log}");
}
