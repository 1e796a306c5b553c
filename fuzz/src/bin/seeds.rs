//! `seeds DIR`: writes a small starting corpus for every target under `DIR/<target>/`, made by
//! the same encoders the node and its peers use (our CDR writer and bag writer, the image
//! crate's PNG and JPEG encoders, safetensors' serializer), so the fuzzer starts from inputs
//! that go deep and mutates them from there.

use std::io::Write as _;
use std::path::Path;

use base64::Engine as _;
use ros2_client::rcl_interfaces as rcl;
use serde_json::json;
use sp_dust3r_core::params::args::ParamValue;
use sp_dust3r_core::msg::{builtin_interfaces, geometry_msgs, rosgraph_msgs, sensor_msgs, std_msgs, tf2_msgs, to_cdr};
use sp_dust3r_node::param_services::to_raw;

type Seeds = Vec<(String, Vec<u8>)>;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: seeds DIR");
        std::process::exit(2);
    };
    let dir = Path::new(&dir);
    ok(std::fs::create_dir_all(dir), dir);
    let corpora: Vec<(&str, Seeds)> = vec![
        ("cdr_image", cdr_image()),
        ("cdr_compressed", cdr_compressed()),
        ("cdr_camera_info", vec![("valid".into(), cdr(&camera_info()))]),
        ("cdr_clock", cdr_clock()),
        ("cdr_tf_static", vec![("mount".into(), cdr(&tf_static()))]),
        ("cdr_pointcloud", cdr_pointcloud()),
        ("param_request", param_request()),
        ("image_raw", image_raw()),
        ("image_png", pngs()),
        ("image_jpeg", jpegs()),
        ("mcap", vec![("bag".into(), mcap(&dir.join("scratch.mcap")))]),
        ("safetensors", vec![("mixed".into(), small_safetensors())]),
        ("superpoint_checkpoint", vec![("tiny".into(), superpoint_checkpoint())]),
        ("dust3r_checkpoint", vec![("tiny".into(), dust3r_checkpoint())]),
        ("tt_superpoint", vec![("answer".into(), tt_superpoint())]),
        ("tt_dust3r", vec![("answer".into(), tt_dust3r())]),
        ("npz", vec![("descriptors".into(), descriptors_npz(2, 4)), ("pointmaps".into(), pointmaps_npz(3, 4))]),
        ("params_yaml", params_yaml()),
        ("ros_args", ros_args()),
    ];
    for (target, seeds) in corpora {
        let d = dir.join(target);
        ok(std::fs::create_dir_all(&d), &d);
        for (name, bytes) in seeds {
            ok(std::fs::write(d.join(&name), bytes), &d.join(name));
        }
    }
    let _ = std::fs::remove_file(dir.join("scratch.mcap"));
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>, what: &Path) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("seeds: {}: {e}", what.display());
        std::process::exit(1)
    })
}

fn cdr<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    to_cdr(msg).unwrap_or_else(|e| panic!("a seed does not serialise: {e}"))
}

fn header() -> std_msgs::Header {
    std_msgs::Header { stamp: builtin_interfaces::Time { sec: 1, nanosec: 5 }, frame_id: "camera".into() }
}

fn image(encoding: &str, width: u32, height: u32, bpp: u32, bigendian: bool) -> sensor_msgs::Image {
    let step = width * bpp;
    sensor_msgs::Image {
        header: header(),
        height,
        width,
        encoding: encoding.into(),
        is_bigendian: bigendian as u8,
        step,
        data: (0..step * height).map(|i| (i * 13 % 256) as u8).collect(),
    }
}

fn cdr_image() -> Seeds {
    [("rgb8", 6, 4, 3, false), ("mono16", 4, 4, 2, true), ("bayer_rggb8", 4, 4, 1, false), ("yuyv", 4, 2, 2, false)]
        .iter()
        .map(|&(e, w, h, b, be)| (e.to_string(), cdr(&image(e, w, h, b, be))))
        .collect()
}

/// A small gradient in `color`, encoded by the image crate.
fn encoded(color: image::ColorType, format: image::ImageFormat) -> Vec<u8> {
    let (w, h) = (9u32, 7u32);
    let channels = color.bytes_per_pixel() as u32;
    let raw: Vec<u8> = (0..w * h * channels).map(|i| (i * 29 % 256) as u8).collect();
    let mut out = std::io::Cursor::new(Vec::new());
    image::write_buffer_with_format(&mut out, &raw, w, h, color, format)
        .unwrap_or_else(|e| panic!("cannot encode a {color:?} seed: {e}"));
    out.into_inner()
}

fn pngs() -> Seeds {
    use image::ColorType as C;
    [("l8", C::L8), ("la8", C::La8), ("rgb8", C::Rgb8), ("rgba8", C::Rgba8), ("l16", C::L16), ("rgb16", C::Rgb16)]
        .into_iter()
        .map(|(n, c)| (n.to_string(), encoded(c, image::ImageFormat::Png)))
        .collect()
}

fn jpegs() -> Seeds {
    use image::ColorType as C;
    [("l8", C::L8), ("rgb8", C::Rgb8)]
        .into_iter()
        .map(|(n, c)| (n.to_string(), encoded(c, image::ImageFormat::Jpeg)))
        .collect()
}

fn compressed(format: &str, data: Vec<u8>) -> sensor_msgs::CompressedImage {
    sensor_msgs::CompressedImage { header: header(), format: format.into(), data }
}

fn cdr_compressed() -> Seeds {
    vec![
        ("png".into(), cdr(&compressed("png", encoded(image::ColorType::Rgb8, image::ImageFormat::Png)))),
        ("jpeg".into(), cdr(&compressed("jpeg", encoded(image::ColorType::Rgb8, image::ImageFormat::Jpeg)))),
    ]
}

fn camera_info() -> sensor_msgs::CameraInfo {
    sensor_msgs::CameraInfo {
        header: header(),
        width: 640,
        height: 480,
        distortion_model: "plumb_bob".into(),
        d: vec![0.1, -0.05, 0.0, 0.0, 0.01],
        k: [500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0],
        r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        p: [500.0, 0.0, 320.0, 0.0, 0.0, 500.0, 240.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        ..Default::default()
    }
}

/// A robot's static tree: base_link -> camera_link -> camera_optical_frame, and another root.
fn tf_static() -> tf2_msgs::TFMessage {
    let tf = geometry_msgs::TransformStamped::fixed;
    tf2_msgs::TFMessage {
        transforms: vec![
            tf("base_link", "camera_link", [0.2, 0.0, 0.1], [0.0, 0.0, 0.0, 1.0]),
            tf("camera_link", "camera_optical_frame", [0.0, 0.0, 0.0], [-0.5, 0.5, -0.5, 0.5]),
            tf(
                "map",
                "odom",
                [1.0, 2.0, 0.0],
                [0.0, 0.0, std::f64::consts::FRAC_1_SQRT_2, std::f64::consts::FRAC_1_SQRT_2],
            ),
        ],
    }
}

/// A pair's cloud as the node publishes it (three points of two views), and the same points in
/// an organised 2 x 2 cloud with padded rows and a hole.
fn cdr_pointcloud() -> Seeds {
    use sp_dust3r_core::dust3r::{cloud::ColouredPoints, Pointmap};
    let view =
        Pointmap { width: 2, height: 1, points: vec![0.1, 0.2, 1.5, -0.3, 0.0, 2.0], confidence: vec![4.0, 9.0] };
    let header = std_msgs::Header { stamp: builtin_interfaces::Time { sec: 5, nanosec: 0 }, frame_id: "cam".into() };
    let views = [ColouredPoints { points: &view, rgb: &[200, 10, 30, 0, 255, 0] }];
    let mut organised = sp_dust3r_core::msg::convert::pointcloud_msg(header.clone(), &views, 3.0, 1);
    let step = organised.point_step as usize;
    let mut data = organised.data.clone();
    data.extend_from_slice(&[0; 4]);
    data.extend_from_slice(&f32::NAN.to_le_bytes().repeat(step / 4));
    data.extend_from_slice(&organised.data[..step]);
    data.extend_from_slice(&[0; 4]);
    (organised.width, organised.height, organised.row_step, organised.data) = (2, 2, 2 * step as u32 + 4, data);
    vec![
        ("pair".into(), cdr(&sp_dust3r_core::msg::convert::pointcloud_msg(header, &views, 3.0, 1))),
        ("organised".into(), cdr(&organised)),
    ]
}

fn cdr_clock() -> Seeds {
    let clock = rosgraph_msgs::Clock { clock: builtin_interfaces::Time { sec: 1_700_000_000, nanosec: 123 } };
    let mut be = cdr(&clock);
    // The same clock with a big-endian header and body, as a big-endian writer sends it.
    be[..4].copy_from_slice(&[0, 0, 0, 0]);
    be[4..8].copy_from_slice(&1_700_000_000i32.to_be_bytes());
    be[8..12].copy_from_slice(&123u32.to_be_bytes());
    vec![("le".into(), cdr(&clock)), ("be".into(), be)]
}

fn param_request() -> Seeds {
    let names = vec!["keypoint_threshold".to_string(), "backend".to_string(), "nope".to_string()];
    let set = rcl::SetParametersRequest {
        parameter: vec![
            ros2_client::parameters::raw::Parameter {
                name: "keypoint_threshold".into(),
                value: to_raw(&ParamValue::Double(0.01)),
            },
            ros2_client::parameters::raw::Parameter {
                name: "max_keypoints".into(),
                value: to_raw(&ParamValue::Integer(500)),
            },
        ],
    };
    let with = |which: u8, body: Vec<u8>| [vec![which], body].concat();
    vec![
        ("list".into(), with(0, cdr(&rcl::ListParametersRequest { prefixes: vec!["keyframe".into()], depth: 0 }))),
        ("get".into(), with(1, cdr(&rcl::GetParametersRequest { names: names.clone() }))),
        ("types".into(), with(2, cdr(&rcl::GetParameterTypesRequest { names: names.clone() }))),
        ("describe".into(), with(3, cdr(&rcl::DescribeParametersRequest { names }))),
        ("set".into(), with(4, cdr(&set))),
        ("set_atomically".into(), with(5, cdr(&set))),
    ]
}

fn image_raw() -> Seeds {
    let mut seeds = Seeds::new();
    for (i, enc) in sp_dust3r_fuzz::ENCODINGS.iter().enumerate() {
        let bpp = match sp_dust3r_core::image::PixelFormat::from_ros_encoding(enc) {
            Ok(f) => f.bytes_per_pixel(),
            Err(_) => 1,
        };
        let (w, h) = (4u16, 3u16);
        let step = w * bpp as u16;
        let mut bytes = vec![i as u8];
        for v in [w, h, step] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.push(0);
        bytes.extend((0..step as usize * h as usize).map(|k| (k * 37 % 256) as u8));
        seeds.push((format!("enc{i}"), bytes));
    }
    seeds
}

/// A bag as replay reads it: raw and compressed images and camera info (our own writer,
/// which tests/bag_play.rs checks against rosbags and ros2 bag).
fn mcap(path: &Path) -> Vec<u8> {
    let mut bag = ok(sp_dust3r_core::bag::BagWriter::create(path), path);
    ok(bag.add_typed_topic::<sensor_msgs::Image>("/cam/image_raw"), path);
    ok(bag.add_typed_topic::<sensor_msgs::CompressedImage>("/cam/image_raw/compressed"), path);
    ok(bag.add_typed_topic::<sensor_msgs::CameraInfo>("/cam/camera_info"), path);
    for t in 0..2u64 {
        ok(bag.write("/cam/camera_info", t * 100, t * 100, &cdr(&camera_info())), path);
        ok(bag.write("/cam/image_raw", t * 100 + 1, t * 100 + 1, &cdr(&image("mono8", 8, 6, 1, false))), path);
        let png = compressed("png", encoded(image::ColorType::L8, image::ImageFormat::Png));
        ok(bag.write("/cam/image_raw/compressed", t * 100 + 2, t * 100 + 2, &cdr(&png)), path);
    }
    ok(bag.finish(), path);
    ok(std::fs::read(path), path)
}

fn tensor_bytes(values: &[f32], dtype: safetensors::Dtype) -> Vec<u8> {
    match dtype {
        safetensors::Dtype::F16 => values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
        safetensors::Dtype::BF16 => values.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// A safetensors file of `tensors` (name, shape, dtype), values from the shape.
fn safetensors_file(tensors: &[(String, Vec<usize>, safetensors::Dtype)]) -> Vec<u8> {
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, shape, dtype)| {
            let n: usize = shape.iter().product();
            tensor_bytes(&(0..n).map(|i| ((i % 17) as f32 - 8.0) * 0.01).collect::<Vec<_>>(), *dtype)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .zip(&data)
        .map(|((name, shape, dtype), d)| {
            let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), d)
                .unwrap_or_else(|e| panic!("seed tensor {name}: {e}"));
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize(views, None).unwrap_or_else(|e| panic!("seed safetensors: {e}"))
}

fn small_safetensors() -> Vec<u8> {
    use safetensors::Dtype as D;
    safetensors_file(&[
        ("a.weight".into(), vec![2, 3], D::F32),
        ("b.weight".into(), vec![4], D::F16),
        ("c.bias".into(), vec![2, 2], D::BF16),
    ])
}

/// Two bytes of length, the config, the weights: the checkpoint targets' framing.
fn framed(config: &str, weights: Vec<u8>) -> Vec<u8> {
    let mut out = (config.len() as u16).to_le_bytes().to_vec();
    out.extend_from_slice(config.as_bytes());
    out.extend(weights);
    out
}

/// A SuperPoint two channels wide, every tensor under transformers' names.
fn superpoint_checkpoint() -> Vec<u8> {
    let config = r#"{"encoder_hidden_sizes": [2, 2, 2, 2], "decoder_hidden_size": 4, "keypoint_decoder_dim": 65, "descriptor_decoder_dim": 4}"#;
    let mut tensors = Vec::new();
    let mut conv = |name: String, o: usize, i: usize, k: usize| {
        tensors.push((format!("{name}.weight"), vec![o, i, k, k], safetensors::Dtype::F32));
        tensors.push((format!("{name}.bias"), vec![o], safetensors::Dtype::F32));
    };
    let mut c_in = 1;
    for i in 0..4 {
        conv(format!("encoder.conv_blocks.{i}.conv_a"), 2, c_in, 3);
        conv(format!("encoder.conv_blocks.{i}.conv_b"), 2, 2, 3);
        c_in = 2;
    }
    conv("keypoint_decoder.conv_score_a".into(), 4, 2, 3);
    conv("keypoint_decoder.conv_score_b".into(), 65, 4, 1);
    conv("descriptor_decoder.conv_descriptor_a".into(), 4, 2, 3);
    conv("descriptor_decoder.conv_descriptor_b".into(), 4, 4, 1);
    framed(config, safetensors_file(&tensors))
}

/// A narrow DUSt3R config and the tensors of its layout up to the DPT heads (whose widths are
/// fixed and large): the loader reads through the transformer and stops at the heads.
fn dust3r_checkpoint() -> Vec<u8> {
    let config = r#"{"output_mode": "pts3d", "head_type": "dpt", "depth_mode": ["exp", -Infinity, Infinity], "conf_mode": ["exp", 1, Infinity], "patch_size": 16, "enc_embed_dim": 8, "enc_depth": 1, "enc_num_heads": 2, "dec_embed_dim": 8, "dec_depth": 4, "dec_num_heads": 2, "pos_embed": "RoPE100"}"#;
    let parsed = sp_dust3r_core::dust3r::Dust3rConfig::from_json(config)
        .unwrap_or_else(|e| panic!("the seed config does not parse: {e}"));
    let tensors: Vec<_> = sp_dust3r_core::dust3r::synthetic::checkpoint_layout(&parsed)
        .into_iter()
        .filter(|(name, _)| !name.starts_with("downstream_head"))
        .map(|(name, shape)| (name, shape, safetensors::Dtype::F32))
        .collect();
    framed(config, safetensors_file(&tensors))
}

/// A .npy of float16 `values` in `shape` (format version 1.0).
fn npy_f16(shape: &[usize], values: &[f32]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut dict = format!("{{'descr': '<f2', 'fortran_order': False, 'shape': {shape_text}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()));
    out
}

/// An NPZ (deflated, as numpy.savez_compressed writes) of named arrays.
fn npz(arrays: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, npy) in arrays {
        zip.start_file(format!("{name}.npy"), options).unwrap_or_else(|e| panic!("seed npz: {e}"));
        zip.write_all(npy).unwrap_or_else(|e| panic!("seed npz: {e}"));
    }
    zip.finish().unwrap_or_else(|e| panic!("seed npz: {e}")).into_inner()
}

fn descriptors_npz(n: usize, dim: usize) -> Vec<u8> {
    let values: Vec<f32> = (0..n * dim).map(|i| 0.5 - (i % 3) as f32 * 0.25).collect();
    npz(&[("descriptors", npy_f16(&[n, dim], &values))])
}

fn pointmaps_npz(h: usize, w: usize) -> Vec<u8> {
    let pts: Vec<f32> = (0..h * w * 3).map(|i| 0.1 * (i % 7) as f32 + if i % 3 == 2 { 1.0 } else { 0.0 }).collect();
    let conf: Vec<f32> = (0..h * w).map(|i| 1.0 + (i % 5) as f32).collect();
    npz(&[
        ("pts3d1", npy_f16(&[h, w, 3], &pts)),
        ("pts3d2", npy_f16(&[h, w, 3], &pts)),
        ("conf1", npy_f16(&[h, w], &conf)),
        ("conf2", npy_f16(&[h, w], &conf)),
    ])
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A superpoint-p150 answer for the targets' frame (the contract's fields).
fn tt_superpoint() -> Vec<u8> {
    let (w, h) = sp_dust3r_fuzz::FRAME_SIZE;
    let answer = json!({
        "num_keypoints": 2,
        "keypoints": [[3.0, 4.0], [20.5, 11.0]],
        "scores": [0.9, 0.2],
        "original_size": {"height": h, "width": w},
        "scale": {"x": w as f64 / 640.0, "y": h as f64 / 480.0},
        "descriptors": {"key": "descriptors", "data": b64(&descriptors_npz(2, 4))},
    });
    answer.to_string().into_bytes()
}

/// A mast3r-blackhole answer for the targets' frame, with a pose.
fn tt_dust3r() -> Vec<u8> {
    let (w, h) = sp_dust3r_fuzz::FRAME_SIZE;
    let view = json!({"orig_w": w, "orig_h": h, "offx": 0.0, "offy": 0.0, "scale": 0.1});
    let answer = json!({
        "npz_b64": b64(&pointmaps_npz(3, 4)),
        "preprocess": [view, view],
        "pose": {"R": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], "t": [0.1, 0.0, 0.0],
                 "focal_1": 300.0, "focal_2": 310.0, "used_known_intrinsics": false},
    });
    answer.to_string().into_bytes()
}

fn params_yaml() -> Seeds {
    vec![
        ("shipped".into(), include_bytes!("../../../config/params.yaml").to_vec()),
        (
            "wildcards".into(),
            b"/**:\n  ros__parameters:\n    use_sim_time: true\n/camera:\n  sp_dust3r:\n    ros__parameters:\n      \
              keypoint_threshold: 0.01\n      max_keypoints: 300\n      backend: cpu\n      expected_rate: [1.0, 2.0]\n"
                .to_vec(),
        ),
    ]
}

fn ros_args() -> Seeds {
    let line = |words: &[&str]| words.join("\0").into_bytes();
    vec![
        (
            "remaps".into(),
            line(&["--ros-args", "-r", "__ns:=/camera", "-r", "__node:=sp", "-r", "image:=/cam/image_raw"]),
        ),
        (
            "params".into(),
            line(&[
                "--ros-args",
                "-p",
                "keypoint_threshold:=0.01",
                "-p",
                "backend:=cpu",
                "-p",
                "max_keypoints:=[1, 2]",
            ]),
        ),
        ("logs".into(), line(&["--ros-args", "--log-level", "debug", "--log-level", "rustdds:=warn", "--", "extra"])),
    ]
}
