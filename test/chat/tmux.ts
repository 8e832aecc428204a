// Drives a real terminal for `rapid chat`: a detached tmux session of a fixed size, keys sent with
// send-keys, the screen read with capture-pane and polled (bounded) until a condition holds.
import { execFileSync, spawnSync } from 'node:child_process';

export const hasTmux = spawnSync('tmux', ['-V'], { stdio: 'ignore' }).status === 0;

export class TmuxSession {
  private static next = 0;
  readonly name = `rapid-chat-test-${process.pid}-${TmuxSession.next++}`;

  /** Starts `command` (a shell line) in cwd; the pane stays open after it exits (we read its last screen). */
  constructor(command: string, cwd: string, env: Record<string, string> = {}) {
    const exports = Object.entries(env).map(([k, v]) => `export ${k}='${v.replace(/'/g, `'\\''`)}';`).join(' ');
    execFileSync('tmux', ['new-session', '-d', '-s', this.name, '-x', '120', '-y', '40', '-c', cwd, `${exports} ${command}; echo "[exit $?]"; sleep 600`]);
  }

  send(...keys: string[]): void {
    execFileSync('tmux', ['send-keys', '-t', this.name, ...keys]);
  }

  /** Types text literally (no key-name lookup), then Enter as its own key. */
  line(text: string): void {
    execFileSync('tmux', ['send-keys', '-t', this.name, '-l', text]);
    this.send('Enter');
  }

  screen(): string {
    return execFileSync('tmux', ['capture-pane', '-p', '-J', '-S', '-200', '-t', this.name], { encoding: 'utf8' });
  }

  /** Polls the screen every 100 ms until `test` holds; throws with the last screen after `timeoutMs`. */
  async waitFor(test: (screen: string) => boolean, what: string, timeoutMs = 30_000): Promise<string> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const s = this.screen();
      if (test(s)) return s;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; the screen:\n${s}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  kill(): void {
    spawnSync('tmux', ['kill-session', '-t', this.name], { stdio: 'ignore' });
  }
}
