// Incremental server-sent-events parser: feed decoded text as it arrives, get each event's data
// (multi-line data joined with \n); comments (": keep-alive") and other fields are skipped.

export class SseParser {
  private buffer = '';
  private data: string[] = [];

  /** Returns the data of every event completed by this chunk. */
  push(text: string): string[] {
    this.buffer += text;
    const events: string[] = [];
    for (;;) {
      const nl = this.buffer.search(/\r\n|\r|\n/);
      if (nl < 0) break;
      const line = this.buffer.slice(0, nl);
      const sepLen = this.buffer.startsWith('\r\n', nl) ? 2 : 1;
      // A lone \r at the end may be the first half of \r\n: wait for more text.
      if (sepLen === 1 && this.buffer[nl] === '\r' && nl === this.buffer.length - 1) break;
      this.buffer = this.buffer.slice(nl + sepLen);
      if (line === '') {
        if (this.data.length > 0) events.push(this.data.join('\n'));
        this.data = [];
      } else if (line.startsWith('data:')) {
        this.data.push(line.slice(line[5] === ' ' ? 6 : 5));
      }
    }
    return events;
  }

  /** At end of stream: an event left without its blank line still counts. */
  end(): string[] {
    const rest = this.buffer.length > 0 ? this.push('\n\n') : [];
    if (this.data.length > 0) {
      rest.push(this.data.join('\n'));
      this.data = [];
    }
    return rest;
  }
}
