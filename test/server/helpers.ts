// A server on the fake runner for HTTP tests: byte tokens, a trivial chat format, a real Engine.
import OpenAI from 'openai';
import type { EngineOptions } from '../../src/engine/engine.js';
import type { FakeModelOptions } from '../helpers/fake-runner.js';
import { createServer, type RapidServer, type ServerOptions } from '../../src/server/server.js';
import type { ServedModel } from '../../src/server/served-model.js';
import type { ChatMessage } from '../../src/template/chat-template.js';
import { bytes, makeEngine } from '../engine/helpers.js';

export const MODEL_ID = 'fake-model';

/** Byte tokens and a trivial chat format, encoded synchronously. */
export function byteModel(contextLength: number, vocabSize = 256): Omit<ServedModel, 'encodeChat'> & { encodeChat(messages: ChatMessage[]): number[] } {
  return {
    id: MODEL_ID,
    created: 1_700_000_000,
    contextLength,
    vocabSize,
    defaults: {},
    encodeChat: (messages: ChatMessage[]) =>
      bytes(
        messages.map((m) => `${m.role}: ${typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text ?? '').join('')}\n`).join('') +
          'assistant:',
      ),
    encodeText: (text) => bytes(text),
    tokenText: (id) => String.fromCharCode(id),
  };
}

export async function startFakeServer(
  fake: FakeModelOptions = {},
  engineOpts: Partial<EngineOptions> = {},
  serverOpts: Partial<ServerOptions> = {},
) {
  const { engine, model } = makeEngine({ contextLength: 256, numBlocks: 256, ...fake }, engineOpts);
  const server: RapidServer = createServer({ engine, model: byteModel(engine.contextLength), ...serverOpts });
  const { url } = await server.listen(0, '127.0.0.1');
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: serverOpts.apiKey ?? 'unused', maxRetries: 0, timeout: 20_000 });
  return { engine, model, server, url, client };
}

export async function raw(url: string, path: string, init: RequestInit = {}): Promise<{ status: number; headers: Headers; text: string; json: () => any }> {
  const res = await fetch(`${url}${path}`, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) };
}

export function post(url: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  return raw(url, path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}
