//! Collections that give memory back. A burst (50k pods created at once, all pending) grows the maps that hold
//! them to its peak, and Rust's collections keep that capacity after the burst is gone: at 50k pods the
//! scheduling queue alone kept ~90 MB. [`ShrinkWhenSparse`] shrinks a collection to fit once it is three
//! quarters empty, so the cost stays amortized (it regrows by doubling).

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::Hash;

/// Below this capacity shrinking saves too little to be worth a reallocation.
const WORTH_SHRINKING: usize = 1024;

pub trait ShrinkWhenSparse {
    fn shrink_when_sparse(&mut self);
}

macro_rules! shrink_when_sparse {
    ($collection:ty, $($bounds:tt)*) => {
        impl<$($bounds)*> ShrinkWhenSparse for $collection {
            fn shrink_when_sparse(&mut self) {
                if self.capacity() > WORTH_SHRINKING && self.len() < self.capacity() / 4 {
                    self.shrink_to_fit();
                }
            }
        }
    };
}

shrink_when_sparse!(HashMap<K, V>, K: Eq + Hash, V);
shrink_when_sparse!(HashSet<T>, T: Eq + Hash);
shrink_when_sparse!(BinaryHeap<T>, T: Ord);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_shrinks_once_three_quarters_empty_and_not_before() {
        let mut map: HashMap<u32, u32> = (0..10_000).map(|key| (key, key)).collect();
        map.retain(|key, _| *key < 5_000);
        map.shrink_when_sparse();
        // (A map's capacity drops a little with the slots its removals left marked, so compare loosely.)
        assert!(map.capacity() > 10_000, "half full: kept ({})", map.capacity());
        map.retain(|key, _| *key < 100);
        map.shrink_when_sparse();
        assert!(map.capacity() < 1_000 && map.len() == 100, "{}", map.capacity());
    }
}
