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
    let Some((best_in_b, best_in_a)) = best_per_row_and_column(a, b) else {
        return Vec::new();
    };
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

/// Rows of `a` per task: its block of similarities (128 x 1024 floats, 512 kB) is scanned while
/// it is still in the core's cache, instead of writing and rereading a 4 MB matrix.
const ROWS_PER_TASK: usize = 128;

/// Each row of `a`'s best column in `b`, best and second-best similarity, and each column's best
/// row and similarity: blocks of rows in parallel, each a single-threaded GEMM scanned at once.
#[allow(clippy::type_complexity)]
fn best_per_row_and_column(a: &Keypoints, b: &Keypoints) -> Option<(Vec<(usize, f32, f32)>, Vec<(usize, f32)>)> {
    use rayon::prelude::*;
    thread_local! {
        static SIM: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let (n, m, d) = (a.len(), b.len(), a.descriptor_dim);
    let b_t = MatRef::transposed(&b.descriptors, d, m, d);
    let blocks: Vec<Option<(Vec<(usize, f32, f32)>, Vec<(usize, f32)>)>> = a.descriptors[..n * d]
        .par_chunks(d * ROWS_PER_TASK)
        .enumerate()
        .map(|(block, a_rows)| {
            let rows = a_rows.len() / d;
            SIM.with_borrow_mut(|sim| {
                sim.resize(rows * m, 0.0);
                let sim = &mut sim[..rows * m];
                gemm(sim, m, MatRef::rows(a_rows, rows, d, d), b_t, 1.0, false, Threads::Single).ok()?;
                let mut cols = vec![(0usize, f32::NEG_INFINITY); m];
                let tops = sim
                    .chunks_exact(m)
                    .enumerate()
                    .map(|(r, row)| {
                        let i = block * ROWS_PER_TASK + r;
                        for (best, &s) in cols.iter_mut().zip(row) {
                            if s > best.1 {
                                *best = (i, s);
                            }
                        }
                        top_two(row)
                    })
                    .collect();
                Some((tops, cols))
            })
        })
        .collect();
    let mut rows = Vec::with_capacity(n);
    let mut cols = vec![(0usize, f32::NEG_INFINITY); m];
    // Blocks in row order, so ties go to the first row, as a plain scan would.
    for (tops, block_cols) in blocks.into_iter().collect::<Option<Vec<_>>>()? {
        rows.extend(tops);
        for (best, c) in cols.iter_mut().zip(block_cols) {
            if c.1 > best.1 {
                *best = c;
            }
        }
    }
    Some((rows, cols))
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
