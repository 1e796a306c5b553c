//! SuperPoint descriptor matching: mutual nearest neighbours by cosine similarity (one GEMM of
//! the two unit-descriptor sets), with a minimum similarity and, for tracking, Lowe's ratio
//! test on the descriptor distances.

use crate::superpoint::Keypoints;
use crate::tensor::{gemm, MatRef, Threads};

/// Two descriptors match only if their cosine similarity reaches this (unit descriptors:
/// distance <= 0.77), besides being each other's nearest neighbour.
pub const MIN_MATCH_SIMILARITY: f32 = 0.7;

/// What a match must pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatchParams {
    /// Lowest cosine similarity of a match.
    pub min_similarity: f32,
    /// Lowe's ratio: the nearest neighbour's distance is at most this times the second
    /// nearest's (1 disables the test).
    pub max_distance_ratio: f32,
}

impl Default for MatchParams {
    fn default() -> Self {
        Self { min_similarity: MIN_MATCH_SIMILARITY, max_distance_ratio: 1.0 }
    }
}

/// One correspondence: keypoint `query` of the first set and keypoint `train` of the second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Match {
    /// Index in the first set.
    pub query: usize,
    /// Index in the second set.
    pub train: usize,
    /// Their cosine similarity.
    pub similarity: f32,
}

/// Mutual nearest-neighbour matches between two sets of unit descriptors that pass `params`,
/// in the order of the first set.
pub fn match_descriptors(a: &Keypoints, b: &Keypoints, params: &MatchParams) -> Vec<Match> {
    let (n, m, d) = (a.len(), b.len(), a.descriptor_dim);
    if n == 0 || m == 0 || d == 0 || b.descriptor_dim != d {
        return Vec::new();
    }
    if a.descriptors.len() < n * d || b.descriptors.len() < m * d {
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
    // Best and second best in b for each row; best in a for each column.
    let best_in_b: Vec<(usize, f32, f32)> = sim.chunks_exact(m).map(top_two).collect();
    let mut best_in_a = vec![(0usize, f32::NEG_INFINITY); m];
    for (i, row) in sim.chunks_exact(m).enumerate() {
        for (best, &s) in best_in_a.iter_mut().zip(row) {
            if s > best.1 {
                *best = (i, s);
            }
        }
    }
    // Unit vectors: distance^2 = 2 - 2 cos.
    let distance = |s: f32| (2.0 - 2.0 * s).max(0.0).sqrt();
    best_in_b
        .iter()
        .enumerate()
        .filter(|&(i, &(j, s1, s2))| {
            best_in_a[j].0 == i
                && s1 >= params.min_similarity
                && (params.max_distance_ratio >= 1.0 || distance(s1) <= params.max_distance_ratio * distance(s2))
        })
        .map(|(i, &(j, s, _))| Match { query: i, train: j, similarity: s })
        .collect()
}

/// Mutual nearest-neighbour matches at [`MIN_MATCH_SIMILARITY`], without the ratio test: pairs
/// (i, j) where j is i's most similar descriptor in `b` and i is j's in `a`.
pub fn mutual_matches(a: &Keypoints, b: &Keypoints) -> Vec<(usize, usize)> {
    match_descriptors(a, b, &MatchParams::default()).into_iter().map(|m| (m.query, m.train)).collect()
}

/// The index of the largest value, the largest value and the second largest (-inf when there
/// is none).
fn top_two(row: &[f32]) -> (usize, f32, f32) {
    let (mut bi, mut b1, mut b2) = (0, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        if v > b1 {
            (b2, b1, bi) = (b1, v, i);
        } else if v > b2 {
            b2 = v;
        }
    }
    (bi, b1, b2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn set(rows: &[Vec<f32>]) -> Keypoints {
        Keypoints {
            xy: vec![[0.0, 0.0]; rows.len()],
            scores: vec![1.0; rows.len()],
            descriptors: rows.iter().flatten().copied().collect(),
            descriptor_dim: rows[0].len(),
        }
    }

    #[test]
    fn the_ratio_test_drops_a_match_with_a_near_twin_and_keeps_a_distinct_one() {
        // Query 0 has one clear partner; query 1's partner has a near twin in b.
        let a = set(&[unit(&[1.0, 0.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0, 0.0])]);
        let b = set(&[unit(&[0.98, 0.1, 0.0, 0.0]), unit(&[0.0, 1.0, 0.1, 0.0]), unit(&[0.0, 1.0, 0.0, 0.12])]);
        let all = match_descriptors(&a, &b, &MatchParams::default());
        assert_eq!(all.iter().map(|m| (m.query, m.train)).collect::<Vec<_>>(), [(0, 0), (1, 1)]);
        let strict = MatchParams { max_distance_ratio: 0.8, ..MatchParams::default() };
        let kept = match_descriptors(&a, &b, &strict);
        assert_eq!(kept.iter().map(|m| (m.query, m.train)).collect::<Vec<_>>(), [(0, 0)]);
        assert!((kept[0].similarity - 0.98 / (0.98f32 * 0.98 + 0.01).sqrt()).abs() < 1e-6);
    }
}
