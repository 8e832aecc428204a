// Sends one hostile request over its own raw socket (node:net: any bytes, any framing, hang-ups)
// and reads what comes back until the server closes: the final status, and any error a stream
// reported after its 200.
import { connect } from 'node:net';
import type { HostileRequest } from './hostile-requests.js';

export interface Outcome {
  /** The final (non-1xx) status, or null when none came. */
  status: number | null;
  /** `answered`: a status line; `closed`: the server closed without one; `unanswered`: no close within the bound; `aborted`: we hung up (nothing owed). */
  end: 'answered' | 'closed' | 'unanswered' | 'aborted';
  /** error.code and error.type of a JSON error body or of an error event inside an SSE stream. */
  errorCode?: string;
  errorType?: string;
  /** The start of the response body, for the report. */
  excerpt: string;
  ms: number;
}

/** The last status line's code, skipping interim 1xx (100 Continue). */
function finalStatus(head: string[]): number | null {
  let status: number | null = null;
  for (const line of head) {
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(line);
    if (m && !m[1]!.startsWith('1')) status = Number(m[1]);
  }
  return status;
}

function dechunk(body: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  while (at < body.length) {
    const eol = body.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = Number.parseInt(body.subarray(at, eol).toString('latin1'), 16);
    if (!Number.isFinite(size) || size <= 0) break;
    out.push(body.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(out);
}

/** The error object of a JSON body, or the first one inside SSE data lines. */
function findError(text: string): { code?: string; type?: string } | undefined {
  const candidates = text.startsWith('{') ? [text] : text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => l.slice(6));
  for (const c of candidates) {
    try {
      const v = JSON.parse(c) as { error?: { code?: unknown; type?: unknown } };
      if (v.error && typeof v.error === 'object') return { code: String(v.error.code ?? ''), type: String(v.error.type ?? '') };
    } catch {
      // not JSON: no structured error
    }
  }
  return undefined;
}

/** The final response is all in: its chunked body ended, or its Content-Length arrived (keep-alive sockets stay open after). */
function responseComplete(raw: Buffer): boolean {
  let at = 0;
  for (;;) {
    const end = raw.indexOf('\r\n\r\n', at);
    if (end < 0) return false;
    const head = raw.subarray(at, end).toString('latin1');
    at = end + 4;
    if (/^HTTP\/1\.[01] 1\d\d/.test(head)) continue;
    if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) return raw.subarray(raw.length - 5).toString('latin1') === '0\r\n\r\n';
    const len = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    return len !== null && raw.length - at >= Number(len[1]);
  }
}

export function parseResponse(raw: Buffer): Pick<Outcome, 'status' | 'errorCode' | 'errorType' | 'excerpt'> {
  // Skip interim responses: the final head is the last one before a body.
  let at = 0;
  const heads: string[] = [];
  let head = '';
  for (;;) {
    const end = raw.indexOf('\r\n\r\n', at);
    if (end < 0) break;
    head = raw.subarray(at, end).toString('latin1');
    heads.push(head.split('\r\n', 1)[0]!);
    at = end + 4;
    if (!/^HTTP\/1\.[01] 1\d\d/.test(head)) break;
  }
  const status = finalStatus(heads);
  const chunked = /\r\ntransfer-encoding:\s*chunked/i.test(head);
  const body = (chunked ? dechunk(raw.subarray(at)) : raw.subarray(at)).toString('utf8');
  const err = findError(body.trimStart());
  return { status, errorCode: err?.code, errorType: err?.type, excerpt: body.slice(0, 300) };
}

export function sendRaw(host: string, port: number, req: HostileRequest, boundMs: number): Promise<Outcome> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let settled = false;
    const sock = connect(port, host);
    const finish = (end: Outcome['end']) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      const raw = Buffer.concat(chunks);
      const parsed = parseResponse(raw);
      const answered = parsed.status !== null;
      resolve({ ...parsed, end: answered ? 'answered' : end, ms: Math.round(performance.now() - t0) });
    };
    const timer = setTimeout(() => finish('unanswered'), boundMs);
    sock.on('data', (c: Buffer) => {
      chunks.push(c);
      if (responseComplete(Buffer.concat(chunks))) finish('answered');
    });
    sock.on('close', () => finish('closed'));
    sock.on('error', () => undefined);
    sock.on('connect', () => {
      if (req.delivery === 'send') {
        sock.write(req.bytes);
        return;
      }
      sock.write(req.bytes.subarray(0, req.sendBytes ?? req.bytes.length));
      if (req.delivery === 'abort') setTimeout(() => finish('aborted'), 5);
    });
  });
}
