// Keeps the event loop polling while a GPU step runs. Otherwise the main thread sleeps in epoll for the ~1-2 ms the
// kernels take, its core drops into a deep idle state, and waking it when the step settles costs tens of microseconds
// per step (H200 host, rapid's 3B decode shape at one sequence: 183 µs between steps → 96-108 µs, 2.20 → 2.11 ms per
// step). A chain of setImmediate callbacks polls instead; I/O, timers and everything else still run between polls.

/** Whether a model on `device` steps under pollWhile: on CUDA, whose steps are short and whose host gap between steps
 *  is what it saves; not on the CPU, where the spinning loop would take a core from the forward. */
export function pollsSteps(device: 'cpu' | 'cuda'): boolean {
  return device === 'cuda';
}

/** Returns `work` unchanged; until it settles, the event loop spins (one core) instead of sleeping. */
export function pollWhile<T>(work: Promise<T>): Promise<T> {
  let settled = false;
  const poll = (): void => {
    if (!settled) setImmediate(poll);
  };
  setImmediate(poll);
  const stop = (): void => {
    settled = true;
  };
  work.then(stop, stop);
  return work;
}
