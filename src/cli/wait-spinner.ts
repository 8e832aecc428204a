// A wait the user sits through (model load, download start, grammar compile): an ora spinner on a
// terminal, and on a pipe or a log file either a plain line through `plain` or nothing at all.
import ora, { type Ora } from 'ora';

export interface Wait {
  /** Ends the wait; on a terminal `done` replaces the spinner line (nothing: the line is cleared). */
  succeed(done?: string): void;
  fail(why?: string): void;
}

export interface WaitOptions {
  stream?: NodeJS.WriteStream;
  /** Where plain lines go when the stream is not a terminal; absent: quiet (scripts read stdout/stderr). */
  plain?: (line: string) => void;
}

export function startWait(text: string, o: WaitOptions = {}): Wait {
  const stream = o.stream ?? process.stderr;
  // A terminal without a size (some CI ptys) would make ora clear lines forever: plain there too.
  if (!stream.isTTY || !(stream.columns > 0)) {
    o.plain?.(`${text}...`);
    return { succeed: (done) => (done !== undefined ? o.plain?.(done) : undefined), fail: () => undefined };
  }
  // discardStdin off: chat and run read stdin; a native load blocks the loop anyway (the frame holds).
  const spinner: Ora = ora({ text, stream, discardStdin: false }).start();
  let ended = false; // later calls are no-ops: a second stop would clear the next line's output
  return {
    succeed: (done) => {
      if (ended) return;
      ended = true;
      if (done !== undefined) spinner.succeed(done);
      else spinner.stop();
    },
    fail: (why) => {
      if (ended) return;
      ended = true;
      spinner.fail(why ?? text);
    },
  };
}

/** Runs `work` under a wait; the spinner stops whether it resolves or throws. */
export async function withWait<T>(text: string, work: () => T | Promise<T>, o: WaitOptions & { done?: (value: T) => string | undefined } = {}): Promise<T> {
  const wait = startWait(text, o);
  try {
    const value = await work();
    wait.succeed(o.done?.(value));
    return value;
  } catch (err) {
    wait.fail();
    throw err;
  }
}
