//! A bounded keyed store of the last record per object: capped in count and in bytes, oldest write dropped
//! first, and pruned of objects that are gone. Nothing here is written into the objects themselves.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A record's size in memory, roughly: what the byte bound counts.
pub trait Weighed {
    fn weight(&self) -> usize;
}

/// What a [`Records`] may hold.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub count: usize,
    pub bytes: usize,
    /// Records older than this are dropped (`None`: kept until their object goes or the bounds push them out).
    pub age: Option<Duration>,
}

struct Entry<T> {
    uid: String,
    record: T,
    weight: usize,
    written: Instant,
    /// Which write this is: an older position in `order` for the same key is stale.
    sequence: u64,
}

struct Inner<T> {
    entries: HashMap<String, Entry<T>>,
    /// Keys by write, oldest first; a key written again appears again (the stale position is skipped).
    order: VecDeque<(String, u64)>,
    bytes: usize,
    next: u64,
}

/// The last record per `namespace/name`, within [`Bounds`].
pub struct Records<T> {
    bounds: Bounds,
    inner: Mutex<Inner<T>>,
}

impl<T: Clone + Weighed> Records<T> {
    pub fn new(bounds: Bounds) -> Records<T> {
        Records { bounds, inner: Mutex::new(Inner { entries: HashMap::new(), order: VecDeque::new(), bytes: 0, next: 0 }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `record` as the last one of `key` (the object's `uid`), dropping the oldest past the bounds.
    pub fn put(&self, key: &str, uid: &str, record: T) {
        let weight = record.weight() + key.len() + uid.len();
        let mut inner = self.lock();
        let sequence = inner.next;
        inner.next += 1;
        let entry = Entry { uid: uid.to_string(), record, weight, written: Instant::now(), sequence };
        if let Some(old) = inner.entries.insert(key.to_string(), entry) {
            inner.bytes -= old.weight;
        }
        inner.bytes += weight;
        inner.order.push_back((key.to_string(), sequence));
        while inner.entries.len() > self.bounds.count || inner.bytes > self.bounds.bytes {
            if !pop_oldest(&mut inner) {
                break;
            }
        }
        // Keys written many times leave stale positions behind: compact before they outgrow the entries.
        if inner.order.len() > 2 * inner.entries.len() + 64 {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|(key, sequence)| entries.get(key).is_some_and(|entry| entry.sequence == *sequence));
        }
    }

    /// The last record of `key`, unless it is older than the bounds allow.
    pub fn get(&self, key: &str) -> Option<T> {
        let inner = self.lock();
        let entry = inner.entries.get(key)?;
        match self.bounds.age {
            Some(age) if entry.written.elapsed() > age => None,
            _ => Some(entry.record.clone()),
        }
    }

    /// Drops the records of objects `exists` no longer knows (by uid), and those past their age.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        let age = self.bounds.age;
        let mut inner = self.lock();
        let Inner { entries, order, bytes, .. } = &mut *inner;
        entries.retain(|_, entry| {
            let keep = exists(&entry.uid) && age.is_none_or(|age| entry.written.elapsed() <= age);
            if !keep {
                *bytes -= entry.weight;
            }
            keep
        });
        order.retain(|(key, sequence)| entries.get(key).is_some_and(|entry| entry.sequence == *sequence));
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// Drops the oldest live entry; false when there is none.
fn pop_oldest<T>(inner: &mut Inner<T>) -> bool {
    while let Some((key, sequence)) = inner.order.pop_front() {
        if inner.entries.get(&key).is_some_and(|entry| entry.sequence == sequence) {
            if let Some(entry) = inner.entries.remove(&key) {
                inner.bytes -= entry.weight;
            }
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Note(String);

    impl Weighed for Note {
        fn weight(&self) -> usize {
            self.0.len()
        }
    }

    fn store(count: usize, bytes: usize) -> Records<Note> {
        Records::new(Bounds { count, bytes, age: None })
    }

    #[test]
    fn the_oldest_write_goes_first_when_the_count_is_reached_and_a_rewrite_counts_as_new() {
        let records = store(2, 1 << 20);
        records.put("d/a", "ua", Note("1".into()));
        records.put("d/b", "ub", Note("2".into()));
        records.put("d/a", "ua", Note("3".into()));
        records.put("d/c", "uc", Note("4".into()));
        assert_eq!(records.get("d/b"), None, "b was written longest ago");
        assert_eq!(records.get("d/a"), Some(Note("3".into())));
        assert_eq!(records.get("d/c"), Some(Note("4".into())));
    }

    #[test]
    fn bytes_are_bounded_and_counted_back_when_records_go() {
        let records = store(100, 100);
        for index in 0..10 {
            records.put(&format!("d/p{index}"), "u", Note("x".repeat(30)));
        }
        assert!(records.bytes() <= 100, "{}", records.bytes());
        assert_eq!(records.len(), 2, "two records of 30 bytes and their keys fit in 100");
        records.retain(|_| false);
        assert_eq!((records.len(), records.bytes()), (0, 0));
    }

    #[test]
    fn records_of_objects_that_are_gone_are_dropped_and_rewrites_do_not_grow_the_order() {
        let records = store(10, 1 << 20);
        for round in 0..1000 {
            records.put("d/a", "ua", Note(round.to_string()));
        }
        records.put("d/b", "ub", Note("b".into()));
        assert!(records.lock().order.len() <= 2 * 2 + 65);
        records.retain(|uid| uid == "ub");
        assert_eq!(records.get("d/a"), None);
        assert_eq!(records.get("d/b"), Some(Note("b".into())));
    }
}
