//! Keyframe selection from SuperPoint features: a frame becomes a keyframe when too few of its
//! keypoints still match the last keyframe (mutual nearest neighbours), within minimum and
//! maximum intervals of input time. Each new keyframe pairs with the previous one for DUSt3R.

use crate::superpoint::Keypoints;
use crate::tensor::{gemm, MatRef, Threads};

/// Two descriptors match only if their cosine similarity reaches this (unit descriptors:
/// distance <= 0.77), besides being each other's nearest neighbour.
pub const MIN_MATCH_SIMILARITY: f32 = 0.7;

/// Mutual nearest-neighbour matches between two sets of unit descriptors: pairs (i, j) where j
/// is i's most similar descriptor in `b`, i is j's in `a`, and the similarity is at least
/// [`MIN_MATCH_SIMILARITY`].
pub fn mutual_matches(a: &Keypoints, b: &Keypoints) -> Vec<(usize, usize)> {
    let (n, m, d) = (a.len(), b.len(), a.descriptor_dim);
    if n == 0 || m == 0 || d == 0 || b.descriptor_dim != d {
        return Vec::new();
    }
    let mut sim = vec![0.0f32; n * m];
    let ok = gemm(
        &mut sim,
        m,
        MatRef::rows(&a.descriptors, n, d, d),
        MatRef::transposed(&b.descriptors, d, m, d),
        1.0,
        false,
        Threads::All,
    );
    if ok.is_err() {
        return Vec::new();
    }
    let best_in_b: Vec<usize> = sim.chunks_exact(m).map(argmax).collect();
    let mut best_in_a = vec![0usize; m];
    let mut best_val = vec![f32::NEG_INFINITY; m];
    for (i, row) in sim.chunks_exact(m).enumerate() {
        for (j, &s) in row.iter().enumerate() {
            if s > best_val[j] {
                best_val[j] = s;
                best_in_a[j] = i;
            }
        }
    }
    best_in_b
        .iter()
        .enumerate()
        .filter(|&(i, &j)| best_in_a[j] == i && sim[i * m + j] >= MIN_MATCH_SIMILARITY)
        .map(|(i, &j)| (i, j))
        .collect()
}

fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) }).0
}

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
