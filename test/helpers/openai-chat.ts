// The openai client on a real-model server and one chat completion's text, streamed or not: the
// structured-output sweeps send both kinds and compare them with the same assertions.
import OpenAI from 'openai';
import type { InlineServeOptions } from '../../src/app/start-server.js';

/** The serve options of the structured-output tests: exact precision, a small KV pool, 16 sequences. */
export function fixtureServeOptions(servedModelName: string, extra: InlineServeOptions = {}): InlineServeOptions & { port: number } {
  return { port: 0, threads: 2, precision: 'exact', kvCacheMemory: 32 << 20, blockSize: 16, maxNumSeqs: 16, servedModelName, ...extra };
}

/** A client for a server started on a fixture checkpoint (native steps are slow on 2 cores: 60 s). */
export function servedClient(url: string): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 60_000 });
}

export interface ChatText {
  text: string;
  finish: string | null;
}

/** The content and finish reason of one completion; streamed, the deltas are joined. */
export async function chatText(client: OpenAI, body: OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming, stream: boolean): Promise<ChatText> {
  if (!stream) {
    const r = await client.chat.completions.create(body);
    return { text: r.choices[0]!.message.content ?? '', finish: r.choices[0]!.finish_reason };
  }
  const s = await client.chat.completions.create({ ...body, stream: true });
  let text = '';
  let finish: string | null = null;
  for await (const c of s) {
    text += c.choices[0]?.delta.content ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}
