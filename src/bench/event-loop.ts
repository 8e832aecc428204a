// `node bench/run.js event-loop --url URL [--model-dir DIR]`: how long /health takes to answer while
// each heavy or hostile request of issue 38 is processed (the target is under 50 ms), from a client
// process of its own; and, given the served model's directory, what rendering and tokenizing a short
// chat on the prompt worker pool adds per request over doing it on the calling thread.
import { parseArgs } from 'node:util';
import { summarize } from './sweep/stats.js';

interface Case {
  name: string;
  path: string;
  body: string;
}

function cases(): Case[] {
  const chat = (messages: unknown[]) => JSON.stringify({ messages, max_tokens: 1, temperature: 0 });
  const words = 'lorem ipsum dolor sit amet consectetur adipiscing elit '.repeat(200);
  return [
    { name: 'short chat (baseline)', path: '/v1/chat/completions', body: chat([{ role: 'user', content: 'Hello there' }]) },
    { name: '100,000 messages', path: '/v1/chat/completions', body: chat(Array.from({ length: 100_000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}` }))) },
    { name: '5,000 messages', path: '/v1/chat/completions', body: chat(Array.from({ length: 5_000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}` }))) },
    { name: '7 MB of content (chat)', path: '/v1/chat/completions', body: chat([{ role: 'user', content: 'lorem ipsum dolor sit amet '.repeat(260_000) }]) },
    { name: '7 MB prompt (completions)', path: '/v1/completions', body: JSON.stringify({ prompt: 'lorem ipsum dolor sit amet '.repeat(260_000), max_tokens: 1 }) },
    { name: '11 KB prompt (tokenized)', path: '/v1/completions', body: JSON.stringify({ prompt: words, max_tokens: 1 }) },
    { name: '7 MB of token ids', path: '/v1/completions', body: `{"prompt": [${'1,'.repeat(3_500_000)}1], "max_tokens": 1}` },
    { name: '10,000-deep prompt array', path: '/v1/completions', body: `{"prompt": ${'['.repeat(10_000)}1${']'.repeat(10_000)}, "max_tokens": 1}` },
  ];
}

interface Measured {
  status: number | string;
  requestMs: number;
  health: ReturnType<typeof summarize>;
}

/** Polls GET /health back to back until `stop` resolves; the answer times, ms. */
async function pollHealth(url: string, stop: Promise<unknown>): Promise<number[]> {
  const samples: number[] = [];
  let done = false;
  void stop.finally(() => (done = true));
  while (!done) {
    const t0 = performance.now();
    await (await fetch(`${url}/health`)).text();
    samples.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 2));
  }
  return samples;
}

/** Sends `c` while /health is polled. */
async function measure(url: string, c: Case): Promise<Measured> {
  const t0 = performance.now();
  const request = fetch(`${url}${c.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: c.body }).then(
    async (res) => (await res.text(), res.status),
    (err: unknown) => `error: ${(err as Error).message}`,
  );
  const samples = await pollHealth(url, request);
  return { status: await request, requestMs: performance.now() - t0, health: summarize(samples) };
}

/** Per-request cost of a short chat: the pool's round trip vs rendering + tokenizing in this thread. */
async function encodeLatency(dir: string, contextLength: number): Promise<string> {
  const { PromptEncoderPool } = await import('../server/prompt-encoder-pool.js');
  const { loadTokenizerDir } = await import('../tokenizer/load-tokenizer.js');
  const { ChatTemplate, encodeChatPrompt, selectChatTemplate } = await import('../template/chat-template.js');
  const text = loadTokenizerDir(dir);
  const picked = selectChatTemplate(text.chatTemplates);
  if (picked === null) return 'no chat template: skipped';
  const template = new ChatTemplate(picked.source, picked.name);
  const messages = [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is the capital of France? Answer in one word.' }];
  const local = () => encodeChatPrompt(text.tokenizer, template.render({ messages, addGenerationPrompt: true, specialTokens: text.specialTokens }), text.bosToken);
  const pool = await PromptEncoderPool.start(dir, { contextLength, threads: 1 });
  const n = 2_000;
  const time = async (f: () => unknown) => {
    for (let i = 0; i < 200; i++) await f(); // warm up both paths
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await f();
      ms.push(performance.now() - t0);
    }
    return summarize(ms);
  };
  const a = await time(local);
  const b = await time(() => pool.encodeChat(messages));
  await pool.close();
  const f = (x: number | null) => (x === null ? '-' : x.toFixed(3));
  return [
    `short chat, ${n} sequential requests (ms)      p50      p99`,
    `  render + tokenize in this thread       ${f(a.p50).padStart(8)} ${f(a.p99).padStart(8)}`,
    `  on the prompt worker pool              ${f(b.p50).padStart(8)} ${f(b.p99).padStart(8)}`,
    `  added by the pool (p50)                ${f(b.p50! - a.p50!).padStart(8)}`,
  ].join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { url: { type: 'string' }, 'model-dir': { type: 'string' }, 'context-length': { type: 'string' } } });
  if (values.url === undefined && values['model-dir'] === undefined) {
    process.stderr.write('usage: node bench/run.js event-loop [--url URL] [--model-dir DIR [--context-length N]]\n');
    return 2;
  }
  if (values.url !== undefined) {
    const url = values.url.replace(/\/+$/, '');
    const line = (name: string, status: string, ms: string, h: ReturnType<typeof summarize>) =>
      `${name.padEnd(28)} ${status.padStart(6)} ${ms.padStart(11)} ${(h.max ?? 0).toFixed(1).padStart(12)} ${(h.p50 ?? 0).toFixed(1).padStart(8)} ${String(h.count).padStart(6)}\n`;
    process.stdout.write(`${'request'.padEnd(28)} ${'status'.padStart(6)} ${'request ms'.padStart(11)} ${'/health max'.padStart(12)} ${'p50'.padStart(8)} ${'polls'.padStart(6)}\n`);
    // The floor: /health with nothing else in flight (client, loopback and a loaded machine).
    process.stdout.write(line('(idle)', '-', '-', summarize(await pollHealth(url, new Promise((r) => setTimeout(r, 1_000))))));
    for (const c of cases()) {
      const r = await measure(url, c);
      process.stdout.write(line(c.name, String(r.status), r.requestMs.toFixed(0), r.health));
    }
  }
  if (values['model-dir'] !== undefined) {
    process.stdout.write(`${await encodeLatency(values['model-dir'], Number(values['context-length'] ?? 32_768))}\n`);
  }
  return 0;
}
