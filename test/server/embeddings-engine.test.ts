// /v1/embeddings against the fake runner (fast, no native code): a large batch through a small waiting
// queue, a client that goes away mid-request (its inputs are aborted, their KV freed), a step that
// fails for one request's input (a 500 for it alone, a chat request beside it completes), and a
// server without embeddings.
import { afterEach, describe, expect, it } from 'vitest';
import { byteModel, post, startFakeServer } from './helpers.js';

const EMBEDDINGS = { kind: 'model', size: 8 } as const;
const POISON = 'Z'.charCodeAt(0);

type Fake = Awaited<ReturnType<typeof startFakeServer>>;
let srv: Fake | undefined;
afterEach(async () => {
  await srv?.server.close(500);
  srv = undefined;
});

async function start(engineOpts: Parameters<typeof startFakeServer>[1] = {}, kind: 'model' | 'pooled' = 'model'): Promise<Fake> {
  srv = await startFakeServer({}, engineOpts, { model: { ...byteModel(256), embeddings: { ...EMBEDDINGS, kind } } });
  return srv;
}

describe('/v1/embeddings on the engine', () => {
  it('200 inputs pass through a waiting queue of 8, in order, each as it is alone', async () => {
    const s = await start({ maxWaiting: 8, maxNumSeqs: 4 });
    const inputs = Array.from({ length: 200 }, (_, i) => `text ${i % 7} ${i}`);
    const r = await s.client.embeddings.create({ model: 'fake-model', input: inputs, encoding_format: 'float' });
    expect(r.data.map((d) => d.index)).toEqual(inputs.map((_, i) => i));
    const alone = await s.client.embeddings.create({ model: 'fake-model', input: inputs[17]!, encoding_format: 'float' });
    expect(r.data[17]!.embedding).toEqual(alone.data[0]!.embedding);
    expect(r.data[17]!.embedding).toHaveLength(8);
    expect(r.usage.prompt_tokens).toBe(inputs.reduce((n, t) => n + t.length, 0));
    expect(s.engine.stats().kv.usedBlocks).toBe(0);
  });

  it('a client that goes away has its inputs aborted and their KV freed', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let steps = 0;
    const s = await start({ faults: { step: async () => void (++steps === 1 && (await gate)) } });
    const ac = new AbortController();
    const pending = fetch(`${s.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: Array.from({ length: 40 }, (_, i) => `input ${i}`) }),
      signal: ac.signal,
    }).catch((e: Error) => e);
    while (s.engine.stats().running + s.engine.stats().waiting === 0) await new Promise((r) => setTimeout(r, 5));
    ac.abort();
    await pending;
    await new Promise((r) => setTimeout(r, 50));
    release();
    for (let i = 0; i < 100 && s.engine.stats().running + s.engine.stats().waiting > 0; i++) await new Promise((r) => setTimeout(r, 10));
    const st = s.engine.stats();
    expect(st.running + st.waiting).toBe(0);
    expect(st.kv.usedBlocks).toBe(0);
    expect(st.requests.submitted).toBeLessThanOrEqual(16 + 16); // at most a window or two entered, not all 40
  });

  it('a step that fails for one input fails that request alone; a chat request beside it completes', async () => {
    const s = await start({
      faults: {
        step: (plan) => {
          if (plan.rows.some((r) => r.tokens.includes(POISON))) throw new Error('poisoned row');
        },
      },
    }, 'pooled');
    const [bad, chat, good] = await Promise.all([
      post(s.url, '/v1/embeddings', { input: ['fine', 'Zed'] }),
      s.client.chat.completions.create({ model: 'fake-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }),
      post(s.url, '/v1/embeddings', { input: 'fine' }),
    ]);
    expect(bad.status).toBe(500);
    expect(bad.json().error.message).toMatch(/poisoned row/);
    expect(good.status).toBe(200);
    expect(chat.choices[0]!.message.content).not.toBeNull();
    expect(s.engine.stats().kv.usedBlocks).toBe(0);
  });

  it('a server without embeddings answers 404 saying how to enable them', async () => {
    srv = await startFakeServer();
    const r = await post(srv.url, '/v1/embeddings', { input: 'a' });
    expect(r.status).toBe(404);
    expect(r.json().error.message).toContain('--embeddings');
    expect(r.json().error.code).toBe('embeddings_disabled');
  });
});
