//! Telemetry in one place per fact. Each thing worth telling an operator is a typed event
//! (a struct in the program's `telemetry` module) whose [`InternalEvent::emit`] writes the
//! log line and moves the metric together, as Vector's internal events do: a site that
//! reports a failure cannot log it and forget to count it, or count it under another name.

/// A fact about the program's own work, logged and counted in one call.
pub trait InternalEvent {
    /// Logs the event and updates the metrics it moves.
    fn emit(self);
}
