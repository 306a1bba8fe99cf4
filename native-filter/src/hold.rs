//! Holding a request the table can only answer with the 503 Status, the
//! native way: the same promise as the proxy-wasm filter's `hold.rs` (at
//! most `max_ms` per request, then the 503 it would have had; within the
//! worker's bounds on what held requests claim — `hold_claim.rs`: requests,
//! per client, bodies — beyond them the 503 at once), without a call of
//! its own. The refresher's `GetTable` long poll already brings every new
//! table to this process the moment mvp-ext-proc publishes it, so a held
//! request waits for the process's table to move past the version it was
//! refused by, or for its deadline, whichever comes first — and is then
//! routed again on its worker.
//!
//! Who does what:
//! - a worker parks the request (`StopAllIterationAndWatermark`, so its
//!   body waits too), gives it a scheduler (Envoy's, bound to the stream:
//!   an event for a stream that is gone is dropped), lists a [`Waiter`]
//!   process-wide and tells the main thread;
//! - the main thread (the refresher's bootstrap extension) wakes every
//!   waiter whose table moved on — after each table it publishes — by
//!   committing an event to its scheduler; a thread of this module
//!   ([`start_deadlines`]) wakes each at its deadline the same way;
//! - the worker, on that event, routes the request again by the newest
//!   table and lets it go on (or parks it again while time remains).
//!
//! A scheduler is deleted by the worker only, after taking it out of its
//! waiter under the waiter's lock — the lock the main thread commits
//! under — so a commit never meets a deleted scheduler.
//!
//! The deadline does not depend on Envoy's main thread: before, the main
//! thread's timer woke deadlines too, and a held request waited as long as
//! the main thread stalled (a slow xDS update, a blocked health check),
//! not its hold.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use mvp_filter_core::hold_claim::{Bounds, Claim, has_room};

use crate::abi;
use crate::process;

/// The one event a held request's scheduler carries: "look again".
pub const WAKE: u64 = 1;
/// The event a worker sends the main thread: a request was held.
pub const HELD: u64 = 1;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only a panic elsewhere poisons these: their contents stay whole.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Milliseconds on a clock every thread of the process shares.
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A held request as the main thread sees it.
pub struct Waiter {
    /// Its stream's scheduler (as an address); `None` once the worker took
    /// it back (the request went on, or its stream ended).
    scheduler: Mutex<Option<usize>>,
    /// The table version the request was refused by.
    seen: u64,
    deadline_ms: u64,
}

impl Waiter {
    fn take(&self) -> Option<usize> {
        lock(&self.scheduler).take()
    }
}

static WAITERS: Mutex<Vec<Arc<Waiter>>> = Mutex::new(Vec::new());

/// The main thread's scheduler (the refresher's bootstrap extension), as
/// an address; 0 without a running refresher — and then nothing is held,
/// since nothing would wake it.
static MAIN: Mutex<usize> = Mutex::new(0);

/// A [`HELD`] event is on its way to the main thread. A park posts one only
/// when none is; the main thread clears this before it looks at the
/// waiters, so every waiter listed before the clear is seen by that look
/// and one listed after it posts again. A flood of parks (an HTTP/2 rapid
/// reset aimed at the hold) costs the main thread one look per turn of its
/// loop, not one per park.
static HELD_POSTED: AtomicBool = AtomicBool::new(false);

pub fn set_main(scheduler: *mut c_void) {
    *lock(&MAIN) = scheduler as usize;
    // An event posted to an earlier scheduler is gone with it.
    HELD_POSTED.store(false, Ordering::SeqCst);
    start_deadlines();
}

/// The deadline thread waits on it with [`WAITERS`]' lock.
static DEADLINE_MOVED: Condvar = Condvar::new();
/// When the deadline thread looks next ([`now_ms`]), `u64::MAX` when it
/// waits to be told. Written and read under [`WAITERS`]' lock.
static NEXT_LOOK_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Whether the deadline thread runs (started once per process: the module
/// is never unloaded, `do_not_close`). Nothing is held without it, since
/// nothing would end a hold on time.
static DEADLINES: OnceLock<bool> = OnceLock::new();

fn start_deadlines() {
    DEADLINES.get_or_init(|| std::thread::Builder::new().name("mvp-hold-dl".into()).spawn(deadlines).is_ok());
}

/// The deadline thread: wakes every waiter at its deadline, sleeps until
/// the next one is.
fn deadlines() {
    let mut list = lock(&WAITERS);
    loop {
        let now = now_ms();
        list.retain(|w| {
            let overdue = now >= w.deadline_ms;
            if overdue {
                commit(w);
            }
            !overdue && lock(&w.scheduler).is_some()
        });
        let next = list.iter().map(|w| w.deadline_ms).min();
        NEXT_LOOK_MS.store(next.unwrap_or(u64::MAX), Ordering::SeqCst);
        list = match next {
            Some(at) => DEADLINE_MOVED.wait_timeout(list, Duration::from_millis(at.saturating_sub(now))).map(|(l, _)| l).unwrap_or_else(|e| e.into_inner().0),
            None => DEADLINE_MOVED.wait(list).unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// Lists a waiter; tells the deadline thread when it is due before the
/// thread would look (held requests share one hold length, so rarely).
fn list_waiter(waiter: Arc<Waiter>) {
    let due = waiter.deadline_ms;
    let mut list = lock(&WAITERS);
    list.push(waiter);
    if due < NEXT_LOOK_MS.load(Ordering::SeqCst) {
        NEXT_LOOK_MS.store(due, Ordering::SeqCst);
        DEADLINE_MOVED.notify_one();
    }
}

/// The refresher is going: no new holds; the held ones are woken (and,
/// with no newer table, get their 503 on their worker).
pub fn clear_main() {
    let old = std::mem::take(&mut *lock(&MAIN));
    HELD_POSTED.store(false, Ordering::SeqCst);
    if old != 0 {
        unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_delete(old as *mut c_void) };
    }
    for w in std::mem::take(&mut *lock(&WAITERS)) {
        commit(&w);
    }
}

fn commit(w: &Waiter) {
    let s = lock(&w.scheduler);
    if let Some(s) = *s {
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_commit(s as *mut c_void, WAKE) };
    }
}

/// Main thread: wakes every waiter whose table moved on (deadlines are
/// the deadline thread's).
pub fn wake_moved() {
    HELD_POSTED.store(false, Ordering::SeqCst);
    let version = process::version();
    let mut list = lock(&WAITERS);
    list.retain(|w| {
        let due = w.seen != version;
        if due {
            commit(w);
        }
        // One the worker took back needs no wake either.
        !due && lock(&w.scheduler).is_some()
    });
}

/// A request this worker holds.
struct Parked {
    filter: usize,
    span: Released,
    waiter: Arc<Waiter>,
    /// Woken by the worker's sweep once already ([`sweep`]).
    swept: bool,
}

thread_local! {
    static PARKED: RefCell<Vec<Parked>> = const { RefCell::new(Vec::new()) };
}

/// A held request's span, and what it needs when it goes on.
#[derive(Debug, Clone, Copy)]
pub struct Released {
    pub since_ms: u64,
    pub deadline_ms: u64,
    /// A header the route table matches (identity) was written before it
    /// was held: its route must be matched again when it goes on.
    pub rematch: bool,
    /// What it claims of the worker's hold (made when it was first held).
    pub claim: Claim,
}

/// Parks the request of `filter` until a table newer than `seen` or
/// `span.deadline_ms`. False when it cannot (no refresher to wake it, its
/// claim does not fit the worker's `bounds`, Envoy gave no scheduler): the
/// caller answers now.
pub fn park(filter: abi::EnvoyPtr, seen: u64, span: Released, bounds: &Bounds) -> bool {
    let Released { since_ms, deadline_ms, .. } = span;
    let main = *lock(&MAIN);
    if main == 0 || DEADLINES.get() != Some(&true) {
        return false;
    }
    sweep(since_ms);
    let room = PARKED.with(|p| p.try_borrow().is_ok_and(|p| has_room(p.iter().map(|x| &x.span.claim), &span.claim, bounds)));
    if !room {
        return false;
    }
    let scheduler = unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_new(filter) };
    if scheduler.is_null() {
        return false;
    }
    let waiter = Arc::new(Waiter { scheduler: Mutex::new(Some(scheduler as usize)), seen, deadline_ms });
    let parked = Parked { filter: filter as usize, span, waiter: waiter.clone(), swept: false };
    if PARKED.with(|p| p.try_borrow_mut().map(|mut p| p.push(parked)).is_err()) {
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler) };
        return false;
    }
    list_waiter(waiter);
    if HELD_POSTED.swap(true, Ordering::SeqCst) {
        // The main thread will look, and see this one.
        return true;
    }
    // Under MAIN's lock: `clear_main` cannot delete it meanwhile.
    let main = lock(&MAIN);
    if *main != 0 {
        unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit(*main as *mut c_void, HELD) };
    } else {
        HELD_POSTED.store(false, Ordering::SeqCst);
    }
    true
}

/// How long past its deadline a parked request means its wake was lost:
/// the deadline thread wakes every request at its deadline, so the event
/// was dropped (the stream ended without the stream-end hook reaching us)
/// or the worker's loop stalled.
const ENDED_AFTER_MS: u64 = 10_000;

/// The worker's own sweep, never a forgetting one: a parked request long
/// past its deadline is woken by the worker itself (its wake routes it or
/// answers the 503, as the main thread's would have); one still parked a
/// second [`ENDED_AFTER_MS`] after that has no stream left to wake, and is
/// dropped so it holds no room.
pub fn sweep(now: u64) {
    PARKED.with(|p| {
        let Ok(mut p) = p.try_borrow_mut() else { return };
        p.retain_mut(|x| {
            let overdue = now > x.span.deadline_ms.saturating_add(ENDED_AFTER_MS);
            if !overdue {
                return true;
            }
            if !x.swept {
                x.swept = true;
                commit(&x.waiter);
                return true;
            }
            let gone = now > x.span.deadline_ms.saturating_add(2 * ENDED_AFTER_MS);
            if gone && let Some(s) = x.waiter.take() {
                unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(s as *mut c_void) };
            }
            !gone
        });
    });
}

/// The worker's side of a wake (or of the stream's end): the request of
/// `filter` is no longer parked; when it was, how long it has been.
pub fn unpark(filter: abi::EnvoyPtr) -> Option<Released> {
    let parked = PARKED.with(|p| {
        let mut p = p.try_borrow_mut().ok()?;
        let i = p.iter().position(|x| x.filter == filter as usize)?;
        Some(p.swap_remove(i))
    })?;
    if let Some(s) = parked.waiter.take() {
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(s as *mut c_void) };
    }
    Some(parked.span)
}

/// Whether this worker parks any request (the stream-end hook's fast path).
pub fn any_parked() -> bool {
    PARKED.with(|p| p.try_borrow().is_ok_and(|p| !p.is_empty()))
}
