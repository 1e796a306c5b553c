//! Depth images paired with frames by stamp, as message_filters' ApproximateTime pairs a colour
//! and a depth topic: the frame being described and tracked, and each keyframe, gets the depth
//! image whose stamp is nearest its own, within `depth_max_interval`, whichever arrives first
//! (depth may come a little before or after its colour frame, on another topic). A frame claims
//! its depth when the node takes it, not when it is tracked: describing it takes longer than the
//! few depth images kept for it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::image::depth::DepthImage;
use crate::vo::odometry::{Stamp, KEEP_KEYFRAMES};

/// Depth images kept for frames not taken yet (at 30 Hz, a quarter of a second).
const RECENT: usize = 8;

/// A depth image and its stamp.
type Stamped = (Stamp, Arc<DepthImage>);

/// The nearest depth so far for the frame taken and for each recent keyframe, and the latest
/// depth images.
#[derive(Default)]
pub struct DepthSync {
    recent: VecDeque<Stamped>,
    /// The frame being described and tracked (its stamp), and its depth so far.
    taken: Option<(Stamp, Option<Stamped>)>,
    keyframes: BTreeMap<Stamp, Option<Stamped>>,
}

/// Whether `candidate` (a depth stamp) is within `max` of `stamp` and nearer than `best`.
fn nearer(stamp: Stamp, candidate: Stamp, best: Option<Stamp>, max: Stamp) -> bool {
    let d = (candidate - stamp).abs();
    d <= max && best.is_none_or(|b| d < (b - stamp).abs())
}

impl DepthSync {
    /// A depth image arrived: kept for frames to come, and given to the frame taken and each
    /// keyframe it is nearer than what they have.
    pub fn insert(&mut self, stamp: Stamp, depth: Arc<DepthImage>, max: Stamp) {
        let claims = self.keyframes.iter_mut().map(|(&kf, best)| (kf, best));
        for (frame, best) in claims.chain(self.taken.as_mut().map(|(t, best)| (*t, best))) {
            if nearer(frame, stamp, best.as_ref().map(|b| b.0), max) {
                *best = Some((stamp, Arc::clone(&depth)));
            }
        }
        self.recent.push_back((stamp, depth));
        while self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }

    /// The node took the frame at `stamp` to describe and track: it takes the nearest recent
    /// depth image, and any nearer one that arrives later, until the next frame is taken.
    pub fn take(&mut self, stamp: Stamp, max: Stamp) {
        let mut best: Option<&Stamped> = None;
        for recent in &self.recent {
            if nearer(stamp, recent.0, best.map(|b| b.0), max) {
                best = Some(recent);
            }
        }
        self.taken = Some((stamp, best.cloned()));
    }

    /// The depth image of the frame taken at `stamp`, if it has one.
    pub fn of_taken(&self, stamp: Stamp) -> Option<Arc<DepthImage>> {
        let (taken, best) = self.taken.as_ref()?;
        best.as_ref().filter(|_| *taken == stamp).map(|(_, d)| Arc::clone(d))
    }

    /// The frame taken at `stamp` became a keyframe: it keeps the depth it took, and any nearer
    /// one that arrives later.
    pub fn keyframe(&mut self, stamp: Stamp) {
        let best = self.taken.as_ref().filter(|(taken, _)| *taken == stamp).and_then(|(_, best)| best.clone());
        self.keyframes.insert(stamp, best);
        while self.keyframes.len() > KEEP_KEYFRAMES {
            self.keyframes.pop_first();
        }
    }

    /// The depth image paired with the keyframe at `stamp`, if any.
    pub fn of_keyframe(&self, stamp: Stamp) -> Option<Arc<DepthImage>> {
        self.keyframes.get(&stamp)?.as_ref().map(|(_, d)| Arc::clone(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(z: f32) -> Arc<DepthImage> {
        Arc::new(DepthImage::from_metres(1, 1, vec![z]).unwrap())
    }

    const MS: Stamp = 1_000_000;

    #[test]
    fn a_keyframe_gets_the_nearest_depth_within_the_interval_whether_it_came_before_or_after() {
        let mut s = DepthSync::default();
        s.insert(100 * MS, depth(1.0), 20 * MS);
        s.insert(130 * MS, depth(2.0), 20 * MS);
        s.take(118 * MS, 20 * MS);
        s.keyframe(118 * MS);
        assert_eq!(s.of_keyframe(118 * MS), Some(depth(2.0)), "12 ms beats 18 ms");
        // A later one nearer still replaces it; one farther does not.
        s.insert(117 * MS, depth(3.0), 20 * MS);
        s.insert(119 * MS + MS / 2, depth(4.0), 20 * MS);
        assert_eq!(s.of_keyframe(118 * MS), Some(depth(3.0)));
        // Nothing within the interval: none, until one comes.
        s.take(300 * MS, 20 * MS);
        s.keyframe(300 * MS);
        assert_eq!(s.of_keyframe(300 * MS), None);
        s.insert(321 * MS, depth(5.0), 20 * MS);
        assert_eq!(s.of_keyframe(300 * MS), None, "21 ms is beyond 20 ms");
        s.insert(290 * MS, depth(6.0), 20 * MS);
        assert_eq!(s.of_keyframe(300 * MS), Some(depth(6.0)));
        assert_eq!(s.of_keyframe(200 * MS), None, "not a keyframe");
    }

    #[test]
    fn a_frame_keeps_the_depth_nearest_it_from_when_it_was_taken_while_it_is_described() {
        let mut s = DepthSync::default();
        for (i, t) in [100, 133, 167].into_iter().enumerate() {
            s.insert(t * MS, depth(i as f32 + 1.0), 20 * MS);
        }
        s.take(140 * MS, 20 * MS);
        assert_eq!(s.of_taken(140 * MS), Some(depth(2.0)));
        assert_eq!(s.of_taken(133 * MS), None, "not the frame taken");
        // Describing it takes a third of a second: more depth images come than are kept.
        for t in 0..2 * RECENT as i64 {
            s.insert((200 + 33 * t) * MS, depth(9.0), 20 * MS);
        }
        assert_eq!(s.of_taken(140 * MS), Some(depth(2.0)), "held while it is described");
        // A nearer one that comes late replaces it; the keyframe it becomes keeps that one.
        s.insert(141 * MS, depth(4.0), 20 * MS);
        s.keyframe(140 * MS);
        assert_eq!(s.of_keyframe(140 * MS), Some(depth(4.0)));
        // A frame with none within the interval: none, until one comes.
        s.take(190 * MS, 20 * MS);
        assert_eq!(s.of_taken(190 * MS), None);
        s.insert(185 * MS, depth(5.0), 20 * MS);
        assert_eq!(s.of_taken(190 * MS), Some(depth(5.0)));
    }
}
