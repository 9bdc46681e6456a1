//! Capturing `tracing` events in tests. One global subscriber, installed
//! on first use, hands each event to the capture running on the emitting
//! thread (if any). Per-thread scoped subscribers (`with_default`) are
//! not used: a callsite another test thread registered while no subscriber
//! was interested could stay cached as "never" and an event was missed now
//! and then. The global subscriber answers every callsite "sometimes", so
//! each event asks [`Subscriber::enabled`], which is true only on a
//! capturing thread.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// One captured event: target, level, message, fields (as text) and the
/// whole event as one `name=value ` line (values in `Debug` form).
#[derive(Clone, Debug)]
pub struct Ev {
    pub target: String,
    pub level: Level,
    pub message: String,
    pub fields: BTreeMap<String, String>,
    pub line: String,
}

impl Ev {
    /// A field's value (`str` fields as written, others in `Debug` form).
    pub fn f(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }
}

thread_local! {
    static CAPTURING: RefCell<Option<Vec<Ev>>> = const { RefCell::new(None) };
}

struct Router;

struct Fields {
    map: BTreeMap<String, String>,
    line: String,
}

impl Visit for Fields {
    fn record_str(&mut self, f: &Field, v: &str) {
        let _ = write!(self.line, "{}={:?} ", f.name(), v);
        self.map.insert(f.name().to_string(), v.to_string());
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        let s = format!("{v:?}");
        let _ = write!(self.line, "{}={s} ", f.name());
        self.map.insert(f.name().to_string(), s);
    }
}

fn capturing() -> bool {
    CAPTURING.with(|c| c.borrow().is_some())
}

impl Subscriber for Router {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        capturing()
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut v = Fields { map: BTreeMap::new(), line: String::new() };
        e.record(&mut v);
        let message = v.map.remove("message").unwrap_or_default();
        let ev = Ev {
            target: e.metadata().target().to_string(),
            level: *e.metadata().level(),
            message,
            fields: v.map,
            line: v.line,
        };
        CAPTURING.with(|c| {
            if let Some(evs) = c.borrow_mut().as_mut() {
                evs.push(ev);
            }
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Run `f` on this thread, capturing every event it emits; return them.
pub fn capture(f: impl FnOnce()) -> Vec<Ev> {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(Router)
            .expect("no other global subscriber in this test binary");
    });
    CAPTURING.with(|c| *c.borrow_mut() = Some(Vec::new()));
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            CAPTURING.with(|c| *c.borrow_mut() = None);
        }
    }
    let stop = Stop;
    f();
    let evs = CAPTURING.with(|c| c.borrow_mut().take()).unwrap_or_default();
    drop(stop);
    evs
}
