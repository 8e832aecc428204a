// Chat templates render exactly as transformers' apply_chat_template and encode to the same ids
// (fixtures in test/fixtures/chat/<family>.json).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import { ChatTemplate, type ChatMessage, encodeChatPrompt } from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';

interface ChatCase {
  messages: ChatMessage[];
  add_generation_prompt: boolean;
  enable_thinking?: boolean;
  tools?: unknown[];
  rendered: string;
  ids: number[];
  [key: string]: unknown;
}

interface ChatFixture {
  family: string;
  tokenizer: string;
  template: string;
  special: Record<string, string | null>;
  cases: ChatCase[];
}

const FIXTURES = fileURLToPath(new URL('../fixtures', import.meta.url));

for (const family of ['qwen2', 'qwen3', 'llama', 'gemma3']) {
  describe(`chat template parity: ${family}`, () => {
    const fixture = JSON.parse(readFileSync(join(FIXTURES, 'chat', `${family}.json`), 'utf8')) as ChatFixture;
    const bundle = loadTokenizerDir(join(FIXTURES, 'tokenizers', fixture.tokenizer));
    const template = new ChatTemplate(fixture.template, family);
    const specialTokens: Record<string, string> = {};
    for (const [k, v] of Object.entries(fixture.special)) if (v !== null) specialTokens[k] = v;

    fixture.cases.forEach((c, i) => {
      it(`case ${i}: renders and encodes exactly`, () => {
        const extra: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(c)) {
          if (!['messages', 'add_generation_prompt', 'tools', 'rendered', 'ids'].includes(k)) extra[k] = v;
        }
        const rendered = template.render({
          messages: c.messages,
          addGenerationPrompt: c.add_generation_prompt,
          ...(c.tools !== undefined ? { tools: c.tools } : {}),
          specialTokens,
          extra,
        });
        expect(rendered).toBe(c.rendered);
        expect(encodeChatPrompt(bundle.tokenizer, rendered, bundle.bosToken)).toEqual(c.ids);
      });
    });
  });
}
