// The stored-response bounds: count and bytes, least recently used evicted first, a response
// larger than the byte bound not kept, item ids forgotten with their response; over HTTP an
// evicted previous_response_id is a 404 naming the field.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { RESPONSE_STORE_LIMITS, ResponseStore } from '../../src/server/responses/store.js';
import { post } from './helpers.js';
import { startScriptedServer } from './responses-helpers.js';

const stored = (id: string, text: string) => ({
  response: { id, output: [{ id: `msg_${id}`, type: 'message', content: [{ type: 'output_text', text }] }] },
  input: [{ type: 'message', role: 'user', content: 'q' }],
});

describe('ResponseStore', () => {
  it('has named default bounds', () => {
    const s = new ResponseStore();
    expect(s.limits).toEqual(RESPONSE_STORE_LIMITS);
    expect(RESPONSE_STORE_LIMITS.maxResponses).toBeGreaterThan(0);
    expect(RESPONSE_STORE_LIMITS.maxBytes).toBeGreaterThan(0);
  });

  it('evicts the least recently used past the count bound', () => {
    const s = new ResponseStore({ maxResponses: 2 });
    s.put('a', stored('a', 'x'));
    s.put('b', stored('b', 'x'));
    expect(s.get('a')).toBeDefined(); // a is now the most recent
    s.put('c', stored('c', 'x'));
    expect(s.get('b')).toBeUndefined();
    expect(s.get('a')).toBeDefined();
    expect(s.get('c')).toBeDefined();
    expect(s.size).toBe(2);
    expect(s.item('msg_b')).toBeUndefined();
    expect(s.item('msg_a')).toMatchObject({ type: 'message' });
  });

  it('evicts past the byte bound and refuses a response larger than it', () => {
    const one = Buffer.byteLength(JSON.stringify(stored('a', 'x'.repeat(100))));
    const s = new ResponseStore({ maxBytes: 2 * one + 10 });
    for (const id of ['a', 'b', 'c']) expect(s.put(id, stored(id, 'x'.repeat(100)))).toBe(true);
    expect(s.get('a')).toBeUndefined();
    expect(s.size).toBe(2);
    expect(s.totalBytes).toBeLessThanOrEqual(s.limits.maxBytes);
    expect(s.put('huge', stored('huge', 'x'.repeat(10 * one)))).toBe(false);
    expect(s.get('huge')).toBeUndefined();
    expect(s.size).toBe(2); // nothing was evicted for it
    expect(s.delete('b')).toBe(true);
    expect(s.delete('b')).toBe(false);
    expect(s.totalBytes).toBe(one);
  });
});

describe('the store behind /v1/responses', () => {
  it('an evicted previous_response_id is a 404 naming it; store: false is never kept', async () => {
    const s = await startScriptedServer({ hello: 'Hi.' }, { server: { responseStore: { maxResponses: 2 } } });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push((await client.responses.create({ model: 'fake-model', input: 'hello' })).id);
      const gone = await post(s.url, '/v1/responses', { input: 'hello', previous_response_id: ids[0] });
      expect(gone.status).toBe(404);
      expect(gone.json().error).toMatchObject({ param: 'previous_response_id', code: 'previous_response_not_found' });
      expect((await post(s.url, '/v1/responses', { input: 'hello', previous_response_id: ids[2] })).status).toBe(200);
      const off = await client.responses.create({ model: 'fake-model', input: 'hello', store: false });
      expect((await post(s.url, '/v1/responses', { input: 'hello', previous_response_id: off.id })).status).toBe(404);
    } finally {
      await s.server.close(100);
    }
  });
});
