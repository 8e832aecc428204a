// CORS on the Responses routes over real HTTP: a preflight for /v1/responses/{id} lists GET and
// DELETE, answers and SSE streams carry the allowed origin, a foreign origin's DELETE is refused.
import { describe, expect, it } from 'vitest';
import { post, raw } from './helpers.js';
import { startScriptedServer } from './responses-helpers.js';

describe('/v1/responses from a browser origin', () => {
  it('browsers: preflights for /v1/responses/{id} list GET and DELETE; answers and streams carry CORS headers', async () => {
    const app = 'https://app.example';
    const s = await startScriptedServer({ hello: 'Hi.' }, { server: { corsOrigins: [app] } });
    try {
      const pre = await raw(s.url, '/v1/responses/resp_x', { method: 'OPTIONS', headers: { origin: app, 'access-control-request-method': 'DELETE' } });
      expect(pre.status).toBe(204);
      expect(pre.headers.get('access-control-allow-methods')).toMatch(/DELETE/);
      const r = await post(s.url, '/v1/responses', { input: 'hello' }, { origin: app });
      expect(r.headers.get('access-control-allow-origin')).toBe(app);
      const st = await post(s.url, '/v1/responses', { input: 'hello', stream: true }, { origin: app });
      expect(st.headers.get('access-control-allow-origin')).toBe(app);
      expect(st.text).toContain('response.completed');
      const id = r.json().id as string;
      const del = await raw(s.url, `/v1/responses/${id}`, { method: 'DELETE', headers: { origin: app } });
      expect(del.status).toBe(200);
      const evil = await raw(s.url, `/v1/responses/${id}`, { method: 'DELETE', headers: { origin: 'https://evil.example' } });
      expect(evil.status).toBe(403);
    } finally {
      await s.server.close(100);
    }
  });
});
