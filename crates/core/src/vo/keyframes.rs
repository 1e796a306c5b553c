//! Keyframe selection: a frame becomes a keyframe when too few of its keypoints still match the
//! last keyframe (mutual nearest neighbours), or when tracking says the view has left the map
//! (the frame was lost, placed on few pointmap points, or turned far from the last keyframe),
//! within minimum and maximum intervals of input time. Each new keyframe pairs with the
//! previous one for DUSt3R, which maps the view tracking was losing.

use super::matching::mutual_matches;
use super::odometry::TOdomFrame;
use crate::superpoint::Keypoints;

/// When a frame becomes a keyframe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyframePolicy {
    /// New keyframe when the match ratio falls below this.
    pub match_ratio: f64,
    /// Seconds of input time.
    pub min_interval: f64,
    /// Seconds of input time after which a keyframe is taken regardless.
    pub max_interval: f64,
    /// New keyframe when tracking placed the frame on fewer pointmap points than this.
    pub min_inliers: usize,
    /// New keyframe when the camera turned more than this (degrees) since the last keyframe.
    pub max_rotation_deg: f64,
}

/// How tracking placed a frame, as the keyframe decision reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tracking {
    /// Nothing to track against yet (no pair on the chain), or tracking not run.
    NoMap,
    /// Not placed although the chain has keyframes.
    Lost,
    /// Placed at `t_odom_frame` by `inliers` points from pointmaps.
    Placed {
        /// The frame's pose in the odometry.
        t_odom_frame: TOdomFrame,
        /// PnP inliers among points that came from pointmaps (not seeded between keyframes).
        inliers: usize,
    },
}

/// Why a frame became a keyframe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Too few of its keypoints match the last keyframe's.
    Matches,
    /// The maximum interval passed.
    Interval,
    /// Tracking lost it.
    Lost,
    /// Tracking placed it on too few pointmap points.
    Inliers,
    /// It turned too far from the last keyframe.
    Rotation,
}

impl Why {
    /// A short name for logs and /diagnostics.
    pub fn name(self) -> &'static str {
        match self {
            Why::Matches => "matches",
            Why::Interval => "interval",
            Why::Lost => "lost",
            Why::Inliers => "inliers",
            Why::Rotation => "rotation",
        }
    }
}

/// What a frame is for the keyframe logic.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyframeDecision<F> {
    /// Not a keyframe; `match_ratio` against the last keyframe, when computed.
    Skip {
        /// Share of mutual matches to the last keyframe, when computed.
        match_ratio: Option<f64>,
    },
    /// The first keyframe (or the first after time went backwards): nothing to pair with.
    First,
    /// A new keyframe, to be paired with the previous one (its stamp and payload).
    New {
        /// The previous keyframe's stamp, seconds.
        previous_stamp: f64,
        /// The previous keyframe's payload.
        previous: F,
        /// Share of mutual matches to the previous keyframe, when computed.
        match_ratio: Option<f64>,
        /// What made it one.
        why: Why,
    },
}

/// The last keyframe: stamp, keypoints, pose in the odometry when tracked, payload.
struct Last<F> {
    stamp: f64,
    keypoints: Keypoints,
    pose: Option<TOdomFrame>,
    payload: F,
}

/// Holds the last keyframe and decides on each new frame.
pub struct KeyframeSelector<F> {
    policy: KeyframePolicy,
    last: Option<Last<F>>,
}

impl<F: Clone> KeyframeSelector<F> {
    /// A selector with no keyframe yet.
    pub fn new(policy: KeyframePolicy) -> Self {
        Self { policy, last: None }
    }

    /// New thresholds (a parameter change); the last keyframe is kept.
    pub fn set_policy(&mut self, policy: KeyframePolicy) {
        self.policy = policy;
    }

    /// Forgets the last keyframe: the next frame is a first one (a reset).
    pub fn forget(&mut self) {
        self.last = None;
    }

    /// The last keyframe's stamp and payload (e.g. its image, for the DUSt3R pair).
    pub fn last(&self) -> Option<(f64, &F)> {
        self.last.as_ref().map(|l| (l.stamp, &l.payload))
    }

    /// Decides on a frame stamped `stamp` (seconds of input time) with its keypoints and how
    /// tracking placed it; a frame that becomes a keyframe replaces the last one, whose payload
    /// comes back in `New`.
    pub fn decide(
        &mut self,
        stamp: f64,
        keypoints: &Keypoints,
        tracking: Tracking,
        payload: &F,
    ) -> KeyframeDecision<F> {
        let pose = match tracking {
            Tracking::Placed { t_odom_frame, .. } => Some(t_odom_frame),
            _ => None,
        };
        let this = Last { stamp, keypoints: keypoints.clone(), pose, payload: payload.clone() };
        let Some(last) = &self.last else {
            self.last = Some(this);
            return KeyframeDecision::First;
        };
        let elapsed = stamp - last.stamp;
        if elapsed < 0.0 {
            // A bag looped or time was reset: start over.
            self.last = Some(this);
            return KeyframeDecision::First;
        }
        if elapsed < self.policy.min_interval {
            return KeyframeDecision::Skip { match_ratio: None };
        }
        let ratio = (!keypoints.is_empty())
            .then(|| mutual_matches(keypoints, &last.keypoints).len() as f64 / keypoints.len() as f64);
        let Some(why) = self.why(elapsed, ratio, tracking, last.pose.as_ref()) else {
            return KeyframeDecision::Skip { match_ratio: ratio };
        };
        match self.last.replace(this) {
            Some(previous) => KeyframeDecision::New {
                previous_stamp: previous.stamp,
                previous: previous.payload,
                match_ratio: ratio,
                why,
            },
            None => KeyframeDecision::First,
        }
    }

    /// What, if anything, makes a frame past the minimum interval a keyframe.
    fn why(&self, elapsed: f64, ratio: Option<f64>, tracking: Tracking, last_pose: Option<&TOdomFrame>) -> Option<Why> {
        let p = &self.policy;
        if ratio.is_none_or(|r| r < p.match_ratio) {
            return Some(Why::Matches);
        }
        match tracking {
            Tracking::Lost => return Some(Why::Lost),
            Tracking::Placed { inliers, .. } if inliers < p.min_inliers => return Some(Why::Inliers),
            Tracking::Placed { t_odom_frame, .. }
                if last_pose.is_some_and(|k| k.rotation_error_deg(&t_odom_frame) > p.max_rotation_deg) =>
            {
                return Some(Why::Rotation)
            }
            _ => {}
        }
        (elapsed >= p.max_interval).then_some(Why::Interval)
    }
}
