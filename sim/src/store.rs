//! The object store: every object as JSON, one global resource version, and a bounded history of changes that
//! watches resume from. Writes are serialized under one lock, like etcd's single revision counter.

use crate::error::ApiError;
use crate::resources::ResourceType;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// Names tried for one `generateName` before a 409.
const GENERATE_NAME_ATTEMPTS: usize = 8;
/// Changes kept by default for watches that resume from a resource version; older ones get `410 Gone`.
pub const DEFAULT_HISTORY: usize = 100_000;
/// Bytes of JSON text the history may hold besides what the table shares with it (previous versions, deleted
/// objects): 100k changes of pods are ~250 MB of text otherwise. Older changes go first, as with the count.
/// `WASP_SIM_HISTORY_BYTES` overrides it.
pub const HISTORY_BYTES: usize = 64 << 20;

fn history_bytes_limit() -> usize {
    std::env::var("WASP_SIM_HISTORY_BYTES").ok().and_then(|text| text.parse().ok()).unwrap_or(HISTORY_BYTES)
}
/// Events buffered per watcher before a slow one is cut off (it then resumes or relists).
const FAN_OUT_BUFFER: usize = 200_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct Event {
    pub resource: &'static ResourceType,
    pub kind: EventKind,
    pub object: Arc<Value>,
    /// `object` as JSON text, as stored: watches write it as it is instead of serializing the object again.
    pub text: Arc<str>,
    /// The object before this change (for watches whose selector it leaves or enters).
    pub previous: Option<Arc<Value>>,
    pub revision: u64,
}

type Key = (String, String);

/// An object as the store keeps it: its compact JSON text. A `serde_json::Value` of a running pod (a `BTreeMap`
/// node of ~600 bytes per JSON object) is ~20 KiB, its text ~1.5 KiB: 50k pods held as values were ~1 GiB.
/// Readers get a parsed copy; the history shares the text with the table instead of keeping whole values.
type Stored = Arc<str>;

/// Serialized into a buffer kept per thread, then copied once at its exact size: growing a fresh `String` per
/// write (128 bytes, doubled to ~2 KiB) left the allocator sorting freed chunks of every size.
/// etcd's default `--max-request-bytes` (1.5 MiB): the largest object kube-apiserver can store.
const MAX_OBJECT_BYTES: usize = 1536 * 1024;

fn to_stored(object: &Value) -> Stored {
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        serde_json::to_writer(&mut *buffer, object).expect("JSON values serialize");
        let text: Stored = Arc::from(std::str::from_utf8(buffer).expect("serde_json writes UTF-8"));
        if buffer.capacity() > 1 << 20 {
            *buffer = Vec::new();
        }
        text
    })
}

fn parse(stored: &Stored) -> Arc<Value> {
    Arc::new(serde_json::from_str(stored).expect("the store holds JSON it wrote"))
}

/// A change as the history keeps it, for watches that resume from a resource version.
struct Change {
    resource: &'static ResourceType,
    kind: EventKind,
    object: Stored,
    previous: Option<Stored>,
    revision: u64,
}

impl Change {
    /// Text this change keeps alive on its own, roughly: the previous version (the object is usually the table's).
    fn bytes(&self) -> usize {
        self.previous.as_ref().map_or(0, |previous| previous.len()) + if self.kind == EventKind::Deleted { self.object.len() } else { 0 }
    }

    fn event(&self) -> Arc<Event> {
        Arc::new(Event {
            resource: self.resource,
            kind: self.kind,
            object: parse(&self.object),
            text: self.object.clone(),
            previous: self.previous.as_ref().map(parse),
            revision: self.revision,
        })
    }
}

struct State {
    revision: u64,
    objects: HashMap<String, BTreeMap<Key, Stored>>,
    /// Objects by the uid of each of their owners (resource id, owner uid), so that controllers find their pods
    /// without scanning every pod.
    owned: HashMap<(String, String), Owned>,
    history: VecDeque<Change>,
    history_limit: usize,
    /// What `Change::bytes` adds up to over the history, and its bound.
    history_bytes: usize,
    history_bytes_limit: usize,
}

/// What an owner owns, with counts kept current on every write.
#[derive(Default)]
struct Owned {
    keys: BTreeSet<Key>,
    counts: OwnedCounts,
}

/// Counts of the objects one owner owns.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OwnedCounts {
    pub total: usize,
    /// Not terminating (no `deletionTimestamp`).
    pub live: usize,
    /// Live and Ready (pods).
    pub ready: usize,
}

impl OwnedCounts {
    fn of(object: &Value) -> OwnedCounts {
        let live = object.get("metadata").and_then(|metadata| metadata.get("deletionTimestamp")).is_none();
        OwnedCounts { total: 1, live: live as usize, ready: (live && crate::pdb::is_ready(object)) as usize }
    }
}

/// The uids of an object's owners. Runs on every write (twice for an update), so it reads the fields directly:
/// `Value::pointer` allocates two strings per path segment.
fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object
        .get("metadata")
        .and_then(|metadata| metadata.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|owner| owner.get("uid").and_then(Value::as_str))
}

impl State {
    /// Index upkeep costs nothing for objects without owners (bare pods, nodes, events): their counts (a readiness
    /// check) are only worked out when some owner will keep them.
    fn unindex(&mut self, resource_id: &str, key: &Key, object: &Value) {
        if owner_uids(object).next().is_none() {
            return;
        }
        let counts = OwnedCounts::of(object);
        for uid in owner_uids(object) {
            let entry_key = (resource_id.to_string(), uid.to_string());
            if let Some(owned) = self.owned.get_mut(&entry_key) {
                owned.keys.remove(key);
                owned.counts.total -= counts.total;
                owned.counts.live -= counts.live;
                owned.counts.ready -= counts.ready;
                if owned.keys.is_empty() {
                    self.owned.remove(&entry_key);
                }
            }
        }
    }

    fn index(&mut self, resource_id: &str, key: &Key, object: &Value) {
        if owner_uids(object).next().is_none() {
            return;
        }
        let counts = OwnedCounts::of(object);
        for uid in owner_uids(object) {
            let owned = self.owned.entry((resource_id.to_string(), uid.to_string())).or_default();
            if owned.keys.insert(key.clone()) {
                owned.counts.total += counts.total;
                owned.counts.live += counts.live;
                owned.counts.ready += counts.ready;
            }
        }
    }
}

pub struct Store {
    state: Mutex<State>,
    events: broadcast::Sender<Arc<Event>>,
}

/// What a new watch starts with: the changes to replay, then the live stream, and the store's revision when it
/// began (every change up to it is in the replay, or not of this resource).
pub type WatchStart = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>, u64);

/// One page of a list.
pub struct Page {
    pub items: Vec<Arc<Value>>,
    pub revision: u64,
    pub continue_token: Option<String>,
}

pub fn now_rfc3339() -> String {
    crate::clock::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The value at `path` (`["metadata", "name"]`): what `Value::pointer` finds, without parsing and unescaping a
/// pointer string, which costs most of a scan over thousands of objects.
pub fn field<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(object, |value, key| value.get(key))
}

pub fn name_of(object: &Value) -> &str {
    field(object, &["metadata", "name"]).and_then(Value::as_str).unwrap_or("")
}

pub fn namespace_of(object: &Value) -> &str {
    field(object, &["metadata", "namespace"]).and_then(Value::as_str).unwrap_or("")
}

fn key(resource: &ResourceType, namespace: Option<&str>, name: &str) -> Key {
    (if resource.namespaced { namespace.unwrap_or("default").to_string() } else { String::new() }, name.to_string())
}

fn encode_token(key: &Key) -> String {
    let raw = format!("{}\u{1}{}", key.0, key.1);
    raw.bytes().map(|byte| format!("{byte:02x}")).collect()
}

fn decode_token(token: &str) -> Result<Key, ApiError> {
    let invalid = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|index| token.get(index..index + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect::<Option<_>>()
        .ok_or_else(invalid)?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let (namespace, name) = text.split_once('\u{1}').ok_or_else(invalid)?;
    Ok((namespace.to_string(), name.to_string()))
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        Self::with_history(DEFAULT_HISTORY)
    }

    /// A store that keeps `limit` changes for resuming watches.
    pub fn with_history(limit: usize) -> Self {
        let (events, _) = broadcast::channel(FAN_OUT_BUFFER);
        let state = State {
            revision: 1,
            objects: HashMap::new(),
            owned: HashMap::new(),
            history: VecDeque::new(),
            history_limit: limit.max(1),
            history_bytes: 0,
            history_bytes_limit: history_bytes_limit(),
        };
        Store { state: Mutex::new(state), events }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Records a change: bumps the revision, stamps the object, stores it, keeps it in history, tells watchers.
    fn commit(
        &self,
        state: &mut State,
        resource: &'static ResourceType,
        key: Key,
        kind: EventKind,
        mut object: Value,
        previous: Option<Arc<Value>>,
    ) -> Result<Arc<Value>, ApiError> {
        let revision = state.revision + 1;
        object["metadata"]["resourceVersion"] = json!(revision.to_string());
        let text = to_stored(&object);
        // etcd's request size limit: kube-apiserver cannot store a larger object.
        if kind != EventKind::Deleted && text.len() > MAX_OBJECT_BYTES {
            return Err(ApiError::internal("etcdserver: request is too large"));
        }
        state.revision = revision;
        let object = Arc::new(object);
        let resource_id = resource.id();
        let table = state.objects.entry(resource_id.clone()).or_default();
        let replaced = if kind == EventKind::Deleted { table.remove(&key) } else { table.insert(key.clone(), text.clone()) };
        // The previous version is what the table held: the caller read it under this lock.
        if let (Some(replaced), Some(previous)) = (replaced.as_ref(), previous.as_ref()) {
            debug_assert_eq!(**previous, *parse(replaced));
            state.unindex(&resource_id, &key, previous);
        }
        if kind != EventKind::Deleted {
            state.index(&resource_id, &key, &object);
        }
        let change = Change { resource, kind, object: text.clone(), previous: replaced, revision };
        state.history_bytes += change.bytes();
        state.history.push_back(change);
        while state.history.len() > 1 && (state.history.len() > state.history_limit || state.history_bytes > state.history_bytes_limit) {
            let oldest = state.history.pop_front().expect("not empty");
            state.history_bytes -= oldest.bytes();
        }
        let event = Arc::new(Event { resource, kind, object: object.clone(), text, previous, revision });
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(event);
        Ok(object)
    }

    pub fn get(&self, resource: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Arc<Value>, ApiError> {
        stored(&self.lock(), resource, &key(resource, namespace, name))
    }

    /// Objects in key order, from `continue_token` on, at most `limit` (0: all) that pass `keep`.
    pub fn list(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        limit: usize,
        continue_token: Option<&str>,
        keep: impl Fn(&Value) -> bool,
    ) -> Result<Page, ApiError> {
        let start = continue_token.map(decode_token).transpose()?;
        let state = self.lock();
        let mut items = Vec::new();
        let mut last = None;
        let mut more = false;
        if let Some(table) = state.objects.get(&resource.id()) {
            let range = match &start {
                Some(start) => table.range((std::ops::Bound::Excluded(start.clone()), std::ops::Bound::Unbounded)),
                None => table.range::<Key, _>(..),
            };
            for (entry_key, object) in range {
                if resource.namespaced && namespace.is_some_and(|namespace| entry_key.0 != namespace) {
                    continue;
                }
                let object = parse(object);
                if !keep(&object) {
                    continue;
                }
                if limit > 0 && items.len() == limit {
                    more = true;
                    break;
                }
                items.push(object);
                last = Some(entry_key.clone());
            }
        }
        let continue_token = if more { last.as_ref().map(encode_token) } else { None };
        Ok(Page { items, revision: state.revision, continue_token })
    }

    /// Creates an object, filling in server-set metadata. `namespace` comes from the request path.
    pub fn create(&self, resource: &'static ResourceType, namespace: Option<&str>, mut object: Value) -> Result<Arc<Value>, ApiError> {
        if !object.is_object() {
            return Err(ApiError::bad_request(format!("the body of a {} must be a JSON object", resource.kind)));
        }
        check_type(resource, &object)?;
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        if !object.get("metadata").is_some_and(Value::is_object) {
            object["metadata"] = json!({});
        }
        let namespace = if resource.namespaced {
            let in_body = object.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string);
            match (namespace, in_body) {
                (Some(path), Some(body)) if path != body => {
                    return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"))
                }
                (Some(path), _) => Some(path.to_string()),
                (None, body) => Some(body.unwrap_or_else(|| "default".into())),
            }
        } else {
            None
        };
        if let Some(namespace) = &namespace {
            object["metadata"]["namespace"] = json!(namespace);
        }
        let mut state = self.lock();
        if let Some(namespace) = &namespace {
            let namespaces = crate::resources::find("", "v1", "namespaces").expect("served");
            let exists = state.objects.get(&namespaces.id()).is_some_and(|table| table.contains_key(&(String::new(), namespace.clone())));
            if !exists {
                return Err(ApiError::not_found("namespaces", "", namespace));
            }
        }
        let taken =
            |state: &State, name: &str| state.objects.get(&resource.id()).is_some_and(|table| table.contains_key(&key(resource, namespace.as_deref(), name)));
        let name = match object.pointer("/metadata/name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => match object.pointer("/metadata/generateName").and_then(Value::as_str) {
                // A generated name that is taken is generated again, as kube-apiserver does since 1.32
                // (RetryGenerateName, 8 attempts); only then is it a 409.
                Some(prefix) if !prefix.is_empty() => {
                    let mut name = format!("{prefix}{}", random_suffix());
                    for _ in 1..GENERATE_NAME_ATTEMPTS {
                        if !taken(&state, &name) {
                            break;
                        }
                        name = format!("{prefix}{}", random_suffix());
                    }
                    name
                }
                _ => return Err(ApiError::invalid(resource.kind, "", "metadata.name", "Required value: name or generateName is required")),
            },
        };
        validate_name(resource, &name)?;
        let object_key = key(resource, namespace.as_deref(), &name);
        if taken(&state, &name) {
            return Err(ApiError::already_exists(resource.plural, resource.group, &name));
        }
        // Named first: defaults may use the name (a Namespace's `kubernetes.io/metadata.name` label).
        object["metadata"]["name"] = json!(name);
        crate::defaults::apply(resource, &mut object)?;
        let metadata = &mut object["metadata"];
        metadata["uid"] = json!(uuid::Uuid::new_v4().to_string());
        metadata["creationTimestamp"] = json!(now_rfc3339());
        metadata["generation"] = json!(1);
        if let Some(map) = metadata.as_object_mut() {
            map.remove("deletionTimestamp");
        }
        self.commit(&mut state, resource, object_key, EventKind::Added, object, None)
    }

    /// Read-modify-write under the store lock. `change` may fail to abort. A change that leaves the object as it
    /// was is not a write (no new resource version, no event), as in the real API server.
    pub fn mutate(
        &self,
        resource: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        change: impl FnOnce(&mut Value) -> Result<(), ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let object_key = key(resource, namespace, name);
        // Parsing and copying the object are most of a write's work: they are done before taking the lock, on the
        // text as it was, so that other writers are not held up. If another write came in between, they are
        // done again under the lock; `change` itself runs once, under the lock, on the current version.
        let read = self.lock().objects.get(&resource.id()).and_then(|table| table.get(&object_key)).cloned();
        let prepared = read.as_ref().map(|text| {
            let current = parse(text);
            let updated = (*current).clone();
            (current, updated)
        });
        let mut state = self.lock();
        let still_current =
            |text: &Stored| state.objects.get(&resource.id()).and_then(|table| table.get(&object_key)).is_some_and(|now| Arc::ptr_eq(now, text));
        let (current, mut updated) = match (read.as_ref(), prepared) {
            (Some(text), Some(prepared)) if still_current(text) => prepared,
            _ => {
                let current = stored(&state, resource, &object_key)?;
                let updated = (*current).clone();
                (current, updated)
            }
        };
        change(&mut updated)?;
        // Identity fields never change through an update.
        if !updated.get("metadata").is_some_and(Value::is_object) {
            updated["metadata"] = json!({});
        }
        for field in ["name", "namespace", "uid", "creationTimestamp"] {
            match current["metadata"].get(field) {
                Some(value) => updated["metadata"][field] = value.clone(),
                None => {
                    updated["metadata"].as_object_mut().expect("set above").remove(field);
                }
            }
        }
        updated["apiVersion"] = current["apiVersion"].clone();
        updated["kind"] = current["kind"].clone();
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        if updated == *current {
            return Ok(current);
        }
        if updated.get("spec") != current.get("spec") {
            let generation = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
            updated["metadata"]["generation"] = json!(generation + 1);
        }
        self.commit(&mut state, resource, object_key, EventKind::Modified, updated, Some(current))
    }

    /// Removes an object now.
    pub fn remove(&self, resource: &'static ResourceType, namespace: Option<&str>, name: &str) -> Result<Arc<Value>, ApiError> {
        let mut state = self.lock();
        let object_key = key(resource, namespace, name);
        let current = stored(&state, resource, &object_key)?;
        let object = (*current).clone();
        self.commit(&mut state, resource, object_key, EventKind::Deleted, object, Some(current))
    }

    /// Removes an object now if `precondition` holds for the stored one (say, its uid is the one a timer was
    /// started for: a pod deleted and created again under the same name is another pod). `Ok(None)`: it did not.
    pub fn remove_if(
        &self,
        resource: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        precondition: impl FnOnce(&Value) -> bool,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let mut state = self.lock();
        let object_key = key(resource, namespace, name);
        let current = stored(&state, resource, &object_key)?;
        if !precondition(&current) {
            return Ok(None);
        }
        let object = (*current).clone();
        self.commit(&mut state, resource, object_key, EventKind::Deleted, object, Some(current)).map(Some)
    }

    /// Starts a watch: the changes after `since` still in history (or, without `since`, every existing object as
    /// ADDED), then a live stream. Too old a `since` is `410 Gone`, and the client relists.
    pub fn watch(&self, resource: &'static ResourceType, since: Option<u64>) -> Result<WatchStart, ApiError> {
        let state = self.lock();
        let receiver = self.events.subscribe();
        let backlog = match since {
            Some(since) => {
                let oldest = state.history.front().map_or(state.revision, |event| event.revision);
                if since + 1 < oldest && since < state.revision {
                    return Err(ApiError::gone(format!("too old resource version: {since} ({})", oldest - 1)));
                }
                state.history.iter().filter(|change| change.revision > since && std::ptr::eq(change.resource, resource)).map(Change::event).collect()
            }
            None => state
                .objects
                .get(&resource.id())
                .map(|table| {
                    table
                        .values()
                        .map(|text| {
                            let object = parse(text);
                            let revision = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|text| text.parse().ok()).unwrap_or(0);
                            Arc::new(Event { resource, kind: EventKind::Added, object, text: text.clone(), previous: None, revision })
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        Ok((backlog, receiver, state.revision))
    }

    /// Objects of a resource (all namespaces), for controllers.
    pub fn all(&self, resource: &ResourceType) -> Vec<Arc<Value>> {
        self.lock().objects.get(&resource.id()).map(|table| table.values().map(parse).collect()).unwrap_or_default()
    }

    /// Calls `visit` with each object of a resource whose JSON text passes `text_filter`, one parsed object at a
    /// time, outside the lock: a pass over 50k pods never holds them all as values (~20 KiB each), and skips
    /// parsing those the filter rules out.
    pub fn each(&self, resource: &ResourceType, text_filter: impl Fn(&str) -> bool, mut visit: impl FnMut(&Value)) {
        let texts: Vec<Stored> =
            self.lock().objects.get(&resource.id()).map(|table| table.values().filter(|text| text_filter(text)).cloned().collect()).unwrap_or_default();
        for text in texts {
            visit(&parse(&text));
        }
    }

    /// Objects of a resource in one namespace, in name order.
    pub fn all_in(&self, resource: &ResourceType, namespace: &str) -> Vec<Arc<Value>> {
        let state = self.lock();
        let Some(table) = state.objects.get(&resource.id()) else { return Vec::new() };
        let start = (namespace.to_string(), String::new());
        table.range(start..).take_while(|(entry_key, _)| entry_key.0 == namespace).map(|(_, object)| parse(object)).collect()
    }

    /// Objects of a resource with an owner reference to `owner_uid`, in key order.
    pub fn owned(&self, resource: &ResourceType, owner_uid: &str) -> Vec<Arc<Value>> {
        let state = self.lock();
        let (Some(owned), Some(table)) = (state.owned.get(&(resource.id(), owner_uid.to_string())), state.objects.get(&resource.id())) else {
            return Vec::new();
        };
        owned.keys.iter().filter_map(|owned_key| table.get(owned_key).map(parse)).collect()
    }

    /// How many objects of a resource `owner_uid` owns, how many are live and how many ready, without a scan.
    pub fn owned_counts(&self, resource: &ResourceType, owner_uid: &str) -> OwnedCounts {
        self.lock().owned.get(&(resource.id(), owner_uid.to_string())).map(|owned| owned.counts).unwrap_or_default()
    }

    pub fn count(&self, resource: &ResourceType) -> usize {
        self.lock().objects.get(&resource.id()).map_or(0, BTreeMap::len)
    }

    /// A receiver of every change, for controllers.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }
}

fn stored(state: &State, resource: &ResourceType, object_key: &Key) -> Result<Arc<Value>, ApiError> {
    state
        .objects
        .get(&resource.id())
        .and_then(|table| table.get(object_key))
        .map(parse)
        .ok_or_else(|| ApiError::not_found(resource.plural, resource.group, &object_key.1))
}

fn check_type(resource: &ResourceType, object: &Value) -> Result<(), ApiError> {
    let kind = object.get("kind").and_then(Value::as_str);
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    if kind.is_some_and(|kind| kind != resource.kind) || api_version.is_some_and(|version| version != resource.api_version()) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({}), or the kind ({}) is not {}",
            api_version.unwrap_or(""),
            resource.api_version(),
            kind.unwrap_or(""),
            resource.kind
        )));
    }
    Ok(())
}

/// DNS-1123 subdomain, as the API server requires of most names.
fn validate_name(resource: &ResourceType, name: &str) -> Result<(), ApiError> {
    let valid = name.len() <= 253
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(
            resource.kind,
            name,
            "metadata.name",
            "Invalid value: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ))
    }
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char).collect()
}

/// Checks an update's resource version against the stored one (optimistic concurrency).
pub fn check_resource_version(resource: &ResourceType, current: &Value, update: &Value) -> Result<(), ApiError> {
    let wanted = update.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|version| !version.is_empty());
    let stored = current.pointer("/metadata/resourceVersion").and_then(Value::as_str);
    match wanted {
        Some(wanted) if Some(wanted) != stored => Err(ApiError::conflict(
            resource.plural,
            resource.group,
            name_of(current),
            "the object has been modified; please apply your changes to the latest version and try again",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;

    fn store_with_default_namespace() -> Store {
        let store = Store::new();
        store.create(resources::find("", "v1", "namespaces").unwrap(), None, json!({"metadata": {"name": "default"}})).unwrap();
        store
    }

    #[test]
    fn what_kube_apiserver_refuses_is_refused() {
        let store = store_with_default_namespace();
        let pods = resources::pods();
        let pod = |metadata: Value| json!({"metadata": metadata, "spec": {"containers": [{"name": "a", "image": "a"}]}});
        let error = |metadata: Value| match store.create(pods, Some("default"), pod(metadata)) {
            Ok(stored) => panic!("stored {}", name_of(&stored)),
            Err(error) => error,
        };
        let long = "x".repeat(64);
        let refused = error(json!({"name": "p", "labels": {"app": long}}));
        assert_eq!(refused.code, 422);
        assert!(
            refused.message.contains("metadata.labels: Invalid value: \"xxxx") && refused.message.contains("must be no more than 63 characters"),
            "{}",
            refused.message
        );
        assert!(error(json!({"name": "p", "labels": {"bad key": "v"}})).message.contains("name part must consist of alphanumeric characters"));
        assert!(error(json!({"name": "p", "labels": {"Example.com/k": "v"}})).message.contains("prefix part a lowercase RFC 1123 subdomain"));
        assert!(error(json!({"name": "p", "labels": {"k": "-v"}})).message.contains("a valid label must be an empty string"));
        let huge = "y".repeat(300 * 1024);
        assert!(error(json!({"name": "p", "annotations": {"note": huge}})).message.contains("metadata.annotations: Too long: must have at most 262144 bytes"));
        // 2 MiB of small labels: each is valid, the object is not storable.
        let labels: serde_json::Map<String, Value> = (0..60_000).map(|index| (format!("label-{index}"), json!("value-of-some-length"))).collect();
        let too_large = error(json!({"name": "p", "labels": labels}));
        assert_eq!((too_large.code, too_large.message.as_str()), (500, "Internal error occurred: etcdserver: request is too large"));
        assert!(store.create(pods, Some("default"), pod(json!({"name": "p", "labels": {"example.com/app": "web", "empty": ""}}))).is_ok());
        // Updates are held to the same rules.
        let updated = store.mutate(pods, Some("default"), "p", |pod| {
            pod["metadata"]["labels"]["app"] = json!("z".repeat(64));
            crate::defaults::apply_on_update(pods, pod)
        });
        assert_eq!(updated.unwrap_err().code, 422);
    }

    #[test]
    fn create_get_list_with_pages() {
        let store = store_with_default_namespace();
        for index in 0..5 {
            store.create(resources::nodes(), None, json!({"metadata": {"name": format!("n{index}")}})).unwrap();
        }
        assert_eq!(name_of(&store.get(resources::nodes(), None, "n3").unwrap()), "n3");
        let first = store.list(resources::nodes(), None, 2, None, |_| true).unwrap();
        assert_eq!(first.items.len(), 2);
        let second = store.list(resources::nodes(), None, 10, first.continue_token.as_deref(), |_| true).unwrap();
        let names: Vec<&str> = second.items.iter().map(|item| name_of(item)).collect();
        assert_eq!(names, ["n2", "n3", "n4"]);
        assert!(second.continue_token.is_none());
        assert_eq!(store.create(resources::nodes(), None, json!({"metadata": {"name": "n1"}})).unwrap_err().code, 409);
    }

    #[test]
    fn unchanged_updates_are_not_writes() {
        let store = store_with_default_namespace();
        let node = store.create(resources::nodes(), None, json!({"metadata": {"name": "n1"}})).unwrap();
        let same = store.mutate(resources::nodes(), None, "n1", |_| Ok(())).unwrap();
        assert_eq!(node.pointer("/metadata/resourceVersion"), same.pointer("/metadata/resourceVersion"));
        let changed = store.mutate(resources::nodes(), None, "n1", |object| {
            object["spec"] = json!({"unschedulable": true});
            Ok(())
        });
        assert_ne!(node.pointer("/metadata/resourceVersion"), changed.unwrap().pointer("/metadata/resourceVersion"));
    }

    /// Writers prepare outside the lock; one that was overtaken must apply its change to the newer version, or
    /// updates are lost (as a read-modify-write without the lock would lose them).
    #[test]
    fn concurrent_updates_of_one_object_are_all_kept() {
        const WRITERS: usize = 4;
        const EACH: usize = 250;
        let store = Arc::new(store_with_default_namespace());
        store.create(resources::nodes(), None, json!({"metadata": {"name": "n1", "annotations": {"count": "0", "padding": "x".repeat(4000)}}})).unwrap();
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        store
                            .mutate(resources::nodes(), None, "n1", |node| {
                                let count: usize = node["metadata"]["annotations"]["count"].as_str().unwrap().parse().unwrap();
                                node["metadata"]["annotations"]["count"] = json!((count + 1).to_string());
                                Ok(())
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let node = store.get(resources::nodes(), None, "n1").unwrap();
        assert_eq!(node["metadata"]["annotations"]["count"], json!((WRITERS * EACH).to_string()));
    }

    #[test]
    fn a_generated_name_that_is_taken_is_generated_again() {
        let store = store_with_default_namespace();
        let pod = || json!({"metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "a"}]}});
        fastrand::seed(7);
        let first = store.create(resources::pods(), Some("default"), pod()).unwrap();
        // The same seed draws the same suffix first: taken, so another is drawn, not a 409.
        fastrand::seed(7);
        let second = store.create(resources::pods(), Some("default"), pod()).unwrap();
        assert!(name_of(&first).starts_with("web-") && name_of(&second).starts_with("web-"));
        assert_ne!(name_of(&first), name_of(&second));
    }

    #[test]
    fn watch_resumes_from_history_and_expires() {
        let store = store_with_default_namespace();
        store.create(resources::nodes(), None, json!({"metadata": {"name": "a"}})).unwrap();
        let since = store.revision();
        store.create(resources::nodes(), None, json!({"metadata": {"name": "b"}})).unwrap();
        let (backlog, _, _) = store.watch(resources::nodes(), Some(since)).unwrap();
        assert_eq!(backlog.len(), 1);
        assert_eq!(name_of(&backlog[0].object), "b");
        let (initial, _, _) = store.watch(resources::nodes(), None).unwrap();
        assert_eq!(initial.len(), 2, "a watch without a version starts with every object");
    }
}
