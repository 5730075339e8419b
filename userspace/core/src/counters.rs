//! Counter descriptors: every counter the code keeps is declared once, beside its field, with
//! [`counter_set!`](crate::counter_set), and every export (Prometheus text,
//! `lidarxdp::metrics::render`; the stats JSON, `lidarxdp::metrics::Snapshot::to_json`;
//! `lidarxdp stats`) is derived by walking the descriptors. Std only, no I/O: it lives in the
//! core crate so that the decoders declare their counters beside their fields.
//!
//! A [`CounterDesc`] gives a counter's group, name, help, unit, kind and label names; its
//! Prometheus name is `lidarxdp_{group}_{name}` plus `_total` for a [`Kind::Counter`]
//! (Prometheus naming conventions, <https://prometheus.io/docs/practices/naming/>). A struct
//! declared with [`counter_set!`](crate::counter_set) implements [`CounterSet`]: its
//! descriptors in field order ([`CounterSet::DESCS`]), a visitor over `(descriptor, value)`
//! pairs, and a constructor from one value per descriptor.

/// Whether a value only grows (a Prometheus `counter`) or goes up and down (a `gauge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic total since start; exported with the `_total` suffix.
    Counter,
    /// A level (current value, high-water mark, configured cap).
    Gauge,
}

impl Kind {
    /// The Prometheus `# TYPE` word: `counter` or `gauge`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// A family of counters sharing a name prefix and a label set, e.g. `capture` per
/// (`iface`, `queue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// Name prefix after `lidarxdp_` (`[a-z_]+`), and the stats JSON key of the group.
    pub name: &'static str,
    /// Label names of every sample of the group, in order (e.g. `["iface", "queue"]`).
    pub labels: &'static [&'static str],
}

/// One counter: what it counts, in what, labelled how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterDesc {
    /// The group's name ([`Group::name`]).
    pub group: &'static str,
    /// The counter's name within the group (the struct field's name, `[a-z_]+`).
    pub name: &'static str,
    /// One-line help text (Prometheus `# HELP`).
    pub help: &'static str,
    /// Unit of the value, plural (`frames`, `bytes`, `packets`, `subscribers`, ...).
    pub unit: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Label names ([`Group::labels`]).
    pub labels: &'static [&'static str],
}

impl CounterDesc {
    /// The Prometheus metric name: `lidarxdp_{group}_{name}`, plus `_total` for a counter.
    pub fn metric_name(&self) -> String {
        let suffix = match self.kind {
            Kind::Counter => "_total",
            Kind::Gauge => "",
        };
        format!("lidarxdp_{}_{}{suffix}", self.group, self.name)
    }
}

/// A struct of counters with descriptors (implemented by [`counter_set!`](crate::counter_set)).
pub trait CounterSet {
    /// One descriptor per counter, in declaration order.
    const DESCS: &'static [CounterDesc];
    /// Calls `f` once per descriptor of [`Self::DESCS`], in order, with the counter's value.
    fn visit(&self, f: &mut dyn FnMut(&'static CounterDesc, u64));
    /// A value whose every stored counter is `f(descriptor)` (derived counters follow from
    /// them; non-counter fields are default).
    fn from_fn(f: &mut dyn FnMut(&'static CounterDesc) -> u64) -> Self
    where
        Self: Sized;
}

/// Declares a struct of `u64` counters with their descriptors, once.
///
/// ```ignore
/// counter_set! {
///     /// Struct docs.
///     pub struct CaptureSnapshot in CAPTURE;
///     // optional: an atomic twin, `AtomicU64` per field, with `snapshot()` and `store(&plain)`
///     shared /// Twin docs.
///     pub struct CaptureCounters;
///     {
///         /// Help text, one line (also the field's doc).
///         rx_frames: Counter "frames" "Frames taken from the AF_XDP RX ring.",
///     }
///     // optional: counters computed from the others
///     derived {
///         rx_twice: Counter "frames" "Twice the frames." = |c: &Self| 2 * c.rx_frames,
///     }
///     // optional: fields that are not counters (not exported, default in `from_fn`)
///     extra {
///         /// Docs.
///         pub pool: PoolCounters,
///     }
/// }
/// ```
///
/// Generates the plain struct (`Clone, Copy, Debug, Default, PartialEq, Eq`), its
/// [`CounterSet`] impl, `add` (field by field, wrapping) and `minus` (saturating), and the
/// twin when asked.
#[macro_export]
macro_rules! counter_set {
    (
        $(#[$m:meta])*
        $vis:vis struct $name:ident in $group:expr;
        shared $(#[$sm:meta])* $svis:vis struct $shared:ident;
        {
            $( $(#[$fm:meta])* $field:ident : $kind:ident $unit:literal $help:literal, )*
        }
        $($rest:tt)*
    ) => {
        $crate::counter_set! {
            $(#[$m])*
            $vis struct $name in $group;
            { $( $(#[$fm])* $field : $kind $unit $help, )* }
            $($rest)*
        }

        #[doc = concat!("Atomic twin of [`", stringify!($name), "`]: one relaxed `AtomicU64` per counter (statistics, not synchronisation).")]
        $(#[$sm])*
        #[derive(Debug, Default)]
        $svis struct $shared {
            $(
                #[doc = concat!("See [`", stringify!($name), "::", stringify!($field), "`].")]
                pub $field: ::std::sync::atomic::AtomicU64,
            )*
        }

        impl $shared {
            /// A plain copy (relaxed loads; fields may come from adjacent updates).
            #[allow(clippy::needless_update)]
            pub fn snapshot(&self) -> $name {
                $name {
                    $( $field: self.$field.load(::std::sync::atomic::Ordering::Relaxed), )*
                    ..Default::default()
                }
            }

            /// Stores every counter of `v` (relaxed).
            #[allow(dead_code)]
            pub fn store(&self, v: &$name) {
                $( self.$field.store(v.$field, ::std::sync::atomic::Ordering::Relaxed); )*
            }
        }
    };
    (
        $(#[$m:meta])*
        $vis:vis struct $name:ident in $group:expr;
        {
            $( $(#[$fm:meta])* $field:ident : $kind:ident $unit:literal $help:literal, )*
        }
        $( derived {
            $( $(#[$dm:meta])* $dname:ident : $dkind:ident $dunit:literal $dhelp:literal = $dexpr:expr, )*
        } )?
        $( extra {
            $( $(#[$xm:meta])* $xvis:vis $xfield:ident : $xty:ty, )*
        } )?
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $vis struct $name {
            $(
                #[doc = $help]
                $(#[$fm])*
                pub $field: u64,
            )*
            $( $( $(#[$xm])* $xvis $xfield: $xty, )* )?
        }

        impl $crate::counters::CounterSet for $name {
            const DESCS: &'static [$crate::counters::CounterDesc] = &[
                $( $crate::counters::CounterDesc {
                    group: $group.name,
                    name: stringify!($field),
                    help: $help,
                    unit: $unit,
                    kind: $crate::counters::Kind::$kind,
                    labels: $group.labels,
                }, )*
                $( $( $crate::counters::CounterDesc {
                    group: $group.name,
                    name: stringify!($dname),
                    help: $dhelp,
                    unit: $dunit,
                    kind: $crate::counters::Kind::$dkind,
                    labels: $group.labels,
                }, )* )?
            ];

            #[allow(unused_assignments)]
            fn visit(&self, f: &mut dyn FnMut(&'static $crate::counters::CounterDesc, u64)) {
                let d = <Self as $crate::counters::CounterSet>::DESCS;
                let mut i = 0;
                $( f(&d[i], self.$field); i += 1; )*
                $( $( f(&d[i], ($dexpr)(self)); i += 1; )* )?
            }

            #[allow(unused_assignments, clippy::needless_update)]
            fn from_fn(f: &mut dyn FnMut(&'static $crate::counters::CounterDesc) -> u64) -> Self {
                let d = <Self as $crate::counters::CounterSet>::DESCS;
                let mut i = 0;
                $name {
                    $( $field: { let v = f(&d[i]); i += 1; v }, )*
                    ..Default::default()
                }
            }
        }

        impl $name {
            /// Adds `other` counter by counter (wrapping; e.g. the counters of a replaced
            /// instance, or of several interfaces).
            pub fn add(&mut self, other: &$name) {
                $( self.$field = self.$field.wrapping_add(other.$field); )*
            }

            /// `self - other`, counter by counter, saturating at 0 (the increase since an
            /// earlier copy); non-counter fields are `self`'s.
            #[must_use]
            pub fn minus(&self, other: &$name) -> $name {
                let mut r = *self;
                $( r.$field = self.$field.saturating_sub(other.$field); )*
                r
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Group = Group {
        name: "test",
        labels: &["a"],
    };

    crate::counter_set! {
        /// Test set.
        struct Set in TEST;
        shared struct SharedSet;
        {
            x: Counter "frames" "X frames.",
            y: Gauge "bytes" "Y bytes.",
        }
        derived {
            sum: Counter "frames" "X plus Y." = |s: &Set| s.x + s.y,
        }
    }

    #[test]
    fn descriptors_values_and_twin() {
        let names: Vec<String> = Set::DESCS.iter().map(CounterDesc::metric_name).collect();
        assert_eq!(
            names,
            [
                "lidarxdp_test_x_total",
                "lidarxdp_test_y",
                "lidarxdp_test_sum_total"
            ]
        );
        assert_eq!(Set::DESCS[1].unit, "bytes");
        assert_eq!(Set::DESCS[0].labels, ["a"]);
        let mut n = 10;
        let s = Set::from_fn(&mut |_| {
            n += 1;
            n
        });
        assert_eq!((s.x, s.y), (11, 12));
        let mut seen = Vec::new();
        s.visit(&mut |d, v| seen.push((d.name, v)));
        assert_eq!(seen, [("x", 11), ("y", 12), ("sum", 23)]);
        let t = SharedSet::default();
        t.store(&s);
        assert_eq!(t.snapshot(), s);
        let mut a = s;
        a.add(&s);
        assert_eq!((a.x, a.y), (22, 24));
        assert_eq!(a.minus(&s), s);
        assert_eq!(s.minus(&a), Set::default());
    }
}
