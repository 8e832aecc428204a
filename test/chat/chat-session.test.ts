// The slash commands of `rapid chat` apart from the terminal: what each does to the conversation,
// and the errors it gives; plus the command's refusal without a terminal.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ChatBackend } from '../../src/chat/chat-backend.js';
import { ChatSession } from '../../src/chat/chat-session.js';

const root = resolve(import.meta.dirname, '..', '..');
const tmp = mkdtempSync(join(tmpdir(), 'rapid-chat-session-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// The session only reads these three fields; replies are exercised in chat-tmux.test.ts.
const backend = (acceptsImages: boolean | null): ChatBackend => ({
  model: 'm',
  contextLength: 2048,
  acceptsImages,
  reply: () => {
    throw new Error('not used here');
  },
  close: async () => undefined,
});

describe('ChatSession', () => {
  it('builds each request from the system message, the turns and the pending images', () => {
    const s = new ChatSession(backend(true), 'be brief');
    expect(s.handle('/image examples/shapes.png')).toEqual({ kind: 'notice', text: 'shapes.png attached to your next message' });
    expect(s.handle('  what is this?  ')).toEqual({ kind: 'send', text: 'what is this?' });
    const { user, turns } = s.withMessage('what is this?');
    expect(user.images).toEqual([join(process.cwd(), 'examples', 'shapes.png')]);
    expect(turns.map((t) => t.role)).toEqual(['system', 'user']);
    s.commit(user, 'shapes', 120);
    expect(s.pendingImages).toEqual([]);
    expect(s.contextUsed).toBe(120);
    expect(s.withMessage('and now?').turns.map((t) => t.role)).toEqual(['system', 'user', 'assistant', 'user']);
    expect(s.handle('/system')).toEqual({ kind: 'notice', text: 'system message cleared' });
    expect(s.withMessage('x').turns[0]!.role).toBe('user');
    expect(s.handle('/reset')).toEqual({ kind: 'notice', text: 'conversation cleared' });
    expect(s.turns).toEqual([]);
    expect(s.contextUsed).toBeNull();
  });

  it('/schema, /save, /help, /quit and the errors', () => {
    const s = new ChatSession(backend(false));
    const schemaFile = join(tmp, 's.json');
    writeFileSync(schemaFile, '{"type":"object"}');
    expect(s.handle(`/schema ${schemaFile}`)).toEqual({ kind: 'notice', text: 'replies follow s.json' });
    expect(s.schema?.value).toEqual({ type: 'object' });
    writeFileSync(join(tmp, 'bad.json'), '[1]');
    expect(s.handle(`/schema ${join(tmp, 'bad.json')}`)).toMatchObject({ kind: 'error', text: expect.stringMatching(/a JSON Schema is an object/) });
    expect(s.handle('/schema nope.json')).toEqual({ kind: 'error', text: 'nope.json: no such file' });
    expect(s.handle('/schema off')).toEqual({ kind: 'notice', text: 'replies are free text again' });
    expect(s.handle('/image examples/shapes.png')).toEqual({ kind: 'error', text: 'm does not accept images (no vision tower)' });
    const { user } = s.withMessage('hi');
    s.commit(user, 'hello', 10);
    const saved = join(tmp, 'c.json');
    expect(s.handle(`/save ${saved}`)).toEqual({ kind: 'notice', text: `saved 2 messages to ${saved}` });
    expect(JSON.parse(readFileSync(saved, 'utf8'))).toEqual({ model: 'm', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] });
    expect(s.handle('/help').kind).toBe('notice');
    expect(s.handle('/quit')).toEqual({ kind: 'quit' });
    expect(s.handle('/frobnicate')).toEqual({ kind: 'error', text: 'unknown command /frobnicate; /help lists them' });
  });
});

describe('rapid chat without a terminal', () => {
  it('says to use rapid run, before loading anything', () => {
    const r = spawnSync(process.execPath, ['bin/rapid.js', 'chat'], { cwd: root, input: 'hi\n', encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/rapid chat needs a terminal; for a prompt on a pipe use `rapid run`/);
  });
});
