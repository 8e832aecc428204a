// The prompt encoder pool against the same work done in this thread: identical ids for chats, raw
// text and image prompts (Qwen2.5-VL's mRoPE positions included); the time limit ends a looping
// template with a 400 and the replaced worker keeps serving; a full queue is a 503.
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineUnavailableError } from '../../src/errors/request-errors.js';
import { HttpError } from '../../src/server/http-errors.js';
import { PromptEncoderPool } from '../../src/server/prompt-encoder-pool.js';
import { ChatTemplate, encodeChatPrompt, selectChatTemplate, type ChatMessage } from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { VisionProcessor, type PreparedImage } from '../../src/vision/processor.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

const QWEN = join(FIXTURE_ROOT, 'qwen2-f32');
const VLM = resolve(import.meta.dirname, '..', '..', 'models', 'tiny-vlm');

function inThread(dir: string, messages: ChatMessage[]): number[] {
  const text = loadTokenizerDir(dir);
  const picked = selectChatTemplate(text.chatTemplates)!;
  const rendered = new ChatTemplate(picked.source, picked.name).render({ messages, addGenerationPrompt: true, specialTokens: text.specialTokens });
  return encodeChatPrompt(text.tokenizer, rendered, text.bosToken);
}

describe('PromptEncoderPool', () => {
  let pool: PromptEncoderPool;
  beforeAll(async () => {
    pool = await PromptEncoderPool.start(QWEN, { contextLength: 32_768, threads: 2 });
  });
  afterAll(async () => {
    await pool?.close();
  });

  it('encodes chats and raw text exactly as the calling thread does', async () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hello, 世界! 🙂' },
      { role: 'assistant', content: 'Hi.' },
      { role: 'user', content: [{ type: 'text', text: 'and parts' }] },
    ];
    expect((await pool.encodeChat(messages)).promptIds).toEqual(inThread(QWEN, messages));
    const tok = loadTokenizerDir(QWEN).tokenizer;
    expect(await pool.encodeText('raw text, 世界')).toEqual(tok.encode('raw text, 世界', { addSpecialTokens: true }));
    expect(pool.maxBytesPerToken).toBeGreaterThan(0);
  });

  it('refuses a queue beyond its bound with a 503', async () => {
    const small = await PromptEncoderPool.start(QWEN, { contextLength: 32_768, threads: 1, maxQueue: 1 });
    try {
      const chat: ChatMessage[] = [{ role: 'user', content: 'x '.repeat(20_000) }];
      const runs = [small.encodeChat(chat), small.encodeChat(chat), small.encodeChat(chat)];
      const settled = await Promise.allSettled(runs);
      expect(settled.filter((s) => s.status === 'rejected' && s.reason instanceof EngineUnavailableError).length).toBeGreaterThanOrEqual(1);
      expect(settled[0]!.status).toBe('fulfilled');
    } finally {
      await small.close();
    }
  });
});

describe('PromptEncoderPool time limit', () => {
  it('ends a looping template with a 400 naming the limit and replaces the worker', { timeout: 30_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rapid-loop-'));
    try {
      copyFileSync(join(QWEN, 'tokenizer.json'), join(dir, 'tokenizer.json'));
      const cfg = JSON.parse(readFileSync(join(QWEN, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
      const template = "{%- if messages[0]['content'] == 'loop' %}{%- for i in range(100000) %}{%- for j in range(100000) %}{%- endfor %}{%- endfor %}{%- endif %}" + String(cfg.chat_template);
      writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...cfg, chat_template: template }));
      const pool = await PromptEncoderPool.start(dir, { contextLength: 32_768, threads: 1, timeLimitMs: 300 });
      try {
        const t0 = performance.now();
        const err = await pool.encodeChat([{ role: 'user', content: 'loop' }]).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(HttpError);
        expect((err as HttpError).status).toBe(400);
        expect((err as HttpError).code).toBe('prompt_time_limit');
        expect((err as HttpError).message).toMatch(/prompt time limit of 300 ms/);
        expect(performance.now() - t0).toBeLessThan(5_000);
        const ok = await pool.encodeChat([{ role: 'user', content: 'fine' }]);
        expect(ok.promptIds).toEqual(inThread(dir, [{ role: 'user', content: 'fine' }]));
      } finally {
        await pool.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('PromptEncoderPool image prompts (tiny Qwen2.5-VL)', () => {
  it('expands placeholders and computes mRoPE positions exactly as the calling thread does', async () => {
    const text = loadTokenizerDir(VLM);
    const processor = VisionProcessor.load(VLM, text)!;
    const images = [
      { hash: 'a', tokens: 4, input: { pixels: new Float32Array(16 * 4), grid: [1, 4, 4] } },
      { hash: 'b', tokens: 6, input: { pixels: new Float32Array(24 * 4), grid: [1, 4, 6] } },
    ] as unknown as PreparedImage[];
    const messages: ChatMessage[] = [{ role: 'user', content: [{ type: 'image' }, { type: 'text', text: 'and' }, { type: 'image' }, { type: 'text', text: 'compare' }] }];
    const picked = selectChatTemplate(text.chatTemplates)!;
    const rendered = new ChatTemplate(picked.source, picked.name).render({ messages, addGenerationPrompt: true, specialTokens: text.specialTokens });
    const want = processor.buildPrompt(rendered, images);
    const pool = await PromptEncoderPool.start(VLM, { contextLength: 2048, vision: true, threads: 1 });
    try {
      const got = await pool.encodeChat(messages, undefined, images.map((im) => ({ tokens: im.tokens, grid: [...im.input.grid] })));
      expect(got.promptIds).toEqual(want.promptIds);
      expect(got.layout?.offsets).toEqual(want.images.map((im) => im.offset));
      expect(got.layout?.ropeDelta).toBe(want.ropeDelta);
      expect(Array.from(got.layout!.positions!)).toEqual(Array.from(want.positions!));
    } finally {
      await pool.close();
    }
  });
});
