// Tool-call parsers of every family format: whole-output parsing, and streaming split at every
// character boundary (and one character at a time) giving exactly the same content and calls, with
// no partial marker ever leaking into content.
import { describe, expect, it } from 'vitest';
import { detectToolFormat, toolFormatByName } from '../../src/server/tool-parsers/registry.js';
import { ToolCallStream, type ToolStreamEvent } from '../../src/server/tool-parsers/tool-call-stream.js';
import type { ToolCallFormat } from '../../src/server/tool-parsers/types.js';

interface Expect {
  content: string | null;
  calls: { name: string; args: unknown }[];
}

interface Case {
  format: string;
  text: string;
  want: Expect;
  maxCalls?: number;
}

const noCall = (format: string, text: string): Case => ({ format, text, want: { content: text, calls: [] } });

const CASES: Case[] = [
  {
    format: 'hermes',
    text: 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>',
    want: { content: 'Let me check.', calls: [{ name: 'get_weather', args: { city: 'Oslo', days: 2 } }] },
  },
  {
    format: 'hermes',
    text: '<tool_call>\n{"name": "a", "arguments": {"x": [1, {"y": "}"}]}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
    want: { content: null, calls: [{ name: 'a', args: { x: [1, { y: '}' }] } }, { name: 'b', args: {} }] },
  },
  {
    format: 'hermes',
    text: '<tool_call>{"arguments": {"q": "h\\"i </tool_call>"}, "name": "search"}</tool_call> done',
    want: { content: 'done', calls: [{ name: 'search', args: { q: 'h"i </tool_call>' } }] },
  },
  {
    format: 'hermes',
    text: 'héllo 🌍 <tool_call>\n{"name": "say", "arguments": {"text": "grüße 🌍"}}\n</tool_call>',
    want: { content: 'héllo 🌍', calls: [{ name: 'say', args: { text: 'grüße 🌍' } }] },
  },
  { format: 'hermes', text: '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>', maxCalls: 1, want: { content: null, calls: [{ name: 'a', args: { x: 1 } }] } },
  noCall('hermes', 'a < b and <tool> or <tool_cal are not calls'),
  noCall('hermes', '<tool_call>not json</tool_call> tail'),
  noCall('hermes', 'ends with a partial marker <tool_ca'),
  {
    format: 'mistral',
    text: '[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]',
    want: { content: null, calls: [{ name: 'a', args: { x: 1 } }, { name: 'b', args: {} }] },
  },
  {
    format: 'mistral',
    text: 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]ping[ARGS]{}',
    want: { content: 'Sure.', calls: [{ name: 'get_weather', args: { city: 'Oslo' } }, { name: 'ping', args: {} }] },
  },
  { format: 'mistral', text: '[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{"k": "v"}', want: { content: null, calls: [{ name: 'f', args: { k: 'v' } }] } },
  noCall('mistral', 'brackets [like this] and [TOOL are text'),
  noCall('mistral', '[TOOL_CALLS] not a call'),
  { format: 'llama3_json', text: '{"name": "f", "parameters": {"a": 1}}', want: { content: null, calls: [{ name: 'f', args: { a: 1 } }] } },
  {
    format: 'llama3_json',
    text: '<|python_tag|>{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"b": "x"}}',
    want: { content: null, calls: [{ name: 'f', args: {} }, { name: 'g', args: { b: 'x' } }] },
  },
  noCall('llama3_json', '{"answer": 42}'),
  noCall('llama3_json', 'The value is {"name": "f", "parameters": {}}'),
  {
    format: 'gemma',
    text: '<start_function_call>call:get_weather{city:<escape>Oslo, {NO}<escape>,days:3}<end_function_call>',
    want: { content: null, calls: [{ name: 'get_weather', args: { city: 'Oslo, {NO}', days: 3 } }] },
  },
  {
    format: 'gemma',
    text: 'On it.<|tool_call>call:f{s:<|"|>a{b}<|"|>,flag:true,xs:[1,2.5],o:{k:<|"|>v<|"|>},n:null}<tool_call|><|tool_call>call:g{}<tool_call|>',
    want: { content: 'On it.', calls: [{ name: 'f', args: { s: 'a{b}', flag: true, xs: [1, 2.5], o: { k: 'v' }, n: null } }, { name: 'g', args: {} }] },
  },
  {
    format: 'gemma',
    text: 'I will look it up.\n```tool_code\nget_weather(city="Oslo", days=2)\n```',
    want: { content: 'I will look it up.', calls: [{ name: 'get_weather', args: { city: 'Oslo', days: 2 } }] },
  },
  {
    format: 'gemma',
    text: "```tool_code\n[a(x=1, ok=True), b(y='z\\'s', l=[1, None])]\n```",
    want: { content: null, calls: [{ name: 'a', args: { x: 1, ok: true } }, { name: 'b', args: { y: "z's", l: [1, null] } }] },
  },
  { format: 'gemma', text: '```tool_call\n{"name": "f", "arguments": {"a": 1}}\n```', want: { content: null, calls: [{ name: 'f', args: { a: 1 } }] } },
  { format: 'gemma', text: '  {"name": "f", "arguments": {"a": "b"}}', want: { content: null, calls: [{ name: 'f', args: { a: 'b' } }] } },
  noCall('gemma', '```tool_code\nprint(1 + 2)\n```'),
  noCall('gemma', 'Plain answer with {"braces": true} inside.'),
];

function fmt(name: string): ToolCallFormat {
  const f = toolFormatByName(name);
  if (!f) throw new Error(name);
  return f;
}

/** Replays events into the final content and calls; checks their order on the way. */
function replay(events: ToolStreamEvent[]): Expect & { rawArgs: string[] } {
  let content = '';
  const calls: { name: string; args: string }[] = [];
  for (const e of events) {
    if (e.type === 'content') content += e.text;
    else if (e.type === 'call') {
      expect(e.index).toBe(calls.length);
      expect(e.id).toMatch(/^call_[0-9a-f]{24}$/);
      calls.push({ name: e.name, args: '' });
    } else {
      expect(calls[e.index], 'arguments before the call started').toBeDefined();
      calls[e.index]!.args += e.text;
    }
  }
  return { content: content.trim() ? content : null, calls: calls.map((c) => ({ name: c.name, args: JSON.parse(c.args) })), rawArgs: calls.map((c) => c.args) };
}

function streamPieces(format: ToolCallFormat, pieces: string[], maxCalls?: number): ToolStreamEvent[] {
  const s = new ToolCallStream(format, maxCalls);
  const ev: ToolStreamEvent[] = [];
  for (const p of pieces) ev.push(...s.push(p));
  ev.push(...s.finish());
  return ev;
}

describe('tool-call parsers', () => {
  it.each(CASES.map((c, i) => [i, c.format, c] as const))('case %i (%s): whole output', (_i, _f, c) => {
    const r = ToolCallStream.parse(fmt(c.format), c.text, c.maxCalls);
    expect(r.content).toBe(c.want.content);
    expect(r.calls.map((k) => ({ name: k.function.name, args: JSON.parse(k.function.arguments) }))).toEqual(c.want.calls);
    for (const k of r.calls) {
      expect(k.type).toBe('function');
      expect(k.id).toMatch(/^call_/);
    }
  });

  it.each(CASES.map((c, i) => [i, c.format, c] as const))('case %i (%s): streamed, split at every boundary and per character', (_i, _f, c) => {
    const f = fmt(c.format);
    const whole = ToolCallStream.parse(f, c.text, c.maxCalls);
    const wholeArgs = whole.calls.map((k) => k.function.arguments);
    const chars = [...c.text]; // code points: deltas never split a character
    const splits: string[][] = [chars];
    for (let i = 0; i <= chars.length; i++) splits.push([chars.slice(0, i).join(''), chars.slice(i).join('')]);
    for (let i = 1; i < chars.length; i += 3) splits.push([chars.slice(0, i).join(''), chars.slice(i, i + 2).join(''), chars.slice(i + 2).join('')]);
    for (const pieces of splits) {
      const got = replay(streamPieces(f, pieces, c.maxCalls));
      const at = JSON.stringify(pieces.map((p) => p.length));
      expect(got.content, at).toBe(c.want.content);
      expect(got.calls, at).toEqual(c.want.calls);
      expect(got.rawArgs, at).toEqual(wholeArgs); // the fragments add up to the non-streamed arguments
    }
  });

  it('streams arguments as they are written, with the name first', () => {
    const s = new ToolCallStream(fmt('hermes'));
    const text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>';
    const events: ToolStreamEvent[] = [];
    for (const ch of text) events.push(...s.push(ch));
    events.push(...s.finish());
    expect(events[0]).toMatchObject({ type: 'call', index: 0, name: 'get_weather' });
    const frags = events.filter((e) => e.type === 'args');
    expect(frags.length).toBeGreaterThan(10); // fragment by fragment, not one blob at the end
    expect(events.some((e) => e.type === 'content')).toBe(false);
  });

  it('a truncated call streams its start; the whole-output view gives the text back as content', () => {
    const text = 'x <tool_call>\n{"name": "f", "arguments": {"a": "b';
    const ev = streamPieces(fmt('hermes'), [text]);
    expect(ev.filter((e) => e.type === 'call')).toHaveLength(1);
    expect(ToolCallStream.parse(fmt('hermes'), text)).toEqual({ content: text, calls: [] });
  });

  it('picks the format from the chat template, else the family', () => {
    expect(detectToolFormat('{{ "<tool_call>" }}')).toBe('hermes');
    expect(detectToolFormat('[AVAILABLE_TOOLS] {{ "[TOOL_CALLS]" }}')).toBe('mistral');
    expect(detectToolFormat('<start_function_call>')).toBe('gemma4');
    expect(detectToolFormat('{{ "<|tool_call>call:" }}')).toBe('gemma4');
    expect(fmt('gemma4').needsSpecialTokens).toBe(true);
    expect(fmt('gemma').needsSpecialTokens).toBe(false);
    expect(detectToolFormat('<|start_header_id|>ipython<|python_tag|>')).toBe('llama3_json');
    expect(detectToolFormat('<start_of_turn>', 'gemma3')).toBe('gemma');
    expect(detectToolFormat(' [INST] ', 'llama')).toBe('llama3_json');
    expect(detectToolFormat(null, 'qwen3')).toBe('hermes');
    expect(fmt('mistral').needsSpecialTokens).toBe(true);
    expect(fmt('hermes').needsSpecialTokens).toBe(false);
  });
});
