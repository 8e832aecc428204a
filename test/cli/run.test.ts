// `rapid run` end to end through the real CLI binary: greedy output equals transformers' with a raw and a
// chat-template prompt, --json has the documented shape, and bad input fails with a clear message. Every
// family's greedy tokens are checked in process (test/model/parity.test.ts, test/unit/template-parity.test.ts);
// each spawn here costs a second or more, so the CLI path runs on one fixture per prompt kind.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';

const root = resolve(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'rapid.js');
const fixtures = join(root, 'test', 'fixtures', 'models');

interface Reference {
  prompts: { ids: number[]; greedy: number[]; text?: string; messages?: { role: string; content: string }[] }[];
}

function rapid(args: string[], input?: string) {
  return spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', input, timeout: 60_000 });
}

function reference(model: string): Reference {
  return JSON.parse(readFileSync(join(fixtures, model, 'reference.json'), 'utf8')) as Reference;
}

/** Greedy tokens up to and including the first stop token (rapid ends there; the reference runs on). */
function untilStop(greedy: number[], stops: number[], max: number): number[] {
  const out: number[] = [];
  for (const t of greedy.slice(0, max)) {
    out.push(t);
    if (stops.includes(t)) break;
  }
  return out;
}

function stopIds(model: string): number[] {
  const g = JSON.parse(readFileSync(join(fixtures, model, 'generation_config.json'), 'utf8')) as { eos_token_id: number | number[] };
  return Array.isArray(g.eos_token_id) ? g.eos_token_id : [g.eos_token_id];
}

describe.skipIf(!nativeAvailable())('rapid run', () => {
  it.each(['qwen2-f32'])(
    '%s: --raw greedy tokens equal transformers',
    (model) => {
      const ref = reference(model).prompts[0];
      const r = rapid(['run', join(fixtures, model), '--raw', '--prompt', ref.text ?? '', '--temperature', '0', '--max-tokens', '16', '--precision', 'exact', '--json']);
      expect(r.status, r.stderr).toBe(0);
      const out = JSON.parse(r.stdout) as { token_ids: number[]; usage: { prompt_tokens: number } };
      expect(out.usage.prompt_tokens).toBe(ref.ids.length);
      expect(out.token_ids).toEqual(untilStop(ref.greedy, stopIds(model), 16));
    },
  );

  it.each(['gemma3-f32'])('%s: the chat template prompt gives transformers\' greedy tokens', (model) => {
    const ref = reference(model).prompts.find((p) => p.messages)!;
    const prompt = ref.messages![0].content;
    const r = rapid(['run', join(fixtures, model), '--prompt', prompt, '--temperature', '0', '--max-tokens', '12', '--precision', 'exact', '--json']);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { token_ids: number[]; usage: { prompt_tokens: number } };
    expect(out.usage.prompt_tokens).toBe(ref.ids.length);
    expect(out.token_ids).toEqual(untilStop(ref.greedy, stopIds(model), 12));
  });

  it('--json reports text, token ids, finish reason, usage and timings; plain mode streams the same text', () => {
    const args = ['run', join(fixtures, 'qwen3-q8'), '--prompt', 'hi', '--max-tokens', '10', '--seed', '7', '--temperature', '0.8'];
    const json = rapid([...args, '--json']);
    expect(json.status, json.stderr).toBe(0);
    const out = JSON.parse(json.stdout) as Record<string, unknown>;
    expect(Object.keys(out).sort()).toEqual(['device', 'finish_reason', 'text', 'timings', 'token_ids', 'usage']);
    expect(['stop', 'length']).toContain(out.finish_reason);
    expect(out.usage).toMatchObject({ completion_tokens: (out.token_ids as number[]).length });
    expect(out.timings).toHaveProperty('decode_tokens_per_second');
    const plain = rapid(args);
    expect(plain.status, plain.stderr).toBe(0);
    expect(plain.stdout).toBe(`${out.text as string}\n`);
    // Same seed, same output; another seed, another output.
    const again = JSON.parse(rapid([...args, '--json']).stdout) as { token_ids: number[] };
    expect(again.token_ids).toEqual(out.token_ids);
    const other = JSON.parse(rapid([...args.slice(0, -1), '8', '--json']).stdout) as { token_ids: number[] };
    expect(other.token_ids).not.toEqual(out.token_ids);
  });

  it('reads the prompt from stdin and honours --system and --stop', () => {
    const base = ['run', join(fixtures, 'qwen2-f32'), '--temperature', '0', '--max-tokens', '24', '--json', '--precision', 'exact'];
    const piped = rapid(base, 'Tell me something.');
    expect(piped.status, piped.stderr).toBe(0);
    const a = JSON.parse(piped.stdout) as { text: string; usage: { prompt_tokens: number } };
    const withSystem = JSON.parse(rapid([...base, '--prompt', 'Tell me something.', '--system', 'Be terse.']).stdout) as {
      usage: { prompt_tokens: number };
    };
    expect(withSystem.usage.prompt_tokens).not.toBe(a.usage.prompt_tokens);
    const cut = a.text.slice(3, 5);
    if (cut.trim().length === 2) {
      const stopped = JSON.parse(rapid([...base, '--stop', cut], 'Tell me something.').stdout) as { text: string; finish_reason: string };
      expect(stopped.finish_reason).toBe('stop');
      expect(stopped.text).toBe(a.text.slice(0, a.text.indexOf(cut)));
    }
  });

  it.each([
    [['run', '/nonexistent/model', '--prompt', 'x'], /not found|no such/i],
    [['run', join(fixtures, 'qwen2-f32'), '--prompt', 'x', '--max-tokens', 'abc'], /--max-tokens expects an integer/],
    [['run', join(fixtures, 'qwen2-f32'), '--prompt', 'x', '--top-p', '0'], /top_p: must be in \(0, 1\]/],
    [['run', join(fixtures, 'qwen2-f32'), '--prompt', 'x', '--precision', 'fastest'], /--precision must be exact or fast/],
    [['run', join(root, 'test'), '--prompt', 'x'], /not a model directory.*config\.json/],
  ])('fails clearly: %j', (args, message) => {
    const r = rapid(args);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(message);
  });
});
