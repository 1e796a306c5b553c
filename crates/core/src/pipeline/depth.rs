//! Depth images paired with keyframes by stamp, as message_filters' ApproximateTime pairs a
//! colour and a depth topic: each keyframe gets the depth image whose stamp is nearest its own,
//! within `depth_max_interval`, whichever arrives first (depth may come a little before or after
//! its colour frame, on another topic).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::image::depth::DepthImage;
use crate::vo::odometry::{Stamp, KEEP_KEYFRAMES};

/// Depth images kept for keyframes not decided yet (at 30 Hz, a quarter of a second).
const RECENT: usize = 8;

/// The nearest depth so far for each recent keyframe, and the latest depth images.
#[derive(Default)]
pub struct DepthSync {
    recent: VecDeque<(Stamp, Arc<DepthImage>)>,
    keyframes: BTreeMap<Stamp, Option<(Stamp, Arc<DepthImage>)>>,
}

/// Whether `candidate` (a depth stamp) is within `max` of `stamp` and nearer than `best`.
fn nearer(stamp: Stamp, candidate: Stamp, best: Option<Stamp>, max: Stamp) -> bool {
    let d = (candidate - stamp).abs();
    d <= max && best.is_none_or(|b| d < (b - stamp).abs())
}

impl DepthSync {
    /// A depth image arrived: kept for keyframes to come, and given to each keyframe it is
    /// nearer than what the keyframe has.
    pub fn insert(&mut self, stamp: Stamp, depth: Arc<DepthImage>, max: Stamp) {
        for (&kf, best) in &mut self.keyframes {
            if nearer(kf, stamp, best.as_ref().map(|b| b.0), max) {
                *best = Some((stamp, Arc::clone(&depth)));
            }
        }
        self.recent.push_back((stamp, depth));
        while self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }

    /// A frame became a keyframe: it takes the nearest recent depth image, and any nearer one
    /// that arrives later.
    pub fn keyframe(&mut self, stamp: Stamp, max: Stamp) {
        let mut best: Option<(Stamp, Arc<DepthImage>)> = None;
        for (s, d) in &self.recent {
            if nearer(stamp, *s, best.as_ref().map(|b| b.0), max) {
                best = Some((*s, Arc::clone(d)));
            }
        }
        self.keyframes.insert(stamp, best);
        while self.keyframes.len() > KEEP_KEYFRAMES {
            self.keyframes.pop_first();
        }
    }

    /// The recent depth image nearest `stamp`, within `max` of it.
    pub fn nearest(&self, stamp: Stamp, max: Stamp) -> Option<Arc<DepthImage>> {
        let mut best: Option<&(Stamp, Arc<DepthImage>)> = None;
        for recent in &self.recent {
            if nearer(stamp, recent.0, best.map(|b| b.0), max) {
                best = Some(recent);
            }
        }
        best.map(|(_, d)| Arc::clone(d))
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
        s.keyframe(118 * MS, 20 * MS);
        assert_eq!(s.of_keyframe(118 * MS), Some(depth(2.0)), "12 ms beats 18 ms");
        // A later one nearer still replaces it; one farther does not.
        s.insert(117 * MS, depth(3.0), 20 * MS);
        s.insert(119 * MS + MS / 2, depth(4.0), 20 * MS);
        assert_eq!(s.of_keyframe(118 * MS), Some(depth(3.0)));
        // Nothing within the interval: none, until one comes.
        s.keyframe(300 * MS, 20 * MS);
        assert_eq!(s.of_keyframe(300 * MS), None);
        s.insert(321 * MS, depth(5.0), 20 * MS);
        assert_eq!(s.of_keyframe(300 * MS), None, "21 ms is beyond 20 ms");
        s.insert(290 * MS, depth(6.0), 20 * MS);
        assert_eq!(s.of_keyframe(300 * MS), Some(depth(6.0)));
        assert_eq!(s.of_keyframe(200 * MS), None, "not a keyframe");
    }

    #[test]
    fn a_tracked_frame_takes_the_recent_depth_nearest_its_stamp_within_the_interval() {
        let mut s = DepthSync::default();
        for (i, t) in [100, 133, 167].into_iter().enumerate() {
            s.insert(t * MS, depth(i as f32 + 1.0), 20 * MS);
        }
        assert_eq!(s.nearest(140 * MS, 20 * MS), Some(depth(2.0)));
        assert_eq!(s.nearest(160 * MS, 20 * MS), Some(depth(3.0)));
        assert_eq!(s.nearest(190 * MS, 20 * MS), None, "23 ms from the nearest");
        // Only the newest few are kept: an old frame finds none.
        for t in 0..RECENT as i64 {
            s.insert((200 + 33 * t) * MS, depth(9.0), 20 * MS);
        }
        assert_eq!(s.nearest(100 * MS, 20 * MS), None);
    }
}
