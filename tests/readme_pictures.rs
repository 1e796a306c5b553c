//! The pictures the README and docs/pictures.md show are the pictures in `docs/`, each one linked,
//! small, and of the size today's code draws (a picture left from an older layout fails here:
//! remake it with the command under it in docs/pictures.md).

mod common;

use std::path::PathBuf;

use common::markdown::links;

#[test]
fn every_picture_shown_is_in_docs_and_every_one_there_is_shown() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let pictures = std::fs::read_to_string(root.join("docs/pictures.md")).unwrap();
    // Image links, as paths from the root.
    let images = |text: &str, prefix: &str| -> Vec<String> {
        links(text)
            .into_iter()
            .filter(|target| target.ends_with(".png"))
            .map(|target| format!("{prefix}{target}"))
            .collect()
    };
    let (in_readme, in_pictures) = (images(&readme, ""), images(&pictures, "docs/"));
    let mut in_docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".png"))
        .collect();
    in_docs.sort();
    // docs/sample_eval.png is written beside the trajectory plot and named in the text.
    for file in &in_docs {
        let name = file.trim_start_matches("docs/");
        assert!(pictures.contains(name), "{file} is not mentioned in docs/pictures.md");
    }
    let preview = sp_dust3r_core::preview::SIZE;
    let plot = sp_dust3r_core::eval::plot::SIZE;
    let expected = [
        ("docs/keypoints.png", (640, 480)),
        ("docs/pair.png", preview),
        ("docs/sample_eval.png", plot),
        ("docs/sample_eval_trajectory.png", plot),
    ];
    assert_eq!(in_docs, expected.iter().map(|(f, _)| f.to_string()).collect::<Vec<_>>());
    for (file, size) in expected {
        let bytes = std::fs::metadata(root.join(file)).unwrap().len();
        assert!(bytes <= 500 << 10, "{file}: {bytes} bytes, more than 500 KiB");
        let img = image::open(root.join(file)).unwrap();
        assert_eq!((img.width(), img.height()), size, "{file}");
    }
    assert!(!in_readme.is_empty(), "the README shows a picture");
    assert!(in_pictures.len() >= 3, "docs/pictures.md shows at least three pictures: {in_pictures:?}");
    for target in in_readme.iter().chain(&in_pictures) {
        assert!(in_docs.contains(target), "{target} is linked but not in docs/");
    }
}
