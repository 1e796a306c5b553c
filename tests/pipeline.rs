//! Keyframe selection (mutual nearest-neighbour matching, intervals, tracking quality) and the
//! newest-wins slot.

use std::sync::Arc;
use std::time::Duration;

use sp_dust3r_core::geometry::Transform;
use sp_dust3r_core::superpoint::Keypoints;
use sp_dust3r_core::vo::keyframes::{KeyframeDecision, KeyframePolicy, KeyframeSelector, Tracking, Why};
use sp_dust3r_core::vo::matching::mutual_matches;
use sp_dust3r_core::workers::slot::LatestSlot;

/// `n` pseudo-random unit descriptors of dimension `d`.
fn descriptors(n: usize, d: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            let v: Vec<f32> = (0..d)
                .map(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

fn keypoints(desc: &[Vec<f32>]) -> Keypoints {
    let d = desc.first().map_or(0, Vec::len);
    Keypoints {
        xy: vec![[0.0, 0.0]; desc.len()],
        scores: vec![1.0; desc.len()],
        descriptors: desc.iter().flatten().copied().collect(),
        descriptor_dim: d,
    }
}

fn blend(a: &[f32], b: &[f32], t: f32) -> Vec<f32> {
    let v: Vec<f32> = a.iter().zip(b).map(|(x, y)| (1.0 - t) * x + t * y).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

#[test]
fn mutual_nearest_neighbours_find_the_true_correspondences() {
    let a = descriptors(50, 64, 1);
    let noise = descriptors(50, 64, 2);
    // b[k] is a noisy copy of a[perm(k)]; 10 extra distractors; 5 copies too noisy to match.
    let perm: Vec<usize> = (0..50).map(|k| (k * 17 + 3) % 50).collect();
    let mut b: Vec<Vec<f32>> =
        perm.iter().enumerate().map(|(k, &i)| blend(&a[i], &noise[k], if k < 5 { 0.9 } else { 0.2 })).collect();
    b.extend(descriptors(10, 64, 3));
    let matches = mutual_matches(&keypoints(&a), &keypoints(&b));
    let mut want: Vec<(usize, usize)> = perm.iter().enumerate().skip(5).map(|(k, &i)| (i, k)).collect();
    want.sort();
    let mut got = matches.clone();
    got.sort();
    assert_eq!(got, want);
    assert!(mutual_matches(&keypoints(&a), &Keypoints::default()).is_empty());
}

#[test]
fn keyframes_follow_match_ratio_and_intervals() {
    let mut sel = KeyframeSelector::new(POLICY);
    let scene = descriptors(40, 32, 7);
    let other = descriptors(40, 32, 8);
    let same = keypoints(&scene);
    // 30 % of the scene still visible.
    let mostly_new = keypoints(&scene[..12].iter().chain(&other[12..]).cloned().collect::<Vec<_>>());

    assert_eq!(sel.decide(10.0, &same, Tracking::NoMap, &"f0"), KeyframeDecision::First);
    assert_eq!(
        sel.decide(10.2, &mostly_new, Tracking::NoMap, &"f1"),
        KeyframeDecision::Skip { match_ratio: None },
        "inside the minimum interval"
    );
    assert_eq!(sel.decide(11.0, &same, Tracking::NoMap, &"f2"), KeyframeDecision::Skip { match_ratio: Some(1.0) });
    match sel.decide(11.5, &mostly_new, Tracking::NoMap, &"f3") {
        KeyframeDecision::New { previous_stamp, previous, match_ratio, why } => {
            assert_eq!((previous_stamp, previous, why), (10.0, "f0", Why::Matches));
            assert!((match_ratio.unwrap() - 0.3).abs() < 1e-9);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sel.last(), Some((11.5, &"f3")));
    // Same view for longer than the maximum interval: a keyframe anyway.
    assert_eq!(
        sel.decide(14.0, &mostly_new, Tracking::NoMap, &"f4"),
        KeyframeDecision::Skip { match_ratio: Some(1.0) }
    );
    assert!(matches!(
        sel.decide(16.6, &mostly_new, Tracking::NoMap, &"f5"),
        KeyframeDecision::New { previous: "f3", why: Why::Interval, .. }
    ));
    // A frame without keypoints cannot match: a keyframe once the minimum interval passed.
    assert!(matches!(
        sel.decide(17.2, &Keypoints::default(), Tracking::NoMap, &"f6"),
        KeyframeDecision::New { match_ratio: None, .. }
    ));
    // Time going backwards (a looped bag) starts over.
    assert_eq!(sel.decide(1.0, &same, Tracking::NoMap, &"f7"), KeyframeDecision::First);
}

const POLICY: KeyframePolicy =
    KeyframePolicy { match_ratio: 0.5, min_interval: 0.5, max_interval: 5.0, min_inliers: 50, max_rotation_deg: 20.0 };

/// Placed by `inliers` pointmap points, turned `yaw` degrees from the odometry's origin.
fn placed(yaw: f64, inliers: usize) -> Tracking {
    let turn = nalgebra::Rotation3::from_euler_angles(0.0, yaw.to_radians(), 0.0);
    Tracking::Placed { t_odom_frame: Transform::new(turn, nalgebra::Vector3::zeros()), inliers }
}

fn why<F>(decision: KeyframeDecision<F>) -> Option<Why> {
    match decision {
        KeyframeDecision::New { why, .. } => Some(why),
        _ => None,
    }
}

#[test]
fn keyframes_follow_tracking_quality_once_the_minimum_interval_passed() {
    let scene = keypoints(&descriptors(40, 32, 7));
    let mut sel = KeyframeSelector::new(POLICY);
    assert_eq!(sel.decide(10.0, &scene, placed(0.0, 200), &0), KeyframeDecision::First);
    // Inside the minimum interval nothing about tracking makes a keyframe.
    for (t, tracking) in [(10.1, Tracking::Lost), (10.2, placed(0.0, 10)), (10.3, placed(45.0, 200))] {
        assert_eq!(sel.decide(t, &scene, tracking, &1), KeyframeDecision::Skip { match_ratio: None });
    }
    // Every keypoint still matches: tracked well and turned less than the maximum, no keyframe.
    assert_eq!(sel.decide(11.0, &scene, placed(19.0, 50), &2), KeyframeDecision::Skip { match_ratio: Some(1.0) });
    assert_eq!(why(sel.decide(11.1, &scene, placed(19.0, 49), &3)), Some(Why::Inliers));
    // Rotation is measured from the last keyframe (at 19 degrees now), not the origin.
    assert_eq!(sel.decide(11.7, &scene, placed(38.0, 200), &4), KeyframeDecision::Skip { match_ratio: Some(1.0) });
    assert_eq!(why(sel.decide(11.8, &scene, placed(-1.5, 200), &5)), Some(Why::Rotation));
    assert_eq!(why(sel.decide(12.4, &scene, Tracking::Lost, &6)), Some(Why::Lost));
    // The last keyframe was lost, so it has no pose to turn from; nothing to track against yet
    // says nothing either.
    assert_eq!(sel.decide(13.0, &scene, placed(90.0, 200), &7), KeyframeDecision::Skip { match_ratio: Some(1.0) });
    assert_eq!(sel.decide(13.1, &scene, Tracking::NoMap, &8), KeyframeDecision::Skip { match_ratio: Some(1.0) });
    assert_eq!(sel.last(), Some((12.4, &6)));
}

#[test]
fn latest_slot_keeps_the_newest_and_counts_drops() {
    let slot = Arc::new(LatestSlot::new());
    assert!(!slot.put(1));
    assert!(slot.put(2));
    assert_eq!(slot.take(Duration::from_millis(1)), Some(2));
    assert_eq!(slot.dropped(), 1);
    assert_eq!(slot.take(Duration::from_millis(5)), None, "empty slot times out");

    // A slow worker never sees a backlog: it gets the newest item each time.
    let producer = {
        let slot = Arc::clone(&slot);
        std::thread::spawn(move || {
            for i in 0..200 {
                slot.put(i);
                std::thread::sleep(Duration::from_micros(200));
            }
            slot.close();
        })
    };
    let mut seen = Vec::new();
    while let Some(i) = slot.next() {
        seen.push(i);
        std::thread::sleep(Duration::from_millis(3));
    }
    producer.join().unwrap();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "items arrive in order");
    assert_eq!(*seen.last().unwrap(), 199, "the last item is never lost");
    assert_eq!(seen.len() as u64 + slot.dropped(), 200 + 1, "every item was either taken or counted as dropped");
    assert!(slot.is_closed());
    assert_eq!(slot.next(), None, "a closed, empty slot ends the worker's loop");
}

#[test]
fn a_rest_keeps_what_arrives_and_ends_early_when_the_slot_closes() {
    let slot = Arc::new(LatestSlot::new());
    let t = std::time::Instant::now();
    slot.put(1);
    assert!(slot.rest(Duration::from_millis(30)), "open: the full rest");
    assert!(t.elapsed() >= Duration::from_millis(30), "{:?}", t.elapsed());
    assert_eq!(slot.take(Duration::ZERO), Some(1), "an item that arrived before or during a rest stays");
    // An item arriving mid-rest does not cut it short (a rest is for the other work).
    let putter = {
        let slot = Arc::clone(&slot);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            slot.put(2);
        })
    };
    let t = std::time::Instant::now();
    assert!(slot.rest(Duration::from_millis(60)));
    assert!(t.elapsed() >= Duration::from_millis(60), "{:?}", t.elapsed());
    putter.join().unwrap();
    assert_eq!(slot.take(Duration::ZERO), Some(2));
    // Closing ends a rest at once: a shutdown never waits for it.
    let closer = {
        let slot = Arc::clone(&slot);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            slot.close();
        })
    };
    let t = std::time::Instant::now();
    assert!(!slot.rest(Duration::from_secs(30)), "closed during the rest");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    closer.join().unwrap();
}
