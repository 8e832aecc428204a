// Chat template features beyond the fixture cases: list-of-parts content, tool calls with dict
// arguments, extra kwargs, errors, template selection and BOS handling. Expected strings come
// from transformers' apply_chat_template on the same templates.

import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import {
  ChatTemplate, type ChatMessage, ChatTemplateError, encodeChatPrompt, selectChatTemplate, TEMPLATE_RANGE_LIMIT,
} from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';

const FIXTURES = fileURLToPath(new URL('../fixtures', import.meta.url));

interface ExtraCase {
  family: string;
  tokenizer: string;
  messages: ChatMessage[];
  tools: unknown[] | null;
  extra: Record<string, unknown>;
  rendered: string;
  ids: number[];
}

// Cases rendered and encoded by transformers' apply_chat_template beyond the fixture files:
// content given as a list of parts, tool calls with dict arguments.
const EXTRA_CASES = JSON.parse(readFileSync(join(FIXTURES, 'chat', 'extra_cases.json'), 'utf8')) as ExtraCase[];

describe('chat templates beyond the fixtures', () => {
  for (const c of EXTRA_CASES) {
    it(`${c.family}: ${c.tools === null ? 'content parts' : 'tool calls'}`, () => {
      const fixture = JSON.parse(readFileSync(join(FIXTURES, 'chat', `${c.family}.json`), 'utf8')) as { template: string };
      const bundle = loadTokenizerDir(join(FIXTURES, 'tokenizers', c.tokenizer));
      const rendered = new ChatTemplate(fixture.template, c.family).render({
        messages: c.messages,
        addGenerationPrompt: true,
        ...(c.tools !== null ? { tools: c.tools } : {}),
        specialTokens: bundle.specialTokens,
        extra: c.extra,
      });
      expect(rendered).toBe(c.rendered);
      expect(encodeChatPrompt(bundle.tokenizer, rendered, bundle.bosToken)).toEqual(c.ids);
    });
  }

  it('passes extra kwargs, special tokens and strftime_now', () => {
    const t = new ChatTemplate("{{ bos_token }}{% if enable_thinking %}T{% endif %}{{ messages[0].content }}|{{ strftime_now('%Y') | length }}");
    const out = t.render({ messages: [{ role: 'user', content: 'x' }], specialTokens: { bos_token: '<s>' }, extra: { enable_thinking: true } });
    expect(out).toBe('<s>Tx|4');
  });

  it('reports raise_exception and render failures as ChatTemplateError', () => {
    const t = new ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}ok");
    expect(t.render({ messages: [{ role: 'user', content: 'a' }] })).toBe('ok');
    expect(() => t.render({ messages: [{ role: 'system', content: 'a' }] })).toThrow(ChatTemplateError);
    expect(() => t.render({ messages: [{ role: 'system', content: 'a' }] })).toThrow(/first message must be user/);
    expect(() => new ChatTemplate('{% if %}')).toThrow(ChatTemplateError);
    expect(() => new ChatTemplate('{{ messages.foo() }}').render({ messages: [] })).toThrow(ChatTemplateError);
  });

  it('range() keeps Python semantics and refuses more than TEMPLATE_RANGE_LIMIT items', () => {
    const r = (args: string) => new ChatTemplate(`{{ range(${args}) | join(',') }}`).render({ messages: [] });
    expect(r('4')).toBe('0,1,2,3');
    expect(r('1, 6, 2')).toBe('1,3,5');
    expect(r('5, 0, -2')).toBe('5,3,1');
    expect(r('3, 1')).toBe('');
    expect(r(String(TEMPLATE_RANGE_LIMIT)).split(',')).toHaveLength(TEMPLATE_RANGE_LIMIT);
    expect(() => r('100000000')).toThrow(/range\(\) of 100000000 items is over the chat template limit of 100000/);
    expect(() => r('0, 10, 0')).toThrow(/step must not be zero/);
    // A request's template kwargs still cannot replace a global.
    expect(() => new ChatTemplate('x').render({ messages: [], extra: { range: 1 } })).toThrow(ChatTemplateError);
  });

  it('selects templates by name, tools and default', () => {
    const templates = { default: 'D', tool_use: 'T', rag: 'R' };
    expect(selectChatTemplate(templates)?.name).toBe('default');
    expect(selectChatTemplate(templates, { hasTools: true })?.name).toBe('tool_use');
    expect(selectChatTemplate(templates, { name: 'rag' })?.source).toBe('R');
    expect(() => selectChatTemplate(templates, { name: 'nope' })).toThrow(ChatTemplateError);
    expect(selectChatTemplate({})).toBeNull();
  });

  it('does not double the BOS token', () => {
    const bundle = loadTokenizerDir(join(FIXTURES, 'tokenizers', 'sentencepiece'));
    const bos = bundle.bosTokenId!;
    const withBos = encodeChatPrompt(bundle.tokenizer, '<bos>hi', bundle.bosToken);
    expect(withBos.filter((id) => id === bos)).toHaveLength(1);
    const withoutBos = encodeChatPrompt(bundle.tokenizer, 'hi', bundle.bosToken);
    expect(withoutBos[0]).toBe(bos);
    expect(withoutBos.filter((id) => id === bos)).toHaveLength(1);
  });

  it('loads chat_template.jinja, named template lists and generation_config stop ids', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rapid-tok-'));
    writeFileSync(join(dir, 'tokenizer.json'), readFileSync(join(FIXTURES, 'tokenizers', 'bytelevel', 'tokenizer.json')));
    writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({
      eos_token: { content: '<|im_end|>', __type: 'AddedToken' },
      pad_token: '<|endoftext|>',
      chat_template: [{ name: 'default', template: 'OLD' }, { name: 'tool_use', template: 'TOOLS' }],
    }));
    writeFileSync(join(dir, 'chat_template.jinja'), 'NEW');
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [1000, 1001] }));
    const b = loadTokenizerDir(dir);
    expect(b.chatTemplates).toEqual({ default: 'NEW', tool_use: 'TOOLS' });
    expect(b.eosToken).toBe('<|im_end|>');
    expect(b.eosTokenId).toBe(1002);
    expect([...b.stopTokenIds].sort()).toEqual([1000, 1001, 1002]);
    expect(b.bosToken).toBeNull();
  });
});
