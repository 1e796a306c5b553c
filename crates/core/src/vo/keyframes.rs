//! Keyframe selection from SuperPoint features: a frame becomes a keyframe when too few of its
//! keypoints still match the last keyframe (mutual nearest neighbours), within minimum and
//! maximum intervals of input time. Each new keyframe pairs with the previous one for DUSt3R.

use super::matching::mutual_matches;
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
    },
}

/// Holds the last keyframe and decides on each new frame.
pub struct KeyframeSelector<F> {
    policy: KeyframePolicy,
    last: Option<(f64, Keypoints, F)>,
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
        self.last.as_ref().map(|(t, _, f)| (*t, f))
    }

    /// Decides on a frame stamped `stamp` (seconds of input time) with its keypoints; a frame
    /// that becomes a keyframe replaces the last one, whose payload comes back in `New`.
    pub fn decide(&mut self, stamp: f64, keypoints: &Keypoints, payload: &F) -> KeyframeDecision<F> {
        let Some((last_stamp, last_kp, _)) = &self.last else {
            self.last = Some((stamp, keypoints.clone(), payload.clone()));
            return KeyframeDecision::First;
        };
        let elapsed = stamp - last_stamp;
        if elapsed < 0.0 {
            // A bag looped or time was reset: start over.
            self.last = Some((stamp, keypoints.clone(), payload.clone()));
            return KeyframeDecision::First;
        }
        if elapsed < self.policy.min_interval {
            return KeyframeDecision::Skip { match_ratio: None };
        }
        let ratio =
            (!keypoints.is_empty()).then(|| mutual_matches(keypoints, last_kp).len() as f64 / keypoints.len() as f64);
        let due = elapsed >= self.policy.max_interval || ratio.is_none_or(|r| r < self.policy.match_ratio);
        if !due {
            return KeyframeDecision::Skip { match_ratio: ratio };
        }
        match self.last.replace((stamp, keypoints.clone(), payload.clone())) {
            Some((previous_stamp, _, previous)) => {
                KeyframeDecision::New { previous_stamp, previous, match_ratio: ratio }
            }
            None => KeyframeDecision::First,
        }
    }
}
