// Server-sent events for streamed completions: data lines, [DONE], and keep-alive comments while
// nothing else is written (a long prefill must not look like a dead connection).
import type { ServerResponse } from 'node:http';

export class SseWriter {
  private timer: NodeJS.Timeout | undefined;
  private lastWrite = 0;

  constructor(
    private readonly res: ServerResponse,
    private readonly keepAliveMs: number,
  ) {}

  open(): void {
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      // No explicit connection header: it would override a client's Connection: close and hold its socket.
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
    });
    this.res.flushHeaders();
    this.lastWrite = performance.now();
    if (this.keepAliveMs > 0) {
      this.timer = setInterval(() => {
        if (performance.now() - this.lastWrite >= this.keepAliveMs) this.write(': keep-alive\n\n');
      }, Math.max(10, Math.floor(this.keepAliveMs / 2)));
      this.timer.unref();
    }
  }

  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  send(data: unknown): void {
    this.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  /** A named event (`event:` line, then data), as the Responses and Messages APIs stream. */
  sendEvent(event: string, data: unknown): void {
    this.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /** Ends the stream; `[DONE]` only after a normal finish. */
  end(done: boolean): void {
    clearInterval(this.timer);
    if (this.closed) return;
    if (done) this.res.write('data: [DONE]\n\n');
    this.res.end();
  }

  private write(text: string): void {
    if (this.closed) return;
    this.lastWrite = performance.now();
    this.res.write(text);
  }
}
