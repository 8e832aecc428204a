// The state of one `rapid chat` conversation and its slash commands, apart from the terminal UI:
// turns, the system message, images waiting for the next message and the schema of the replies.
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import type { ChatBackend, ChatTurn } from './chat-backend.js';

export const HELP = [
  '/image PATH    attach an image to your next message (repeatable)',
  '/schema FILE   replies follow this JSON Schema; /schema off',
  '/system TEXT   set the system message (/system alone clears it)',
  '/reset         start over (keeps the system message and the schema)',
  '/save FILE     write the conversation as JSON',
  '/help          this list',
  '/quit          leave (or Ctrl-C twice at the prompt; Ctrl-C during a reply stops it)',
].join('\n');

/** What the UI does with a line the user entered. */
export type LineAction = { kind: 'send'; text: string } | { kind: 'notice'; text: string } | { kind: 'error'; text: string } | { kind: 'quit' };

export class ChatSession {
  system: string | undefined;
  turns: ChatTurn[] = [];
  pendingImages: string[] = [];
  schema: { file: string; value: Record<string, unknown> } | null = null;
  /** Tokens of the conversation after the last reply (prompt + reply); null before one. */
  contextUsed: number | null = null;

  constructor(readonly backend: ChatBackend, system?: string) {
    this.system = system;
  }

  /** The conversation with the user's next message, as the backend gets it. */
  withMessage(text: string): { user: ChatTurn; turns: ChatTurn[] } {
    const user: ChatTurn = { role: 'user', content: text, ...(this.pendingImages.length > 0 ? { images: this.pendingImages } : {}) };
    const system: ChatTurn[] = this.system !== undefined ? [{ role: 'system', content: this.system }] : [];
    return { user, turns: [...system, ...this.turns, user] };
  }

  /** Records a finished exchange; the images it carried are no longer pending. */
  commit(user: ChatTurn, reply: string, contextUsed: number | null): void {
    this.turns.push(user, { role: 'assistant', content: reply });
    this.pendingImages = [];
    this.contextUsed = contextUsed;
  }

  handle(line: string): LineAction {
    const text = line.trim();
    if (!text.startsWith('/')) return { kind: 'send', text };
    const space = text.search(/\s/);
    const name = (space < 0 ? text : text.slice(0, space)).toLowerCase();
    const arg = space < 0 ? '' : text.slice(space + 1).trim();
    try {
      switch (name) {
        case '/image':
          return this.attach(arg);
        case '/schema':
          return this.setSchema(arg);
        case '/system':
          this.system = arg === '' ? undefined : arg;
          return { kind: 'notice', text: arg === '' ? 'system message cleared' : 'system message set' };
        case '/reset':
          this.turns = [];
          this.pendingImages = [];
          this.contextUsed = null;
          return { kind: 'notice', text: 'conversation cleared' };
        case '/save':
          return this.save(arg);
        case '/help':
          return { kind: 'notice', text: HELP };
        case '/quit':
        case '/exit':
          return { kind: 'quit' };
        default:
          return { kind: 'error', text: `unknown command ${name}; /help lists them` };
      }
    } catch (err) {
      return { kind: 'error', text: (err as Error).message };
    }
  }

  private attach(arg: string): LineAction {
    if (arg === '') return { kind: 'error', text: 'usage: /image PATH' };
    if (this.backend.acceptsImages === false) return { kind: 'error', text: `${this.backend.model} does not accept images (no vision tower)` };
    const file = resolve(arg);
    if (!existsSync(file) || !statSync(file).isFile()) return { kind: 'error', text: `${arg}: no such file` };
    this.pendingImages = [...this.pendingImages, file];
    const n = this.pendingImages.length;
    return { kind: 'notice', text: `${basename(file)} attached to your next message${n > 1 ? ` (${n} images)` : ''}` };
  }

  private setSchema(arg: string): LineAction {
    if (arg === '') return { kind: 'error', text: 'usage: /schema FILE or /schema off' };
    if (arg === 'off') {
      this.schema = null;
      return { kind: 'notice', text: 'replies are free text again' };
    }
    let value: unknown;
    try {
      value = JSON.parse(readFileSync(arg, 'utf8'));
    } catch (err) {
      throw new Error(`${arg}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${arg}: a JSON Schema is an object`);
    this.schema = { file: arg, value: value as Record<string, unknown> };
    return { kind: 'notice', text: `replies follow ${basename(arg)}` };
  }

  private save(arg: string): LineAction {
    if (arg === '') return { kind: 'error', text: 'usage: /save FILE' };
    const doc = {
      model: this.backend.model,
      ...(this.system !== undefined ? { system: this.system } : {}),
      ...(this.schema ? { schema: this.schema.value } : {}),
      messages: this.turns,
    };
    writeFileSync(arg, `${JSON.stringify(doc, null, 2)}\n`);
    return { kind: 'notice', text: `saved ${this.turns.length} messages to ${arg}` };
  }
}
