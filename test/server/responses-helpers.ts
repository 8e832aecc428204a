// A real server over a scripted native model for /v1/responses client tests: the model writes,
// byte by byte through the real Engine, the script named by the last user or tool message of its
// prompt (byteModel renders "role: content" lines). Script "echo" writes the prompt back.
import { Engine } from '../../src/engine/engine.js';
import { FakeModel } from '../../src/engine/fake-runner.js';
import type { GrammarProvider } from '../../src/engine/grammar/grammar-service.js';
import type { NativeImageEmbedding, NativeModel, NativeModelInfo, NativeStepPlan, NativeStepResult } from '../../src/native/types.js';
import { createServer, type RapidServer, type ServerOptions } from '../../src/server/server.js';
import type { ServedVision } from '../../src/server/served-model.js';
import { byteTextStream } from '../engine/helpers.js';
import { byteModel } from './helpers.js';

const EOS = 0;

class ScriptedModel implements NativeModel {
  private readonly base = new FakeModel({ contextLength: 4096, numBlocks: 2048, blockSize: 4 });
  private readonly ctx = new Map<string, number[]>();
  /** Where each request's output starts: the context length at its first sample. */
  private readonly starts = new Map<string, number>();
  constructor(private readonly scripts: Record<string, string>) {}
  info(): NativeModelInfo {
    return this.base.info();
  }
  encodeImage(): Promise<NativeImageEmbedding> {
    return Promise.reject(new Error('no vision'));
  }
  close(): void {}
  async step(plan: NativeStepPlan): Promise<NativeStepResult> {
    await new Promise<void>((r) => setImmediate(r));
    const rows = plan.rows.map((row) => {
      const prev = this.ctx.get(row.requestId) ?? [];
      const ctx = [...prev.slice(0, row.contextLen), ...row.tokens];
      this.ctx.set(row.requestId, ctx);
      if (!row.sample) return { requestId: row.requestId };
      const start = this.starts.get(row.requestId) ?? ctx.length;
      this.starts.set(row.requestId, start);
      const text = Buffer.from(ctx.slice(0, start)).toString('latin1');
      const at = text.lastIndexOf('assistant:');
      const prompt = text.slice(0, at);
      const key = /(?:^|\n)(?:user|tool): ([^\n]*)\n(?![\s\S]*\n(?:user|tool): )/.exec(prompt)?.[1] ?? '';
      const script = Buffer.from(key === 'echo' ? prompt : (this.scripts[key] ?? 'no script'), key === 'echo' ? 'latin1' : 'utf8');
      const done = ctx.length - start;
      return { requestId: row.requestId, token: done < script.length ? script[done]! : EOS };
    });
    return { rows, timings: { forwardMs: 0, sampleMs: 0, tokens: 0 } };
  }
}

export interface ScriptedServer {
  server: RapidServer;
  url: string;
  logs: string[];
}

/** A hermes-format (Qwen-style) tool-capable server; `reasoning`: a thinking model. */
export async function startScriptedServer(
  scripts: Record<string, string>,
  opts: { reasoning?: boolean; grammar?: GrammarProvider; vision?: ServedVision; server?: Partial<ServerOptions> } = {},
): Promise<ScriptedServer> {
  const engine = new Engine({ model: new ScriptedModel(scripts), newTextStream: () => byteTextStream(), stopTokenIds: [EOS], enablePrefixCache: false });
  const logs: string[] = [];
  const server = createServer({
    engine,
    model: { ...byteModel(engine.contextLength), toolFormat: 'hermes', reasoning: opts.reasoning ?? false, ...(opts.vision ? { vision: opts.vision } : {}) },
    grammar: opts.grammar,
    log: (l) => logs.push(l),
    ...opts.server,
  });
  const { url } = await server.listen(0, '127.0.0.1');
  return { server, url, logs };
}

/** The SSE events of a raw streamed response, in order. */
export function sseEvents(text: string): { event: string; data: Record<string, unknown> }[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim() && !b.startsWith(':'))
    .map((b) => {
      const event = /^event: (.*)$/m.exec(b)?.[1] ?? '';
      const data = JSON.parse(/^data: (.*)$/m.exec(b)![1]!) as Record<string, unknown>;
      return { event, data };
    });
}
