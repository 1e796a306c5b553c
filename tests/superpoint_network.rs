//! The network against the upstream HF implementation's outputs on the fixture weights.

mod common;

use common::{fixture_dir, max_abs_diff, SuperPointFixture};
use sp_dust3r_core::superpoint::SuperPointNet;

#[test]
fn encoder_logits_and_descriptor_map_match_reference() {
    let (net, _) = SuperPointNet::load(&fixture_dir("superpoint")).expect("load fixture weights");
    let mut fx = SuperPointFixture::open();
    let image = fx.array("image");
    let (h, w) = (image.shape()[0], image.shape()[1]);
    let plane: Vec<f32> = image.iter().copied().collect();

    let encoded = net.encode(&plane, h, w).unwrap();
    let (ref_enc, _) = fx.chw_as_hwc("encoder_out");
    let enc_diff = max_abs_diff(&encoded.to_dense(), &ref_enc);
    assert!(enc_diff < 1e-4, "encoder output differs by {enc_diff}");

    let out = net.heads(&encoded).unwrap();
    assert_eq!((out.cells_h, out.cells_w, out.descriptor_dim), (60, 80, 256));
    let (ref_logits, _) = fx.chw_as_hwc("score_logits");
    let logit_diff = max_abs_diff(&out.logits, &ref_logits);
    assert!(logit_diff < 1e-4, "score logits differ by {logit_diff}");

    // The fixture stores the descriptor map after HF's L2 normalisation over channels.
    let mut desc = out.descriptors.clone();
    sp_dust3r_core::tensor::l2_normalize_rows(&mut desc, 256, 1e-12);
    let (ref_desc, _) = fx.chw_as_hwc("descriptor_map");
    let desc_diff = max_abs_diff(&desc, &ref_desc);
    assert!(desc_diff < 1e-4, "descriptor map differs by {desc_diff}");
}
