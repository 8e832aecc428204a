// `rapid serve --speculative`: a real server on a fixture model counts drafted and accepted tokens in
// /metrics, and the same greedy completion comes back with speculation on and off.
import { afterAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

const servers: RunningServer[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.close(1000)));
});

async function serve(speculative: 'ngram' | 'off') {
  const srv = await startServer(`${FIXTURE_ROOT}/gemma3-q4`, { port: 0, threads: 2, kvCacheMemory: 16 << 20, blockSize: 16, servedModelName: 'g', speculative });
  servers.push(srv);
  const complete = async () => {
    const res = await fetch(`${srv.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'g', prompt: 'one two three four five six one two three four five six one two three four', max_tokens: 48, temperature: 0 }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { choices: { text: string }[] }).choices[0]!.text;
  };
  const metric = async (name: string) => {
    const text = await (await fetch(`${srv.url}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`${name}{`));
    expect(line, `${name} in /metrics`).toBeDefined();
    return Number(line!.split(' ').at(-1));
  };
  return { complete, metric };
}

describe.skipIf(!nativeAvailable())('rapid serve --speculative', () => {
  it('counts drafted and accepted tokens; the completion is the same with and without', async () => {
    const on = await serve('ngram');
    const off = await serve('off');
    const a = await on.complete();
    const b = await off.complete();
    expect(a).toBe(b);
    expect(await on.metric('rapid_spec_decode_draft_tokens_total')).toBeGreaterThan(0);
    expect(await on.metric('rapid_spec_decode_accepted_tokens_total')).toBeGreaterThan(0);
    expect(await off.metric('rapid_spec_decode_draft_tokens_total')).toBe(0);
  }, 60_000);
});
