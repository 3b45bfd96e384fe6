//! The typed snapshot of one sample: everything the collectors read, nothing derived.
//! Collectors fill it, detectors and outputs read it.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Monotonic time of the sample; only differences between samples mean anything.
    pub at: Duration,
    /// Wall-clock time of the sample, seconds since the Unix epoch.
    pub timestamp: f64,
    /// What the collectors read, one value per type: a collector keeps its data here under a
    /// type of its own ([`Snapshot::put`]), and whatever reads it asks for that type
    /// ([`Snapshot::get`]), so that adding a collector adds no field here. A type absent
    /// means its collector is off, failed or found nothing to read.
    pub sources: Sources,
}

type Shared = Arc<dyn Any + Send + Sync>;

/// Values by type, shared, not copied, between a snapshot and its clones.
#[derive(Clone, Default)]
pub struct Sources(Vec<(TypeId, Shared)>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sources({} values)", self.0.len())
    }
}

impl Snapshot {
    /// Where the value of type `T` is in `sources`, if there is one.
    fn index<T: Any>(&self) -> Option<usize> {
        let id = TypeId::of::<T>();
        self.sources.0.iter().position(|(t, _)| *t == id)
    }

    fn slot<T: Any + Send + Sync>(&self) -> Option<&Shared> {
        self.index::<T>().map(|at| &self.sources.0[at].1)
    }

    /// The value of type `T` a collector put in this snapshot, if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.slot::<T>().and_then(|v| v.downcast_ref::<T>())
    }

    /// The value of type `T`, shared: a reader may keep it past this snapshot (a detector
    /// keeps the previous sample's table to compute rates), and tell a value repeated from
    /// an earlier snapshot from a fresh one with [`Arc::ptr_eq`].
    pub fn shared<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.slot::<T>()
            .and_then(|v| Arc::clone(v).downcast::<T>().ok())
    }

    /// Puts `value` in this snapshot, in the place of the value of its type, if any.
    pub fn put<T: Any + Send + Sync>(&mut self, value: T) {
        debug_assert!(
            !std::any::type_name::<T>().starts_with("alloc::sync::Arc<"),
            "{} put as a value of its own type: a shared value goes in with put_shared",
            std::any::type_name::<T>()
        );
        self.put_shared(Arc::new(value));
    }

    /// Puts a value that other snapshots share (a reading kept between samples).
    pub fn put_shared<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        let value: Shared = value;
        match self.index::<T>() {
            Some(at) => self.sources.0[at].1 = value,
            None => self.sources.0.push((TypeId::of::<T>(), value)),
        }
    }

    /// The value of type `T` to change in place: copied first only if another snapshot
    /// shares it.
    pub fn get_mut<T: Any + Send + Sync + Clone>(&mut self) -> Option<&mut T> {
        let at = self.index::<T>()?;
        let slot = &mut self.sources.0[at].1;
        if Arc::get_mut(slot).is_none() {
            let copy: T = slot.downcast_ref::<T>()?.clone();
            *slot = Arc::new(copy);
        }
        Arc::get_mut(slot)?.downcast_mut::<T>()
    }

    /// Takes the value of type `T` out of this snapshot, when nothing else holds it (a
    /// collector taking its storage back from a snapshot that served its turn). A value
    /// still shared stays where it is.
    pub fn take<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let at = self.index::<T>()?;
        if Arc::strong_count(&self.sources.0[at].1) != 1 {
            return None;
        }
        let (_, value) = self.sources.0.swap_remove(at);
        Arc::try_unwrap(value.downcast::<T>().ok()?).ok()
    }
}

/// This node's pods by UID, from the Kubernetes API rather than the kernel: it lets
/// per-cgroup series and findings name `namespace`/`pod`/`container`. Absent when names are
/// not resolved (not in Kubernetes, switched off, or the first list has not arrived).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pods(pub BTreeMap<String, PodIdentity>);

/// `Deref` and `DerefMut` to the one field of each newtype named: a collector's reading
/// that is a map or a list, under a type of its own.
#[macro_export]
macro_rules! deref {
    ($($t:ident => $inner:ty),* $(,)?) => {$(
        impl std::ops::Deref for $t {
            type Target = $inner;
            fn deref(&self) -> &$inner {
                &self.0
            }
        }
        impl std::ops::DerefMut for $t {
            fn deref_mut(&mut self) -> &mut $inner {
                &mut self.0
            }
        }
    )*};
}

crate::deref! {
    Pods => BTreeMap<String, PodIdentity>,
}

/// A pod's names, for the pod-level cgroups that carry only its UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
    /// Container ID as it appears in cgroup names (the runtime's `containerd://` or
    /// `cri-o://` prefix removed) → container name.
    pub containers: BTreeMap<String, String>,
}

impl Snapshot {
    /// The names of the pod with this UID, when known. Accepts the UID as the API gives it
    /// (`dashes`) or as the systemd cgroup driver writes it (`under_scores`).
    pub fn pod(&self, uid: &str) -> Option<&PodIdentity> {
        let pods = self.get::<Pods>()?;
        pods.get(uid)
            .or_else(|| pods.get(uid.replace('_', "-").as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value is found by its type alone, replaced by the next of its type, and shared with
    /// the snapshot's clones.
    #[test]
    fn sources_by_type() {
        #[derive(Debug, PartialEq)]
        struct Count(u64);
        #[derive(Debug, PartialEq)]
        struct Other(u64);
        let mut snap = Snapshot::default();
        assert_eq!(snap.get::<Count>(), None);
        snap.put(Count(1));
        snap.put(Other(7));
        snap.put(Count(2));
        assert_eq!(snap.get::<Count>(), Some(&Count(2)));
        assert_eq!(snap.get::<Other>(), Some(&Other(7)));
        let copy = snap.clone();
        assert_eq!(copy.get::<Count>(), Some(&Count(2)));
        assert_eq!(format!("{:?}", snap.sources), "Sources(2 values)");
    }

    /// A shared value is neither taken nor changed in place under its sharer: `take` leaves
    /// it, `get_mut` copies it first. A value no one else holds is taken whole.
    #[test]
    fn shared_values_are_copied_before_a_change_and_never_taken() {
        #[derive(Debug, Clone, PartialEq)]
        struct Rows(Vec<u32>);
        let mut snap = Snapshot::default();
        snap.put(Rows(vec![1, 2]));
        let kept = snap.shared::<Rows>().unwrap();
        assert_eq!(snap.take::<Rows>(), None, "still held by `kept`");
        snap.get_mut::<Rows>().unwrap().0.push(3);
        assert_eq!(kept.0, [1, 2], "the sharer's value is unchanged");
        assert!(!Arc::ptr_eq(&kept, &snap.shared::<Rows>().unwrap()));
        let rows = snap.get::<Rows>().unwrap().0.as_ptr();
        let taken = snap.take::<Rows>().unwrap();
        assert_eq!(
            (taken.0.as_ptr(), taken.0.len()),
            (rows, 3),
            "taken, not copied"
        );
        assert_eq!(snap.get::<Rows>(), None);
        snap.put_shared(Arc::clone(&kept));
        assert!(Arc::ptr_eq(&kept, &snap.shared::<Rows>().unwrap()));
    }

    #[test]
    fn pods_are_found_by_api_or_systemd_uid_spelling() {
        let mut snap = Snapshot::default();
        assert_eq!(snap.pod("a-b"), None, "no names resolved");
        let id = PodIdentity {
            namespace: "ns".into(),
            name: "web-0".into(),
            containers: BTreeMap::from([("c0ffee".into(), "app".into())]),
        };
        snap.put(Pods(BTreeMap::from([("1a2b-3c".to_string(), id)])));
        assert_eq!(snap.pod("1a2b-3c").map(|p| p.name.as_str()), Some("web-0"));
        assert_eq!(snap.pod("1a2b_3c").map(|p| p.name.as_str()), Some("web-0"));
        assert_eq!(snap.pod("ffff"), None);
    }
}

/// The daemon's own process, as `process_*` metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_memory_bytes: f64,
    pub virtual_memory_bytes: f64,
    pub start_time_seconds: f64,
    pub open_fds: f64,
}
