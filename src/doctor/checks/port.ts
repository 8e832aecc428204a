// Whether `rapid serve` can bind its default port.
import { createServer } from 'node:net';
import type { CheckResult } from '../types.js';

export const DEFAULT_PORT = 8000;

export function portFree(port: number, host: string): Promise<{ free: boolean; code?: string }> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', (err: NodeJS.ErrnoException) => resolve({ free: false, code: err.code }));
    srv.listen({ port, host, exclusive: true }, () => srv.close(() => resolve({ free: true })));
  });
}

export async function checkPort(port = DEFAULT_PORT, host = '127.0.0.1'): Promise<CheckResult> {
  const r = await portFree(port, host);
  const base = { id: 'port', title: `Port ${port}`, details: { port, host, free: r.free, error: r.code ?? null } };
  if (r.free) return { ...base, status: 'ok', finding: `${host}:${port} is free for \`rapid serve\`` };
  const why = r.code === 'EADDRINUSE' ? 'is in use by another program' : r.code === 'EACCES' ? 'needs privileges to bind' : `cannot be bound (${r.code})`;
  return { ...base, status: 'warn', finding: `${host}:${port} ${why}`, fix: `start the server on another port: \`rapid serve --port ${port + 1}\`` };
}
