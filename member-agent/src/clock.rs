//! Where the agent's decisions get the time from. Pure functions take `now` as an argument; the
//! reconcilers ask the [`Clock`] in their context, so tests can pin it.

use jiff::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}
