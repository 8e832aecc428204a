// Test-only switches of the engine child, read from its environment (tests set them before the
// server starts; the child inherits them). Each ends the child with a real abort(), as a native
// fault would, never with a thrown exception.

/** The first child aborts right after sending its Nth step's output (streams are in flight). */
export const TEST_ABORT_AFTER_STEPS = 'RAPID_TEST_ABORT_AFTER_STEPS';
/** With TEST_ABORT_AFTER_STEPS: only steps with at least this many requests in the child count (default 1). */
export const TEST_ABORT_MIN_LIVE = 'RAPID_TEST_ABORT_MIN_LIVE';
/** Restarts 1..K abort as they start, before the model is loaded: a crash loop (the first child serves). */
export const TEST_ABORT_ON_START = 'RAPID_TEST_ABORT_ON_START';
/** Set by the supervisor: 0 for the first child, then 1, 2, ... for each restart. */
export const INCARNATION_ENV = 'RAPID_ENGINE_INCARNATION';
